"""Text preparation for any language (pseudopairs.data.tokenizers; config/README.md): Moses for
the languages it has rules for (unchanged, on real Multi30K text), ICU word boundaries and a
SentencePiece model trained on the run's own training captions for the others (real Japanese,
Chinese, Thai and Korean captions written here), chosen per language in the config; a language
with no tokenizer is refused when the config is read, naming the key."""

from __future__ import annotations

import argparse
import copy
import gzip

import pandas as pd
import pytest

from conftest import REPO, run_snakemake
from pseudopairs.workflow.config import ConfigError, check_config, load_config
from pseudopairs.data import text as T
from pseudopairs.data import text_contract, text_step
from pseudopairs.data import tokenizers as K
from pseudopairs.core.io import RAW_CAPTION_COLUMNS

JAPANESE = [
    "二匹の犬が公園で遊んでいる。",
    "赤いシャツを着た男性が自転車に乗っている。",
    "海辺で女の子が凧を揚げている。",
]
CHINESE = ["一个穿红色衬衫的男人在骑自行车。", "两只狗在草地上奔跑。", "一位老人坐在公园的长椅上看报纸。"]
THAI = ["ผู้ชายใส่เสื้อสีแดงกำลังขี่จักรยาน", "สุนัขสองตัววิ่งเล่นในสวน"]
KOREAN = ["두 마리의 개가 공원에서 놀고 있다.", "빨간 셔츠를 입은 남자가 자전거를 타고 있다."]


def run_cli(module, *argv: str):
    parser = argparse.ArgumentParser(prog="pseudopairs")
    module.register_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return args.func(args)


def raw_table(rows) -> pd.DataFrame:
    """(split, image_id, lang, caption_idx, raw) rows as a raw caption table."""
    frame = pd.DataFrame([("demo", *row) for row in rows], columns=RAW_CAPTION_COLUMNS)
    return frame


# --------------------------------------------------------------------------------------------
# Moses: the languages it has rules for, unchanged


def test_the_moses_languages_are_sacremoses_prefix_languages_written_with_spaces():
    from sacremoses.corpus import NonbreakingPrefixes

    prefixes = {code for code in NonbreakingPrefixes().available_langs.values() if len(code) == 2}
    assert K.MOSES_LANGS == prefixes - {"zh"}          # Moses does not segment Chinese
    assert {"en", "de", "fr", "cs"} <= K.MOSES_LANGS and not {"ja", "th", "ko", "zh"} & K.MOSES_LANGS


@pytest.mark.parametrize("lang", ["en", "de", "fr", "cs"])
def test_moses_languages_are_prepared_exactly_as_before_on_real_multi30k(multi30k_root, lang):
    """The shipped configurations' languages go through the unchanged recipe: a caption table of
    real Multi30K captions prepared with no tokenizer named is line for line prepare_line's."""
    with gzip.open(multi30k_root / "task1" / "raw" / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
        lines = [f.readline().rstrip("\n") for _ in range(60)]
    frame = raw_table([("test", str(i), lang, 0, line) for i, line in enumerate(lines)])
    prepared = T.prepare_captions(frame, case="lowercase")["text"].tolist()
    assert prepared == [T.prepare_line(line, lang=lang) for line in lines]
    assert T.prepare_captions(frame, case="lowercase", tokenizers={lang: None})["text"].tolist() == prepared
    first = {"en": "a man in an orange hat starring at something .",
             "de": "ein mann mit einem orangefarbenen hut , der etwas anstarrt .",
             "fr": "un homme avec un chapeau orange regardant quelque chose .",
             "cs": "muž v oranžovém klobouku na něco zírá ."}
    assert prepared[0] == first[lang]


# --------------------------------------------------------------------------------------------
# ICU word boundaries


def test_icu_segments_japanese_chinese_thai_and_korean_captions():
    icu = K.TOKENIZERS.get("icu").load
    assert icu("ja", None)(JAPANESE[0]) == "二 匹 の 犬 が 公園 で 遊 んで いる 。"
    assert icu("ja", None)(JAPANESE[2]) == "海辺 で 女の子 が 凧 を 揚げ て いる 。"
    assert icu("zh", None)(CHINESE[2]) == "一位 老人 坐在 公园 的 长椅 上 看 报纸 。"
    assert icu("zh", None)(CHINESE[1]) == "两 只 狗 在 草地 上 奔跑 。"
    # NFC, not NFKC: NFKC would split SARA AM (ำ) and break กำลัง into แด งกํา ลัง
    assert icu("th", None)(THAI[0]) == "ผู้ชาย ใส่ เสื้อ สี แดง กำลัง ขี่ จักรยาน"
    assert icu("ko", None)(KOREAN[1]) == "빨간 셔츠를 입은 남자가 자전거를 타고 있다 ."
    assert icu("ja", None)("   ") == ""


def test_a_table_of_several_languages_gets_each_its_tokenizer_and_lowercase(tmp_path):
    frame = raw_table([("train", "1", "en", 0, "A Man rides a BIKE."), ("train", "1", "ja", 0, JAPANESE[1]),
                       ("train", "2", "th", 0, THAI[1])])
    frame.to_parquet(tmp_path / "raw.parquet", index=False)
    run_cli(text_step, "prepare-captions", "--input", str(tmp_path / "raw.parquet"), "--output",
            str(tmp_path / "out.parquet"), "--case", "lowercase", "--tokenizer", "ja=icu", "--tokenizer", "th=icu")
    out = pd.read_parquet(tmp_path / "out.parquet")
    assert out["text"].tolist() == ["a man rides a bike .", "赤い シャツ を 着 た 男性 が 自転車 に 乗 って いる 。",
                                    "สุนัข สอง ตัว วิ่ง เล่น ใน สวน"]
    # Thai without a tokenizer: refused, naming the option and the config key
    with pytest.raises(ValueError, match=r"Moses has no rules for language 'th' .*'text\.tokenizers\.th'"):
        T.prepare_captions(frame, case="lowercase", tokenizers={"ja": K.TOKENIZERS.get("icu").load("ja", None)})


# --------------------------------------------------------------------------------------------
# SentencePiece trained on the run's training captions


def _japanese_table() -> pd.DataFrame:
    """Training captions built from real caption phrases, and a validation caption whose word
    (ペンギン) the training split never has."""
    subjects = ["男性", "女性", "子供", "犬", "猫", "老人", "女の子", "男の子"]
    actions = ["公園で遊んでいる", "自転車に乗っている", "海辺を歩いている", "ボールを投げている", "本を読んでいる"]
    rows = [("train", f"{i}", "ja", j, f"{s}が{a}。")
            for i, s in enumerate(subjects) for j, a in enumerate(actions)]
    rows.append(("val", "v1", "ja", 0, "ペンギンがペンギンを見ている。"))
    rows.append(("train", "e1", "en", 0, "A dog runs in the park."))
    return raw_table(rows)


def test_sentencepiece_trains_on_the_training_split_only_deterministically(tmp_path):
    _japanese_table().to_parquet(tmp_path / "raw.parquet", index=False)
    args = ["train-sentencepiece", "--input", str(tmp_path / "raw.parquet"), "--lang", "ja", "--case", "lowercase",
            "--settings", '{"kind": "sentencepiece", "vocab_size": 60}']
    run_cli(text_step, *args, "--output", str(tmp_path / "a.model"))
    run_cli(text_step, *args, "--output", str(tmp_path / "b.model"))
    assert (tmp_path / "a.model").read_bytes() == (tmp_path / "b.model").read_bytes()
    processor = K.load_sentencepiece(tmp_path / "a.model")
    pieces = {processor.IdToPiece(i) for i in range(processor.GetPieceSize())}
    assert not any("ペ" in piece for piece in pieces)            # the validation caption is not read
    tokenize = K.TOKENIZERS.get("sentencepiece").load("ja", tmp_path / "a.model")
    tokens = tokenize("犬が公園で遊んでいる。").split(" ")
    assert len(tokens) > 1 and "".join(tokens).replace("▁", "") == "犬が公園で遊んでいる。"
    # the whole caption table, with the model named on the command line
    frame = _japanese_table()
    frame.to_parquet(tmp_path / "all.parquet", index=False)
    run_cli(text_step, "prepare-captions", "--input", str(tmp_path / "all.parquet"), "--output", str(tmp_path / "p.parquet"),
            "--case", "lowercase", "--tokenizer", f"ja=sentencepiece:{tmp_path / 'a.model'}")
    out = pd.read_parquet(tmp_path / "p.parquet")
    assert out.loc[out["lang"] == "en", "text"].tolist() == ["a dog runs in the park ."]
    assert out.loc[out["image_id"] == "4", "text"].iloc[0] == tokenize("猫が公園で遊んでいる。")
    with pytest.raises(ValueError, match="sentencepiece needs its model"):
        K.parse_tokenizers(["ja=sentencepiece"])
    with pytest.raises(FileNotFoundError, match="SentencePiece model not found"):
        K.load_tokenizers(K.parse_tokenizers([f"ja=sentencepiece:{tmp_path / 'absent.model'}"]))


def test_truecasing_runs_on_the_languages_own_tokens(tmp_path):
    """A caseless script keeps its tokens; a cased one in the same language is truecased."""
    icu = K.TOKENIZERS.get("icu").load("ja", None)
    texts = ["公園 は Tokyo に ある。", "犬 が Tokyo で 遊ぶ。", "猫 は tokyo に いる。"]
    truecaser = T.train_truecaser(texts, lang="ja", tokenizer=icu)
    assert T.prepare_line("TOKYO の猫。", lang="ja", case="truecase", truecaser=truecaser,
                          tokenizer=icu) == "Tokyo の 猫 。"


# --------------------------------------------------------------------------------------------
# The config: chosen per language, refused at parse time without one


def _config(**text) -> dict:
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")
    config["datasets"]["m30k.ja"] = {"corpus": "m30k", "lang": "ja"}
    config["text"] = {"case": "lowercase", **text}
    return config


def test_a_language_without_a_tokenizer_is_refused_when_the_config_is_read_naming_the_key():
    with pytest.raises(ConfigError, match=r"config key 'text\.tokenizers\.ja': language 'ja' \(data set\(s\) "
                                          r"m30k\.ja\) has no tokenizer: Moses has no rules for it"):
        check_config(_config())
    check_config(_config(tokenizers={"ja": "icu"}))
    with pytest.raises(ConfigError, match=r"config key 'text\.tokenizers\.ja': unknown tokenizer 'mecab'"):
        check_config(_config(tokenizers={"ja": "mecab"}))
    with pytest.raises(ConfigError, match=r"config key 'text\.tokenizers\.ja': unknown tokenizer 'mecab'"):
        check_config(_config(tokenizers={"ja": {"kind": "mecab"}}))
    with pytest.raises(ConfigError, match=r"config key 'text\.tokenizers\.ja\.vocab_size': 2 is less than the "
                                          r"minimum of 8"):
        check_config(_config(tokenizers={"ja": {"kind": "sentencepiece", "vocab_size": 2}}))
    with pytest.raises(ConfigError, match=r"config key 'text\.tokenizers\.ja': unknown key\(s\) 'size'"):
        check_config(_config(tokenizers={"ja": {"kind": "sentencepiece", "size": 2}}))
    with pytest.raises(ConfigError, match=r"config key 'text\.tokenizers\.ja': icu takes no vocab_size"):
        check_config(_config(tokenizers={"ja": {"kind": "icu", "vocab_size": 100}}))


def test_the_jobs_of_a_config_name_each_tokenizer_and_the_shipped_ones_keep_their_params():
    shipped = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")
    check_config(shipped)
    assert text_contract.preparation_key(shipped) == shipped["text"]["case"] == "lowercase"
    assert text_contract.prepare_inputs(shipped) == [] and text_contract.prepare_args(shipped) == []
    config = _config(tokenizers={"ja": {"kind": "sentencepiece", "vocab_size": 500}, "th": "icu"})
    config["datasets"]["m30k.th"] = {"corpus": "m30k", "lang": "th"}
    check_config(config)
    assert text_contract.sentencepiece_langs(config) == ["ja"]
    assert text_contract.prepare_inputs(config) == ["results/text/sentencepiece.ja.model"]
    assert text_contract.prepare_args(config) == ["--tokenizer", "ja=sentencepiece:results/text/sentencepiece.ja.model",
                                                  "--tokenizer", "th=icu"]
    key = text_contract.preparation_key(config)
    assert key.startswith("lowercase ja=") and '"vocab_size":500' in key and key.endswith('th={"kind":"icu"}')
    truecased = copy.deepcopy(config)
    truecased["text"]["case"] = "truecase"
    assert text_contract.model_inputs(truecased, "ja") == ["results/text/truecase.ja.model",
                                                           "results/text/sentencepiece.ja.model"]


def test_the_plan_trains_a_sentencepiece_model_from_the_training_split_and_prepares_with_it(tmp_path):
    mine = tmp_path / "ja.yaml"
    mine.write_text("datasets: {m30k.ja: {corpus: m30k, lang: ja}}\n"
                    "text: {case: lowercase, tokenizers: {ja: {kind: sentencepiece, vocab_size: 500}}}\n")
    result = run_snakemake(tmp_path, "-n", "-p", "--cores", "1", "results/text/sentencepiece.ja.model",
                           "results/captions/m30k/test.parquet", "--configfile", str(mine))
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "rule train_sentencepiece:" in out and "--lang ja --case lowercase" in out
    assert '"vocab_size":500' in out and "results/captions/raw/m30k/train.parquet" in out
    assert "--tokenizer ja=sentencepiece:results/text/sentencepiece.ja.model" in out
    refused = tmp_path / "none.yaml"
    refused.write_text("datasets: {m30k.ja: {corpus: m30k, lang: ja}}\n")
    result = run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", str(refused))
    assert result.returncode != 0 and "config key 'text.tokenizers.ja'" in result.stdout + result.stderr


def test_translations_into_a_language_moses_lacks_are_prepared_with_its_tokenizer():
    from pseudopairs.translation.moses import preparer

    with preparer(workers=0, lang="zh", case="lowercase", truecase_model=None, tokenizer=("icu", None)) as prepare:
        assert prepare([CHINESE[0]]) == ["一个 穿 红色 衬衫 的 男人 在 骑 自行 车 。"]
    with preparer(workers=0, lang="zh", case="lowercase", truecase_model=None) as prepare:
        with pytest.raises(ValueError, match=r"text\.tokenizers\.zh"):
            prepare([CHINESE[0]])


def test_a_file_that_is_not_a_sentencepiece_model_is_refused_naming_it(tmp_path):
    bad = tmp_path / "zh.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(ValueError, match=rf"{bad}: not a SentencePiece model"):
        K.load_tokenizers(K.parse_tokenizers([f"zh=sentencepiece:{bad}"]))
    with pytest.raises(ValueError, match="--tokenizer zh=icu:x: icu takes no model"):
        K.parse_tokenizers(["zh=icu:x"])
    with pytest.raises(ValueError, match="unknown tokenizer 'mecab'"):
        K.parse_tokenizers(["ja=mecab"])

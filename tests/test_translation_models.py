"""Translation with any CTranslate2 model (pseudopairs.translation.models, .converters): tiny
MarianMT, M2M100 and NLLB models with random weights, built offline from their transformers
configs with SentencePiece models trained on Multi30K text, saved as Hugging Face directories,
converted by ``convert-mt --spec`` (CTranslate2's TransformersConverter) and run through
``translate-captions``; a Marian native model (.npz, YAML vocabularies, decoder.yml: an OPUS-MT
release) made from the MarianMT's weights and converted by CTranslate2's MarianConverter; an
already converted directory. What is checked is the code path -- tokens, language codes,
conversion, decoding -- against the models' own tokenizers and CTranslate2's documented recipe,
not the (meaningless) translations. CPU, no network."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from pseudopairs import cli
from pseudopairs.workflow.config import ConfigError, check_config, load_config
from pseudopairs.core.io import CAPTION_COLUMNS, read_captions
from pseudopairs.translation import models as MD
from pseudopairs.translation.converters import prepare_model
from pseudopairs.translation.convert import open_model_dir
from pseudopairs.translation.settings import TranslateSettings
from pseudopairs.translation.translate import load_translator, translate_captions, translate_texts

from conftest import REPO, run_snakemake

torch.set_num_threads(1)

VALUES = dict(beam_size=2, device="cpu", compute_type="float32", intra_threads=1, max_batch_size=256, chunk_size=3,
              max_decoding_length=12, length_penalty=1.0)  # the config's translation.translate values
SETTINGS = TranslateSettings.from_dict(dict(VALUES))
TINY = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128, init_std=1.0)


def _lines(root: Path, lang: str) -> list[str]:
    with gzip.open(root / "task1" / "raw" / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def _spm(lines: list[str], prefix: Path, *, vocab_size: int, **ids) -> Path:
    import sentencepiece as spm

    prefix.parent.mkdir(parents=True, exist_ok=True)
    text = prefix.with_suffix(".txt")
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(prefix), vocab_size=vocab_size,
                                   model_type="unigram", character_coverage=1.0, minloglevel=2,
                                   num_threads=1, **ids)
    return prefix.with_suffix(".model")


def _pieces(model: Path) -> list[str]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def _marian(root: Path, en: list[str], de: list[str]) -> Path:
    """A MarianMT (OPUS-MT layout: source.spm, target.spm, a joint vocab.json ending in <pad>)."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    folder = root / "marian"
    folder.mkdir()
    ids = dict(bos_id=-1, eos_id=0, unk_id=1, pad_id=-1)  # Marian's: </s> 0, <unk> 1
    shutil.copyfile(_spm(en, root / "spm" / "marian_en", vocab_size=200, **ids), folder / "source.spm")
    shutil.copyfile(_spm(de, root / "spm" / "marian_de", vocab_size=200, **ids), folder / "target.spm")
    vocab: dict[str, int] = {}
    for piece in _pieces(folder / "source.spm") + _pieces(folder / "target.spm"):
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    MarianTokenizer(source_spm=str(folder / "source.spm"), target_spm=str(folder / "target.spm"),
                    vocab=str(folder / "vocab.json"), source_lang="en", target_lang="de").save_pretrained(folder)
    torch.manual_seed(1)
    config = MarianConfig(vocab_size=len(vocab), pad_token_id=len(vocab) - 1, eos_token_id=0,
                          decoder_start_token_id=len(vocab) - 1, forced_eos_token_id=0, scale_embedding=True,
                          activation_function="swish", **TINY)
    model = MarianMTModel(config)
    with torch.no_grad():  # a bias so that the logit bias path is exercised too
        model.final_logits_bias.normal_(0, 0.05)
    model.save_pretrained(folder)
    return folder


def _m2m100(root: Path, spm_model: Path) -> Path:
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

    folder = root / "m2m100"
    folder.mkdir()
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece in _pieces(spm_model)[3:]:
        vocab[piece] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    shutil.copyfile(spm_model, folder / "sentencepiece.bpe.model")
    tokenizer = M2M100Tokenizer(vocab_file=str(folder / "vocab.json"), spm_file=str(folder / "sentencepiece.bpe.model"),
                                src_lang="en", tgt_lang="de",
                                additional_special_tokens=[f"__{c}__" for c in FAIRSEQ_LANGUAGE_CODES["m2m100"]])
    tokenizer.save_pretrained(folder)
    torch.manual_seed(2)
    config = M2M100Config(vocab_size=len(tokenizer) + 8, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                          decoder_start_token_id=2, **TINY)
    M2M100ForConditionalGeneration(config).save_pretrained(folder)
    return folder


def _nllb(root: Path, spm_model: Path) -> Path:
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    folder = root / "nllb"
    folder.mkdir()
    shutil.copyfile(spm_model, folder / "sentencepiece.bpe.model")
    tokenizer = NllbTokenizer(vocab_file=str(folder / "sentencepiece.bpe.model"), src_lang="eng_Latn",
                              tgt_lang="deu_Latn")
    tokenizer.save_pretrained(folder)
    torch.manual_seed(3)
    config = M2M100Config(vocab_size=len(tokenizer), pad_token_id=1, bos_token_id=0, eos_token_id=2,
                          decoder_start_token_id=2, tokenizer_class="NllbTokenizer", **TINY)
    M2M100ForConditionalGeneration(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def text(multi30k_root):
    return {lang: _lines(multi30k_root, lang) for lang in ("en", "de", "fr")}


@pytest.fixture(scope="module")
def hf(tmp_path_factory, text):
    """The three Hugging Face directories (random weights, seeded)."""
    root = tmp_path_factory.mktemp("hf")
    fairseq = _spm(text["en"] + text["de"], root / "spm" / "fairseq", vocab_size=300)  # <unk> 0, <s> 1, </s> 2
    return {"marian": _marian(root, text["en"], text["de"]), "m2m100": _m2m100(root, fairseq),
            "nllb": _nllb(root, fairseq)}


def declare(name: str, **values) -> dict:
    """``convert-mt --spec`` of a declaration, as the workflow builds it from the config."""
    config = {"translation": {"models": {name: values}}}
    return MD.convert_spec(config, name, model_path=values["path"])


DECLARED = {
    "marian": dict(format="transformers", source_lang="en", target_lang="de"),
    "m2m100": dict(format="transformers", languages={"en": "en", "de": "de", "fr": "fr"}),
    "nllb": dict(format="transformers", languages={"en": "eng_Latn", "de": "deu_Latn", "fr": "fra_Latn"}),
}


@pytest.fixture(scope="module")
def converted(hf, tmp_path_factory):
    root = tmp_path_factory.mktemp("converted")
    return {name: (prepare_model(declare(name, path=str(hf[name]), **DECLARED[name]), root / name), root / name)
            for name in hf}


def reference(ct2_dir: Path, hf_dir: Path, texts: list[str], *, src: str | None, tgt: str | None) -> list[str]:
    """CTranslate2's documented recipe for a converted Transformers model: the model's own
    tokenizer (``src_lang``), ``target_prefix`` = the target language's token, decoded by the
    tokenizer without special tokens; the decoding options built here from the config's values
    (``VALUES``), not by the code under test, so a translate-captions that drops one of them
    (e.g. decodes greedily instead of with beam_size 2) disagrees with this reference."""
    import ctranslate2
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(hf_dir))
    if src is not None:
        tokenizer.src_lang = src
    sources = [tokenizer.convert_ids_to_tokens(tokenizer.encode(t)) for t in texts]
    prefix = [] if tgt is None else [tgt if "_" in tgt else f"__{tgt}__"]
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type="float32", intra_threads=1)
    options = {"beam_size": VALUES["beam_size"], "length_penalty": VALUES["length_penalty"],
               "max_decoding_length": VALUES["max_decoding_length"], "max_batch_size": VALUES["max_batch_size"],
               "batch_type": "tokens"}
    if prefix:
        options["target_prefix"] = [prefix] * len(sources)
    results = translator.translate_iterable(iter(sources), **options)
    return [tokenizer.decode(tokenizer.convert_tokens_to_ids(r.hypotheses[0][len(prefix):]), skip_special_tokens=True)
            for r in results]


def caption_table(path: Path, rows: list[tuple[str, str, int, str]]) -> Path:
    frame = pd.DataFrame([("c", "train", img, lang, idx, raw, raw.lower()) for img, lang, idx, raw in rows],
                         columns=CAPTION_COLUMNS)
    frame.to_parquet(path)
    return path


def test_hugging_face_models_read_text_as_their_own_tokenizers_do(hf, converted, text):
    """The tokens the pipeline feeds CTranslate2 (SentencePiece pieces with the family's tokens
    around them) are those of each model's own tokenizer, on 60 Multi30K sentences in three
    languages and both a source language token and none."""
    from transformers import AutoTokenizer

    sentences = text["en"][:20] + text["de"][:20] + text["fr"][:20]
    for name, (info, folder) in converted.items():
        model = open_model_dir(folder)
        vocab = set(json.loads((folder / "shared_vocabulary.json").read_text()))
        tokenizer = AutoTokenizer.from_pretrained(str(hf[name]))
        for lang in (["en", "de"] if name != "marian" else ["en"]):
            code = DECLARED[name].get("languages", {}).get(lang)
            if code is not None:
                tokenizer.src_lang = code
            before, after = model.source_affixes(lang, "fr" if lang != "fr" else "en")
            for sentence in sentences:
                ours = before + [p if p in vocab else tokenizer.unk_token
                                 for p in model.source_tokenizer.encode([sentence])[0]] + after
                assert ours == tokenizer.convert_ids_to_tokens(tokenizer.encode(sentence)), (name, sentence)
    assert converted["nllb"][0]["tokens"]["source_prefix"] == ["{source}"]
    assert converted["nllb"][0]["languages"] == {"en": "eng_Latn", "de": "deu_Latn", "fr": "fra_Latn"}
    assert converted["m2m100"][0]["languages"] == {"en": "__en__", "de": "__de__", "fr": "__fr__"}
    # MarianMT's <pad> is dropped from the vocabulary by the converter (decoding starts from zeros)
    assert converted["marian"][0]["tokens"] == {"source_prefix": [], "source_suffix": ["</s>"],
                                                "target_prefix": [], "special": ["</s>", "<unk>"]}
    m2m_special = converted["m2m100"][0]["tokens"]["special"]
    assert len(m2m_special) == 4 + 100 + 8 and "madeupword7" in m2m_special and "__zu__" in m2m_special


@pytest.mark.parametrize("name,src,tgt", [("marian", "en", "de"), ("m2m100", "en", "de"), ("m2m100", "de", "fr"),
                                          ("nllb", "en", "de"), ("nllb", "fr", "en")])
def test_translate_captions_with_a_converted_hugging_face_model(name, src, tgt, hf, converted, text, tmp_path):
    """translate-captions on a caption table with each converted model: one row per source
    caption, the translations those of CTranslate2's recipe with the model's own tokenizer."""
    sources = text[src][:7]
    rows = [(f"img{i}", src, i % 2, s) for i, s in enumerate(sources)] + [("imgX", "xx", 0, "not this one")]
    rows.insert(3, ("imgE", src, 0, "  "))
    table = caption_table(tmp_path / "captions.parquet", rows)
    out = tmp_path / "out.parquet"
    info, folder = converted[name]
    run = translate_captions(table, out, model_dir=folder, source_lang=src, target_lang=tgt, dataset="c.mt",
                             settings=SETTINGS, progress=False)
    frame = read_captions(out)
    assert run.rows == 8 and run.empty == 1 and len(frame) == 8
    assert frame["lang"].unique().tolist() == [tgt]
    assert frame["image_id"].tolist() == [r[0] for r in rows if r[1] == src]
    codes = DECLARED[name].get("languages")
    expected = reference(folder, hf[name], sources, src=None if codes is None else codes[src],
                         tgt=None if codes is None else codes[tgt])
    got = [t for img, t in zip(frame["image_id"], frame["raw"]) if img != "imgE"]
    assert got == expected
    assert frame.loc[frame["image_id"] == "imgE", "raw"].tolist() == [""]
    assert len(set(got)) > 1  # the translations depend on the input
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["model_id"] == info["model_id"] and sidecar["model"]["family"] == info["family"]


def _marian_npz(hf_dir: Path, out: Path) -> Path:
    """The MarianMT's weights in Marian's own layout (model.npz with its special:model.yml,
    vocab.yml, decoder.yml, source.spm / target.spm): an OPUS-MT release of the same model."""
    from transformers import MarianMTModel

    model = MarianMTModel.from_pretrained(str(hf_dir))
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    cfg = model.config
    weights = {"Wemb": sd["model.shared.weight"][:-1],  # Marian's vocabulary has no <pad>
               "decoder_ff_logit_out_b": sd["final_logits_bias"][:, :-1]}

    def linear(prefix: str, module: str, names: dict[str, str]) -> None:
        for marian, hf_name in names.items():
            weights[f"{prefix}_W{marian}"] = sd[f"{module}.{hf_name}.weight"].T
            weights[f"{prefix}_b{marian}"] = sd[f"{module}.{hf_name}.bias"][None]

    def norm(name: str, module: str) -> None:
        weights[f"{name}_ln_scale"] = sd[f"{module}.weight"][None]
        weights[f"{name}_ln_bias"] = sd[f"{module}.bias"][None]

    attention = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}
    for side, count in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        for i in range(count):
            layer, hf_layer = f"{side}_l{i + 1}", f"model.{side}.layers.{i}"
            linear(f"{layer}_self", f"{hf_layer}.self_attn", attention)
            norm(f"{layer}_self_Wo", f"{hf_layer}.self_attn_layer_norm")
            if side == "decoder":
                linear(f"{layer}_context", f"{hf_layer}.encoder_attn", attention)
                norm(f"{layer}_context_Wo", f"{hf_layer}.encoder_attn_layer_norm")
            linear(f"{layer}_ffn", f"{hf_layer}", {"1": "fc1", "2": "fc2"})
            norm(f"{layer}_ffn_ffn", f"{hf_layer}.final_layer_norm")
    description = {"type": "transformer", "enc-depth": cfg.encoder_layers, "dec-depth": cfg.decoder_layers,
                   "dim-emb": cfg.d_model, "transformer-heads": cfg.encoder_attention_heads,
                   "transformer-dim-ffn": cfg.encoder_ffn_dim, "transformer-ffn-activation": "swish",
                   "transformer-preprocess": "", "transformer-postprocess": "dan",
                   "transformer-postprocess-emb": "d", "transformer-decoder-autoreg": "self-attention",
                   "transformer-no-projection": False, "transformer-guided-alignment-layer": "last",
                   "tied-embeddings-all": True}
    weights["special:model.yml"] = np.frombuffer(yaml.safe_dump(description).encode() + b"\0", dtype=np.int8)
    out.mkdir()
    np.savez(out / "opus.spm200.transformer.model1.npz", **weights)
    vocab = json.loads((hf_dir / "vocab.json").read_text(encoding="utf-8"))
    lines = [f"{json.dumps(token, ensure_ascii=False)}: {index}" for token, index in vocab.items() if token != "<pad>"]
    (out / "opus.spm200.vocab.yml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "decoder.yml").write_text(yaml.safe_dump({
        "models": ["opus.spm200.transformer.model1.npz"],
        "vocabs": ["opus.spm200.vocab.yml", "opus.spm200.vocab.yml"], "beam-size": 4}), encoding="utf-8")
    for name in ("source.spm", "target.spm"):
        shutil.copyfile(hf_dir / name, out / name)
    return out


def test_marian_native_model_translates_as_its_transformers_twin(hf, converted, text, tmp_path):
    """An OPUS-MT release (Marian .npz) converted by CTranslate2's MarianConverter translates
    exactly as the same weights in MarianMT form: the converter appends </s> itself, so the
    pipeline puts nothing around the pieces, and source and target SentencePiece models differ."""
    opus = _marian_npz(hf["marian"], tmp_path / "opus-mt-en-de")
    info = prepare_model(declare("opus", format="marian", path=str(opus), source_lang="en", target_lang="de"),
                         tmp_path / "ct2")
    assert info["family"] == "marian" and info["tokens"]["source_suffix"] == []
    assert info["tokenizer"]["source"] != info["tokenizer"]["target"]
    assert info["converter"]["class"] == "ctranslate2.converters.MarianConverter"
    native, twin = open_model_dir(tmp_path / "ct2"), open_model_dir(converted["marian"][1])
    sentences = text["en"][:12]
    ours = translate_texts(load_translator(native, SETTINGS), native, sentences, settings=SETTINGS,
                           source_lang="en", target_lang="de")[0]
    theirs = translate_texts(load_translator(twin, SETTINGS), twin, sentences, settings=SETTINGS,
                             source_lang="en", target_lang="de")[0]
    assert ours == theirs and len(set(ours)) > 1


def test_an_already_converted_directory_is_taken_as_it_is(hf, converted, text, tmp_path):
    """format ctranslate2: a directory converted elsewhere (here by CTranslate2's own
    TransformersConverter) with its SentencePiece model and the nllb family translates as the
    pipeline's own conversion does."""
    from ctranslate2.converters import TransformersConverter

    folder = tmp_path / "nllb-ct2"
    TransformersConverter(str(hf["nllb"])).convert(str(folder))
    shutil.copyfile(hf["nllb"] / "sentencepiece.bpe.model", folder / "sentencepiece.bpe.model")
    (folder / "README.md").write_text("not copied\n")
    info = prepare_model(declare("nllb_ct2", format="ctranslate2", family="nllb", path=str(folder),
                                 languages={"en": "eng_Latn", "de": "deu_Latn"}), tmp_path / "ct2")
    assert not (tmp_path / "ct2" / "README.md").exists()
    assert info["tokens"]["source_prefix"] == ["{source}"] and info["tokens"]["target_prefix"] == ["{target}"]
    model, twin = open_model_dir(tmp_path / "ct2"), open_model_dir(converted["nllb"][1])
    sentences = text["en"][:6]
    ours = translate_texts(load_translator(model, SETTINGS), model, sentences, settings=SETTINGS,
                           source_lang="en", target_lang="de")[0]
    theirs = translate_texts(load_translator(twin, SETTINGS), twin, sentences, settings=SETTINGS,
                             source_lang="en", target_lang="de")[0]
    assert ours == theirs


def test_a_language_code_the_model_does_not_know_is_one_line_naming_the_key(hf, converted, tmp_path, capsys):
    """A code that is not a token of the model fails the conversion on one line naming
    translation.models.NAME.languages.LANG, leaving no model; a language the converted model
    was not declared for fails translate-captions naming the model's key."""
    spec = declare("nllb", format="transformers", path=str(hf["nllb"]),
                   languages={"en": "eng_Latn", "de": "deu_Latn", "fr": "fra_Latx"})
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    assert cli.main(["convert-mt", "--spec", f"@{spec_file}", "--output-dir", str(tmp_path / "bad")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "translation.models.nllb.languages.fr: 'fra_Latx' is not a language of this nllb model" in err
    assert "no token 'fra_Latx' in its vocabulary; it knows 202 language token(s): ace_Arab" in err
    assert not (tmp_path / "bad").exists() and not list(tmp_path.glob(".bad*"))
    spec = declare("m2m", format="transformers", path=str(hf["m2m100"]), languages={"en": "en", "de": "xx"})
    with pytest.raises(ValueError, match=r"translation\.models\.m2m\.languages\.de: 'xx' is not a language of "
                                         r"this m2m100 model .*no token '__xx__'"):
        prepare_model(spec, tmp_path / "bad2")

    table = caption_table(tmp_path / "captions.parquet", [("a", "en", 0, "A dog runs.")])
    assert cli.main(["translate-captions", "--model", str(converted["nllb"][1]), "--captions", str(table),
                     "--source-lang", "en", "--target-lang", "cs", "--dataset", "c.cs-mt",
                     "--output", str(tmp_path / "cs.parquet"), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith("error: translation.models.nllb: the model has no code for language 'cs' (it is declared "
                        "for ['de', 'en', 'fr']; add it to translation.models.nllb.languages)")
    assert not (tmp_path / "cs.parquet").exists()
    with pytest.raises(ValueError, match=r"translation\.models\.marian: the model translates en -> de, not de -> en"):
        translate_captions(table, tmp_path / "x.parquet", model_dir=converted["marian"][1], source_lang="de",
                           target_lang="en", dataset="x", settings=SETTINGS, progress=False)


def test_a_hugging_face_directory_without_its_pieces_is_refused(hf, tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(hf["nllb"], folder)
    (folder / "sentencepiece.bpe.model").unlink()
    with pytest.raises(FileNotFoundError, match=r"translation\.models\.b: no SentencePiece model in .*broken "
                                                r"\(looked for sentencepiece\.bpe\.model\)"):
        prepare_model(declare("b", format="transformers", path=str(folder), languages={"en": "eng_Latn",
                                                                                         "de": "deu_Latn"}),
                      tmp_path / "out")
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    shutil.copyfile(hf["nllb"] / "sentencepiece.bpe.model", folder / "sentencepiece.bpe.model")
    with pytest.raises(ValueError, match="model_type 'bert'; the translation families this pipeline knows"):
        prepare_model(declare("b", format="transformers", path=str(folder), source_lang="en", target_lang="de"),
                      tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_transformers_tokenizer_under_another_name_is_one_line_saying_what_to_do(hf, tmp_path):
    """The parse error's advice for a transformers model names files.source_tokenizer (the
    format refuses files.tokenizer); following it with the model's SentencePiece file renamed is
    one line saying the library loads the tokenizer under its own names, not an AttributeError."""
    folder = tmp_path / "renamed"
    shutil.copytree(hf["nllb"], folder)
    (folder / "sentencepiece.bpe.model").rename(folder / "my.spm")
    languages = {"en": "eng_Latn", "de": "deu_Latn"}
    with pytest.raises(FileNotFoundError) as err:
        prepare_model(declare("b", format="transformers", path=str(folder), languages=languages), tmp_path / "out")
    assert str(err.value).endswith("name it in translation.models.b.files.source_tokenizer (and target_tokenizer "
                                   "when the target's differs)")
    with pytest.raises(ValueError) as err:
        prepare_model(declare("b", format="transformers", path=str(folder), languages=languages,
                              files={"source_tokenizer": "my.spm"}), tmp_path / "out")
    assert str(err.value).startswith(f"{folder}: CTranslate2's Transformers converter cannot load its tokenizer "
                                     "(AttributeError: ")
    assert str(err.value).endswith("the transformers format loads the model's own tokenizer from the folder, under "
                                   "its Hugging Face file names (sentencepiece.bpe.model): put them there "
                                   "(files.source_tokenizer only names the SentencePiece model this pipeline "
                                   "encodes with)")
    assert not (tmp_path / "out").exists()


def test_an_m2m100_tokenizer_saved_without_its_language_tokens_says_what_to_do(hf, tmp_path):
    from transformers import M2M100Tokenizer

    folder = tmp_path / "m2m"
    shutil.copytree(hf["m2m100"], folder)
    for name in ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"):
        (folder / name).unlink(missing_ok=True)
    M2M100Tokenizer(vocab_file=str(folder / "vocab.json"), spm_file=str(folder / "sentencepiece.bpe.model"),
                    src_lang="en", tgt_lang="de").save_pretrained(folder)
    with pytest.raises(ValueError) as err:
        prepare_model(declare("m", format="transformers", path=str(folder), languages={"en": "en", "de": "de"}),
                      tmp_path / "out")
    assert str(err.value) == (f"{folder}: CTranslate2's Transformers converter refused it: ValueError: Source "
                              "vocabulary 0 has size 309 but the model expected a vocabulary of size 409; the "
                              f"tokenizer saved in {folder} has fewer entries than the model's embeddings: a "
                              "m2m100 tokenizer saved without its language tokens (such as '__en__'); save the "
                              "model's own tokenizer files, language tokens included, in the folder and "
                              "convert again")


def test_verbose_works_appended_to_a_command_as_its_error_line_says(tmp_path, capsys):
    from pseudopairs import cli

    assert cli.describe_error(TypeError("x")).endswith(
        "(for the traceback: rerun the command with --verbose, or the workflow with PSEUDOPAIRS_VERBOSE=1 "
        "in its environment)")
    argv = ["convert-mt", "--spec", "{\"key\": 1}", "--output", str(tmp_path / "o")]
    assert cli.main(argv) == 1
    with pytest.raises(ValueError, match="'name' missing"):   # the traceback, --verbose at the end
        cli.main([*argv, "--verbose"])


# ----------------------------------------------------------------------------------------------
# The config: declarations, and the model of each translated data set


def demo_config(**translation) -> dict:
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")
    config["translation"].setdefault("models", {}).update(translation)
    return config


def config_errors(config: dict) -> str:
    with pytest.raises(ConfigError) as err:
        check_config(config)
    return str(err.value)


def test_the_config_names_a_translated_data_sets_model_and_checks_its_languages():
    nllb = {"format": "transformers", "path": "/models/nllb", "languages": {"en": "eng_Latn", "de": "deu_Latn"}}
    config = demo_config(nllb=nllb)
    config["datasets"]["coco.de-mt"]["translation_model"] = "nllb"
    check_config(config)
    from pseudopairs.translation import contract as TC

    assert TC.dataset_model_dir(config, "coco.de-mt") == "results/translation_models/nllb/ctranslate2"
    assert TC.convert_spec(config, "nllb")["path"] == "/models/nllb"

    config = demo_config(nllb=nllb)
    config["datasets"]["coco.fr-mt"] = {"corpus": "coco", "lang": "fr", "translation": "coco.en",
                                        "translation_model": "nllb"}
    assert ("config key 'translation.models.nllb.languages': no code for 'fr', which data set coco.fr-mt "
            "translates en -> fr into or from") in config_errors(config)

    config = demo_config(opus={"format": "marian", "path": "/m", "source_lang": "en", "target_lang": "fr"})
    config["datasets"]["coco.de-mt"]["translation_model"] = "opus"
    assert ("config key 'datasets.coco.de-mt.translation_model': opus translates en -> fr, not en -> de"
            in config_errors(config))
    config["datasets"]["coco.de-mt"]["translation_model"] = "nope"
    assert ("config key 'datasets.coco.de-mt.translation_model': unknown model 'nope' (translation.models "
            "declares ['opus'])" in config_errors(config))


@pytest.mark.parametrize("declaration,message", [
    ({"format": "transformers", "path": "/m", "url": "https://x/m.zip", "source_lang": "en", "target_lang": "de"},
     "config key 'translation.models.m.path': give the model's path or its url (exactly one)"),
    ({"format": "marian", "url": "https://x/model.npz", "source_lang": "en", "target_lang": "de"},
     "config key 'translation.models.m.url': must name an archive (.zip, .tar.gz, .tgz, .tar)"),
    ({"format": "transformers", "path": "/m", "family": "nllb", "source_lang": "en", "target_lang": "de"},
     "config key 'translation.models.m.languages': a nllb model needs the code of each language"),
    ({"format": "opennmt_py", "path": "/m", "source_lang": "en", "target_lang": "de"},
     "config key 'translation.models.m.files': an opennmt_py model names its checkpoint"),
    ({"format": "marian", "path": "/m", "source_lang": "en", "target_lang": "de", "files": {"checkpoint": "a"}},
     "config key 'translation.models.m.files': unknown file key(s) ['checkpoint'] for format marian"),
    ({"format": "transformers", "path": "/m", "languages": {"en": "eng_Latn", "de": "deu Latn"}},
     "config key 'translation.models.m.languages.de': 'deu Latn' is not a language code"),
    ({"format": "transformers", "path": "/m"},
     "config key 'translation.models.m.source_lang': give source_lang and target_lang"),
])
def test_a_bad_model_declaration_is_one_message_naming_its_key(declaration, message):
    assert message in config_errors(demo_config(m=declaration))


def test_the_shipped_configs_keep_their_one_model():
    """Without translation_model every translated data set keeps translation.model's directory
    (the shipped plans are unchanged; tests/test_workflow.py compares the jobs)."""
    from pseudopairs.translation import contract as TC

    for name in ("config.yaml", "paper.yaml"):
        config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / name)
        assert TC.named_models(config) == []
        assert {TC.dataset_model_dir(config, d) for d in TC.translation_datasets(config)} == \
            {"results/translation_model/ctranslate2"}


@pytest.mark.slow
def test_the_workflow_downloads_converts_and_plans_a_named_model(hf, tmp_path):
    """A MarianMT archive declared by url and sha256: the workflow fetches it with the project's
    checksummed download, extracts and converts it (convert-mt --spec), and the translated data
    set's job loads it; a wrong checksum stops at the download."""
    import hashlib

    archive = tmp_path / "opus-mt-en-de.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(hf["marian"], arcname="opus-mt-en-de")
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({
        "translation": {"models": {"opus": {"format": "transformers", "url": str(archive), "sha256": sha,
                                            "subdir": "opus-mt-en-de", "source_lang": "en", "target_lang": "de"}}},
        "datasets": {"coco.de-mt": {"translation_model": "opus"}}}))
    plan = run_snakemake(tmp_path, "-n", "-p", "--cores", "1", "results/translations/coco.de-mt/train.parquet",
                         "--configfile", str(mine))
    assert plan.returncode == 0, plan.stderr
    assert "--model results/translation_models/opus/ctranslate2 --captions results/captions/coco/train.parquet" \
        in plan.stdout
    assert "rule train_mt:" not in plan.stdout and "rule convert_mt:" not in plan.stdout
    assert f"python -m pseudopairs download --url {archive} --output " \
           f"results/downloads/translation_models/opus/model.tar.gz --sha256 {sha}" in plan.stdout
    run = run_snakemake(tmp_path, "--cores", "1", "results/translation_models/opus/ctranslate2",
                        "--configfile", str(mine))
    assert run.returncode == 0, run.stderr
    info = json.loads((tmp_path / "results/translation_models/opus/ctranslate2/pseudopairs_mt.json").read_text())
    assert info["config_key"] == "translation.models.opus" and info["pair"] == ["en", "de"]
    assert info["family"] == "marian" and info["converter"]["class"].endswith("TransformersConverter")
    assert info["source"]["path"].endswith("results/downloads/translation_models/opus/extracted/opus-mt-en-de")
    # the archive is a temporary (paper_data.keep_archives keeps it), its content stays
    assert not (tmp_path / "results/downloads/translation_models/opus/model.tar.gz").exists()
    assert (tmp_path / "results/downloads/translation_models/opus/extracted/opus-mt-en-de/config.json").is_file()


def test_a_local_model_folder_is_keyed_by_content(hf, tmp_path):
    """A declared model folder is an input like an image folder: converted once, the same files
    through another path (a copy without its times) reconvert nothing, and a weight file
    rewritten in place reconverts and retranslates."""
    def declared(folder: Path) -> Path:
        mine = tmp_path / f"mine-{folder.name}.yaml"
        mine.write_text(yaml.safe_dump({
            "translation": {"models": {"opus": {"format": "transformers", "path": str(folder),
                                                "source_lang": "en", "target_lang": "de"}}},
            "datasets": {"coco.de-mt": {"translation_model": "opus"}}}))
        return mine

    def plan(mine: Path):
        result = run_snakemake(work, "-n", "--cores", "1", "results/translation_models/opus/ctranslate2",
                               "--configfile", str(mine))
        assert result.returncode == 0, result.stderr[-3000:]
        return re.findall(r"^(?:local)?rule (\w+):$", result.stdout, re.M), result.stdout + result.stderr

    work = tmp_path / "work"
    first = tmp_path / "models" / "opus"
    shutil.copytree(hf["marian"], first)
    run = run_snakemake(work, "--cores", "1", "results/translation_models/opus/ctranslate2",
                        "--configfile", str(declared(first)))
    assert run.returncode == 0, run.stderr[-3000:]
    manifest = json.loads((work / "results/translation_models/opus/source.json").read_text())
    assert "model.safetensors" in [f[0] for f in manifest["files"]]
    rules, text = plan(declared(first))
    assert rules == [] and "Nothing to be done" in text, text[-2000:]
    moved = tmp_path / "scratch" / "opus-copy"
    shutil.copytree(first, moved, copy_function=shutil.copyfile)
    rules, text = plan(declared(moved))
    assert rules == [] and "Nothing to be done" in text, text[-2000:]
    weights = moved / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    rules, text = plan(declared(moved))
    assert rules == ["convert_mt_named"], text[-2000:]


def test_translation_model_is_needed_only_by_the_data_sets_and_rows_that_use_it():
    """Without translation.model, every translated data set names its model; a data set that
    names none, and the CLC rows (their models are trained like it), say what is missing."""
    nllb = {"format": "transformers", "path": "/models/nllb", "languages": {"en": "eng_Latn", "de": "deu_Latn"}}
    config = demo_config(nllb=nllb)
    del config["translation"]["model"]
    message = config_errors(config)
    assert ("config key 'datasets.coco.de-mt': no translation model: name one of translation.models in "
            "'translation_model' (declared: ['nllb']) or declare translation.model") in message
    assert "config key 'translation.model': required by the CLC rows of ['table_smalr2']" in message
    config["datasets"]["coco.de-mt"]["translation_model"] = "nllb"
    config["tables"] = {k: v for k, v in config["tables"].items()
                        if not any(r.get("clc") for r in v.get("rows", []))}
    config["datasets"]["coco.en"]["translation_model"] = "nllb"
    assert ("config key 'datasets.coco.en.translation_model': only a translated data set (translation: ...) "
            "names a translation model") in config_errors(config)


def test_an_unused_default_model_is_not_checked():
    """Real data with every translated data set on a named model: config.yaml's demo model (no
    parallel text outside the demo world) is not in the way; used, it is."""
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml",
                         REPO / "config" / "paper.yaml")
    config["translation"]["model"] = {"source": "train", "quantization": "int8"}
    config["paper_data"]["flickr30k_images"] = "/data/flickr30k"
    message = config_errors(config)
    assert "config key 'translation.model.parallel_text': required with source: train outside the demo world" \
        in message
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml",
                         REPO / "config" / "paper.yaml")
    config["translation"]["model"] = {"source": "train", "quantization": "int8"}
    config["translation"]["models"] = {"nllb": {"format": "transformers", "path": "/m",
                                                "languages": {"en": "eng_Latn", "de": "deu_Latn"}}}
    config["datasets"]["coco.de-mt"]["translation_model"] = "nllb"
    config["tables"] = {k: v for k, v in config["tables"].items() if not any(r.get("clc") for r in v.get("rows", []))}
    config["paper_data"]["flickr30k_images"] = "/data/flickr30k"
    check_config(config)  # accepted: refused for any reason, this test fails

"""Tests of the translation step (pseudopairs.translation): a tiny
Transformer memorises a dozen demo-world sentence pairs, is saved in the OpenNMT-py layout,
converted by CTranslate2's own converter and used to translate caption tables. CPU, one thread,
no network."""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import logging
import os
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pseudopairs import cli
from pseudopairs.translation import transformer as M
from pseudopairs.translation import checkpoint as CK
from pseudopairs.translation import convert as CV
from pseudopairs.translation import score as SC
from pseudopairs.translation import settings as TS
from pseudopairs.translation import text as TX
from pseudopairs.translation import train as TR
from pseudopairs.translation import translate as TL
from pseudopairs.core.io import CAPTION_COLUMNS, read_captions
from pseudopairs.data.text import prepare_line
from pseudopairs.world.generate import parallel_caption
from pseudopairs.world.scene import sample_scene

torch.set_num_threads(1)

# A model that memorises its training pairs: no dropout, no label smoothing, many small steps.
MEMORISE = dict(seed=0, threads=1, spm_vocab_size=300, enc_layers=1, dec_layers=1, d_model=64,
                heads=4, ff=128, dropout=0.0, attention_dropout=0.0, label_smoothing=0.0,
                batch_tokens=1024, epochs=1000, max_steps=300, lr=3e-3, warmup_steps=30,
                log_every=100, max_decoding_length=60)
# Translation settings for the tests: CPU, float32 (bit-comparable with the PyTorch model).
TRANSLATE = dict(beam_size=1, device="cpu", compute_type="float32", intra_threads=1,
                 max_batch_size=256, chunk_size=4)


def world_pairs(count: int, *, seed: int) -> list[tuple[str, str]]:
    """Distinct (English, German) exact-translation pairs from the demo world."""
    rng = np.random.default_rng(seed)
    pairs, seen = [], set()
    while len(pairs) < count:
        scene = sample_scene(rng, corpus="m30k", image_size=64)
        _, en, de = parallel_caption(scene, rng=rng)
        if en not in seen and len(en.split()) <= 12:
            seen.add(en)
            pairs.append((en, de))
    return pairs


def write_lines(path: Path, lines) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def run_cli(*argv: str) -> int:
    """The real ``pseudopairs`` entry point, in-process (errors become exit code 1)."""
    return cli.main(list(argv))


@pytest.fixture(scope="module")
def pairs():
    return world_pairs(12, seed=3)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, pairs):
    """``train-mt`` on 12 pairs, validated on the same 12 (memorised: BLEU 100)."""
    root = tmp_path_factory.mktemp("mt")
    src = write_lines(root / "train.en", [en for en, _ in pairs])
    tgt = write_lines(root / "train.de", [de for _, de in pairs])
    out = root / "model"
    TR.train_mt(source_train=src, target_train=tgt, source_valid=src, target_valid=tgt,
               settings=TS.TranslationTrainSettings.from_dict(MEMORISE), output_dir=out, progress=False)
    return out


@pytest.fixture(scope="module")
def converted(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("ct2") / "model"
    CV.convert_checkpoint(trained / "model.pt", out, quantization="none", model_id="tiny-demo")
    return out


def caption_table(rows) -> pd.DataFrame:
    """Rows ``(split, image_id, lang, caption_idx, raw)`` → a prepared caption table."""
    frame = pd.DataFrame(rows, columns=["split", "image_id", "lang", "caption_idx", "raw"])
    frame.insert(0, "dataset", "coco")
    frame["caption_idx"] = frame["caption_idx"].astype("int64")
    frame["text"] = [prepare_line(r, lang=l) for r, l in zip(frame["raw"], frame["lang"])]
    return frame[CAPTION_COLUMNS]


def ct2_greedy(model_dir: Path, sentences: list[str]) -> list[str]:
    """Bare CTranslate2 greedy translation (float32) of raw sentences, detokenised."""
    import ctranslate2

    model = CV.open_model_dir(model_dir)
    translator = ctranslate2.Translator(str(model_dir), device="cpu", compute_type="float32",
                                        intra_threads=1)
    results = translator.translate_batch(model.source_tokenizer.encode(sentences), beam_size=1)
    return model.target_tokenizer.decode([r.hypotheses[0] for r in results])


# ---------------------------------------------------------------------------------------------
# train-mt: checkpoint layout, BLEU, determinism


def test_checkpoint_has_the_opennmt_py_layout(trained):
    checkpoint = M.load_opennmt_checkpoint(trained / "model.pt")
    assert set(checkpoint) >= {"model", "generator", "vocab", "opt"}
    vocab = checkpoint["vocab"]
    assert vocab["src"][:4] == ["<unk>", "<blank>", "<s>", "</s>"] and vocab["src"] == vocab["tgt"]
    assert isinstance(checkpoint["opt"], argparse.Namespace)
    assert checkpoint["opt"].encoder_type == checkpoint["opt"].decoder_type == "transformer"
    assert set(checkpoint["generator"]) == {"weight", "bias"}
    names = set(checkpoint["model"])
    for name in ("encoder.embeddings.make_embedding.emb_luts.0.weight",
                 "encoder.embeddings.make_embedding.pe.pe",
                 "encoder.transformer.0.self_attn.linear_query.weight",
                 "encoder.transformer.0.feed_forward.w_1.weight",
                 "encoder.transformer.0.feed_forward.layer_norm.weight",
                 "encoder.layer_norm.bias",
                 "decoder.transformer_layers.0.context_attn.linear_keys.weight",
                 "decoder.transformer_layers.0.layer_norm_2.weight",
                 "decoder.layer_norm.weight"):
        assert name in names
    assert (trained / "sentencepiece.model").is_file()


def test_memorised_pairs_give_bleu_100(trained, pairs):
    bleu = json.loads((trained / "bleu.json").read_text())
    assert bleu["bleu"] == 100.0
    assert bleu["sentences"] == len(pairs)
    assert bleu["signature"].startswith("nrefs:1|case:mixed")
    assert (trained / "valid.hyp.txt").read_text(encoding="utf-8").splitlines() == [de for _, de in pairs]
    log = pd.read_csv(trained / "train_log.csv")
    assert set(log["kind"]) == {"train", "valid"} and log["step"].max() == MEMORISE["max_steps"]
    info = json.loads((trained / "settings.json").read_text())
    assert info["settings"]["seed"] == 0 and info["pairs_used"] == len(pairs)


def test_compute_bleu_of_given_strings():
    same = TX.compute_bleu(["a red ball on the grass ."], ["a red ball on the grass ."])
    assert same["bleu"] == 100.0 and same["brevity_penalty"] == 1.0
    # 4 of 6 unigrams, 2 of 5 bigrams, 1 of 4 trigrams, 0 of 3 four-grams (smoothed), same length
    partial = TX.compute_bleu(["a b c d x y"], ["a b c e d f"])
    assert partial["precisions"][:3] == [pytest.approx(66.6667), 40.0, 25.0]
    assert 0 < partial["bleu"] < 40
    assert TX.compute_bleu(["x y z"], ["a b c"])["bleu"] == 0.0
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        TX.compute_bleu(["a", "b"], ["a"])


def test_training_is_deterministic(tmp_path, pairs):
    src = write_lines(tmp_path / "s.en", [en for en, _ in pairs])
    tgt = write_lines(tmp_path / "s.de", [de for _, de in pairs])
    settings = TS.TranslationTrainSettings.from_dict({**MEMORISE, "max_steps": 15, "dropout": 0.1})
    for name in ("a", "b"):
        TR.train_mt(source_train=src, target_train=tgt, source_valid=src, target_valid=tgt,
                   settings=settings, output_dir=tmp_path / name, progress=False)
    a, b = (M.load_opennmt_checkpoint(tmp_path / n / "model.pt") for n in ("a", "b"))
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert (tmp_path / "a" / "sentencepiece.model").read_bytes() == (tmp_path / "b" / "sentencepiece.model").read_bytes()
    other = TS.TranslationTrainSettings.from_dict({**MEMORISE, "max_steps": 15, "dropout": 0.1, "seed": 1})
    TR.train_mt(source_train=src, target_train=tgt, source_valid=src, target_valid=tgt,
               settings=other, output_dir=tmp_path / "c", progress=False)
    c = M.load_opennmt_checkpoint(tmp_path / "c" / "model.pt")
    assert not torch.equal(a["model"]["decoder.layer_norm.weight"], c["model"]["decoder.layer_norm.weight"])


def test_a_run_shorter_than_its_warmup_warns_with_its_numbers(tmp_path, pairs, caplog):
    """Without max_steps the updates a run makes are known once the data is batched: 12 pairs
    of one batch, 2 epochs = 2 updates, under the 30 warm-up steps -- one warning saying so."""
    src = write_lines(tmp_path / "train.en", [en for en, _ in pairs])
    tgt = write_lines(tmp_path / "train.de", [de for _, de in pairs])
    settings = TS.TranslationTrainSettings.from_dict({**MEMORISE, "epochs": 2, "max_steps": None})
    with caplog.at_level("WARNING", logger="pseudopairs.translation.fit"):
        TR.train_mt(source_train=src, target_train=tgt, source_valid=src, target_valid=tgt,
                    settings=settings, output_dir=tmp_path / "out", progress=False)
    warnings = [r.getMessage() for r in caplog.records if r.name == "pseudopairs.translation.fit"]
    assert warnings == ["translation.train.warmup_steps (30) >= the 2 updates this run makes (1 per epoch x "
                        "epochs 2): the learning rate never reaches translation.train.lr (0.003); lower "
                        "warmup_steps or train longer"]


def test_parallel_files_must_align(tmp_path):
    src = write_lines(tmp_path / "a.en", ["one", "two"])
    tgt = write_lines(tmp_path / "a.de", ["eins"])
    with pytest.raises(ValueError, match=r"a\.en has 2 lines, .*a\.de has 1"):
        TR.train_mt(source_train=src, target_train=tgt, source_valid=src, target_valid=src,
                   settings=TS.TranslationTrainSettings(), output_dir=tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    with pytest.raises(FileNotFoundError, match="missing.en"):
        TX.read_parallel(tmp_path / "missing.en", tgt)


@pytest.mark.parametrize("values, message", [
    ({"heads": 3}, "translation.train.heads: must divide translation.train.d_model"),
    ({"d_model": 63, "heads": 1}, "translation.train.d_model: must be even"),
    ({"layers": 2}, "unknown setting(s) translation.train.layers"),
    ({"lr": 0}, "translation.train.lr: must be a number > 0.0, got 0"),
    ({"epochs": True}, "translation.train.epochs: must be an integer"),
    ({"max_steps": 0}, "translation.train.max_steps: must be null or an integer >= 1"),
    ({"dropout": 1.0}, "translation.train.dropout: must be a number in [0.0, 1.0)"),
    ({"spm_model_type": "wordpiece"}, "translation.train.spm_model_type: must be one of"),
    ({"batch_tokens": "4096"}, "translation.train.batch_tokens"),
    ({"threads": 0}, "translation.train.threads"),
])
def test_train_settings_errors_name_the_key(values, message):
    with pytest.raises(ValueError) as err:
        TS.TranslationTrainSettings.from_dict(values)
    assert message in str(err.value)


@pytest.mark.parametrize("values, message", [
    ({"beam_size": 0}, "translation.translate.beam_size"),
    ({"compute_type": "int4"}, "translation.translate.compute_type: must be one of"),
    ({"device": "gpu"}, "translation.translate.device: must be auto, cpu, cuda or cuda:N"),
    ({"chunk_size": 0}, "translation.translate.chunk_size"),
    ({"max_batch_size": 64, "max_input_tokens": 128}, "translation.translate.max_batch_size: must be at least"),
    ({"inter_threads": 0}, "translation.translate.inter_threads"),
    ({"beam": 4}, "unknown setting(s) translation.translate.beam"),
])
def test_translate_settings_errors_name_the_key(values, message):
    with pytest.raises(ValueError) as err:
        TS.TranslateSettings.from_dict(values)
    assert message in str(err.value)


def test_cli_reports_bad_settings(tmp_path, capsys):
    src = write_lines(tmp_path / "a.en", ["one"])
    code = run_cli("train-mt", "--source-train", str(src), "--target-train", str(src),
                   "--source-valid", str(src), "--target-valid", str(src), "--settings", '{"heads": 0}',
                   "--output-dir", str(tmp_path / "out"))
    assert code == 1 and "translation.train.heads" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:  # refused while parsing the arguments
        run_cli("train-mt", "--source-train", str(src), "--target-train", str(src),
                "--source-valid", str(src), "--target-valid", str(src), "--settings", "{oops",
                "--output-dir", str(tmp_path / "out"))
    assert exit.value.code == 2 and "--settings: not valid JSON" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# train-mt: resumable training state, gzipped text


# 3 batches per epoch (batch_tokens 64), so the kill after the second save (update 20) falls in
# the middle of an epoch, with a partial loss sum (log_every 7) and dropout drawing random numbers.
RESUMABLE = {**MEMORISE, "max_steps": 40, "dropout": 0.1, "batch_tokens": 64, "log_every": 7,
             "checkpoint_every": 10}
OUTPUT_FILES = ("model.pt", "sentencepiece.model", "bleu.json", "valid.hyp.txt", "train_log.csv")


@pytest.fixture(scope="module")
def parallel_files(tmp_path_factory, pairs):
    root = tmp_path_factory.mktemp("parallel")
    return (write_lines(root / "train.en", [en for en, _ in pairs]),
            write_lines(root / "train.de", [de for _, de in pairs]))


def train_resumable(parallel_files, output_dir: Path, **overrides):
    src, tgt = parallel_files
    return TR.train_mt(source_train=src, target_train=tgt, source_valid=src, target_valid=tgt,
                       settings=TS.TranslationTrainSettings.from_dict({**RESUMABLE, **overrides}),
                       output_dir=output_dir, progress=False)


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory, parallel_files):
    """An uninterrupted run of the RESUMABLE settings."""
    out = tmp_path_factory.mktemp("straight") / "model"
    train_resumable(parallel_files, out)
    assert not TR.state_path(out).exists()  # a finished run removes its state
    return out


def kill_after_saves(monkeypatch, saves: int) -> list[int]:
    """Make train-mt die (as Ctrl-C would) right after its ``saves``-th saved state."""
    real_save = TR._save_state
    steps: list[int] = []

    def dying_save(path, key, sp_bytes, snapshot):
        real_save(path, key, sp_bytes, snapshot)
        steps.append(snapshot["loop"]["step"])
        if len(steps) == saves:
            raise KeyboardInterrupt("simulated kill")

    monkeypatch.setattr(TR, "_save_state", dying_save)
    return steps


def assert_same_outputs(a: Path, b: Path) -> None:
    for name in OUTPUT_FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_killed_training_resumes_to_the_same_model(tmp_path, parallel_files, straight_run, monkeypatch, caplog):
    out = tmp_path / "model"
    steps = kill_after_saves(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        train_resumable(parallel_files, out)
    assert steps == [10, 20]
    # nothing but the resumable state: no output directory, no hidden staging directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.state.pt"]
    state = torch.load(TR.state_path(out), weights_only=True)
    loop = state["training"]["loop"]
    assert (loop["step"], loop["epoch"], loop["position"], loop["finished"]) == (20, 7, 2, False)
    assert loop["running_tokens"] > 0  # a loss sum carried over the kill
    monkeypatch.undo()
    with caplog.at_level(logging.INFO, logger="pseudopairs.translation.train"):
        bleu = train_resumable(parallel_files, out)
    assert "at update 20" in caplog.text
    assert json.loads((out / "settings.json").read_text())["resumed_from_step"] == 20
    assert json.loads((straight_run / "settings.json").read_text())["resumed_from_step"] is None
    assert_same_outputs(out, straight_run)  # same bytes: weights, log, BLEU, translations
    assert bleu == json.loads((straight_run / "bleu.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # the state is gone


def test_a_changed_input_or_setting_starts_afresh(tmp_path, parallel_files, straight_run, monkeypatch, caplog):
    out = tmp_path / "model"
    kill_after_saves(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        train_resumable(parallel_files, out)
    monkeypatch.undo()
    # checkpoint_every does not change the result (a state saved with another one is resumed);
    # every other setting, the thread count included, does
    src, tgt = parallel_files
    inputs = {"source_train": src, "target_train": tgt, "source_valid": src, "target_valid": tgt}

    def key(**overrides):
        return TR.run_key(TS.TranslationTrainSettings.from_dict({**RESUMABLE, **overrides}), inputs)

    assert key() == key(checkpoint_every=3)
    assert key() != key(lr=1e-3) and key() != key(threads=2)
    # the same content with another modification time is another input
    stat = src.stat()
    os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    with caplog.at_level(logging.INFO, logger="pseudopairs.translation.train"):
        train_resumable(parallel_files, out)
    assert "saved for other inputs or settings; starting afresh" in caplog.text
    assert json.loads((out / "settings.json").read_text())["resumed_from_step"] is None
    assert_same_outputs(out, straight_run)
    assert not TR.state_path(out).exists()
    # an unreadable state is recomputed, not fatal
    TR.state_path(out).write_bytes(b"not a checkpoint")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pseudopairs.translation.train"):
        train_resumable(parallel_files, out, max_steps=5)
    assert "is unreadable" in caplog.text and not TR.state_path(out).exists()


def test_a_failed_run_keeps_its_state_and_leaves_no_staging_directory(tmp_path, parallel_files, straight_run,
                                                                      monkeypatch):
    out = tmp_path / "model"
    leftover = tmp_path / ".model.k1ll3d_x.tmp"  # the staging directory of a run killed long ago
    leftover.mkdir()
    (leftover / "model.pt").write_bytes(b"half")

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(M, "opennmt_checkpoint", broken)  # fails while the outputs are written
    with pytest.raises(OSError, match="no space left"):
        train_resumable(parallel_files, out)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.state.pt"]
    assert torch.load(TR.state_path(out), weights_only=True)["training"]["loop"]["finished"]
    train_resumable(parallel_files, out)  # writes the outputs without training again
    assert json.loads((out / "settings.json").read_text())["resumed_from_step"] == RESUMABLE["max_steps"]
    assert_same_outputs(out, straight_run)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_no_state_is_saved_with_checkpoint_every_null(tmp_path, parallel_files, monkeypatch):
    saves = kill_after_saves(monkeypatch, 1)
    train_resumable(parallel_files, tmp_path / "model", checkpoint_every=None, max_steps=5)
    assert saves == [] and sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_text_readers_read_gzip_by_its_magic_bytes(tmp_path):
    import bz2
    import gzip

    lines = ["ein Hund läuft .", "", "zwei Katzen\tschlafen ."]
    plain = write_lines(tmp_path / "a.de", lines)
    packed = tmp_path / "a.de.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    unnamed = tmp_path / "b.de"  # gzip without the suffix
    unnamed.write_bytes(packed.read_bytes())
    assert TX.read_text_lines(packed) == TX.read_text_lines(unnamed) == TX.read_text_lines(plain) == lines
    members = tmp_path / "c.de.gz"  # two gzip members (cat a.gz b.gz)
    members.write_bytes(gzip.compress(b"eins\n") + gzip.compress(b"zwei\n"))
    assert TX.read_text_lines(members) == ["eins", "zwei"]
    assert TX.read_parallel(packed, plain) == (lines, lines)
    (tmp_path / "bad.gz").write_bytes(packed.read_bytes()[:-12])
    with pytest.raises(ValueError, match=r"bad\.gz: corrupt or truncated gzip file"):
        TX.read_text_lines(tmp_path / "bad.gz")
    (tmp_path / "latin1.gz").write_bytes(gzip.compress("ok\nstraße\n".encode("latin-1")))
    with pytest.raises(ValueError, match=r"latin1\.gz \(gunzipped\): line 2: invalid UTF-8 at byte 4"):
        TX.read_text_lines(tmp_path / "latin1.gz")
    (tmp_path / "a.bz2").write_bytes(bz2.compress(plain.read_bytes()))
    with pytest.raises(ValueError, match=r"a\.bz2: a bzip2 file, not text"):
        TX.read_text_lines(tmp_path / "a.bz2")
    TX.write_text_lines(tmp_path / "out.de.gz", ["a\nb", "c"])
    assert TX.read_text_lines(tmp_path / "out.de.gz") == ["a b", "c"]
    assert (tmp_path / "out.de.gz").read_bytes()[:2] == TX.GZIP_MAGIC


# ---------------------------------------------------------------------------------------------
# convert-mt and CTranslate2 vs PyTorch


def test_converted_directory_is_self_contained(converted, trained):
    names = {p.name for p in converted.iterdir()}
    assert {"model.bin", "config.json", CV.MODEL_INFO, CV.SHARED_TOKENIZER} <= names
    info = json.loads((converted / CV.MODEL_INFO).read_text())
    assert info["model_id"] == "tiny-demo" and info["quantization"] == "none"
    assert info["source"]["sha256"] == TX.sha256_file(trained / "model.pt")
    assert info["source"]["layout"] == "opennmt-py-3"
    assert info["converter"]["class"] == "ctranslate2.converters.OpenNMTPyConverter"
    assert info["tokenizer"]["source"] == info["tokenizer"]["target"] == CV.SHARED_TOKENIZER
    assert info["tokenizer"]["vocabulary_coverage"] == {"source": 1.0, "target": 1.0}
    assert not [p for p in converted.parent.iterdir() if p.name.startswith(".")]  # no staging left


def test_ctranslate2_greedy_equals_pytorch_greedy(trained, converted, pairs):
    import ctranslate2

    checkpoint = M.load_opennmt_checkpoint(trained / "model.pt")
    model = M.model_from_checkpoint(checkpoint)
    vocab = checkpoint["vocab"]["src"]
    index = {t: i for i, t in enumerate(vocab)}
    tokenizer = TX.SentencePieceTokenizer(trained / "sentencepiece.model")
    novel = [en for en, _ in world_pairs(8, seed=11)]
    sentences = [en for en, _ in pairs] + novel + ["red red red", "water"]
    pieces = tokenizer.encode(sentences)
    ids = [[index.get(p, M.UNK_ID) for p in ps] for ps in pieces]
    torch_out = [[vocab[i] for i in out] for out in M.greedy_translate_ids(model, ids, max_length=60)]
    translator = ctranslate2.Translator(str(converted), device="cpu", compute_type="float32", intra_threads=1)
    ct2_out = [r.hypotheses[0] for r in translator.translate_batch(pieces, beam_size=1, max_decoding_length=60)]
    assert ct2_out == torch_out
    assert tokenizer.decode(ct2_out[:len(pairs)]) == [de for _, de in pairs]


def test_convert_rejects_a_tokenizer_of_another_model(trained, tmp_path):
    other = tmp_path / "other.model"
    other.write_bytes(TX.train_sentencepiece(["zzz qqq xxx", "qq zz"], vocab_size=20, model_type="char",
                                            character_coverage=1.0))
    with pytest.raises(ValueError, match="does not match the source vocabulary"):
        CV.convert_checkpoint(trained / "model.pt", tmp_path / "ct2", source_tokenizer=other)
    assert not (tmp_path / "ct2").exists()


def test_convert_errors_name_the_file(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="nothing.pt"):
        CV.convert_checkpoint(tmp_path / "nothing.pt", tmp_path / "out")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"this is not a checkpoint")
    with pytest.raises(ValueError, match="junk.pt: not a readable PyTorch checkpoint"):
        CK.load_checkpoint(junk)
    torch.save({"model": {}}, tmp_path / "partial.pt")
    with pytest.raises(ValueError, match=r"partial.pt: not an OpenNMT-py checkpoint \(missing key"):
        CK.load_checkpoint(tmp_path / "partial.pt")
    assert run_cli("convert-mt", "--checkpoint", str(junk), "--output-dir", str(tmp_path / "o")) == 1
    assert "junk.pt" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Legacy OpenNMT-py checkpoints (torchtext/onmt objects pickled), without torchtext or onmt


@contextlib.contextmanager
def fake_legacy_modules():
    """Modules named like torchtext 0.x and onmt 2.x, present only while pickling."""
    made = {name: types.ModuleType(name) for name in (
        "torchtext", "torchtext.vocab", "torchtext.data", "torchtext.data.field",
        "onmt", "onmt.inputters", "onmt.inputters.text_dataset")}

    def place(obj, module: str):
        obj.__module__ = module
        obj.__qualname__ = obj.__name__
        setattr(made[module], obj.__name__, obj)
        return obj

    def _default_unk_index():
        return 0

    class Vocab:
        def __init__(self, itos):
            self.freqs = collections.Counter(itos)
            self.itos = list(itos)
            self.stoi = collections.defaultdict(_default_unk_index, {t: i for i, t in enumerate(itos)})
            self.vectors = None

    class Field:
        def __init__(self, vocab):
            self.vocab = vocab
            self.sequential = True
            self.pad_token = "<blank>"
            self.tokenize = functools.partial(_feature_tokenize, layer=0, feat_delim=None)

    class TextMultiField:
        def __init__(self, base_name, base_field):
            self.fields = [(base_name, base_field)]
            self.is_target = False

    def _feature_tokenize(string, layer=0, feat_delim=None):
        return string.split()

    place(_default_unk_index, "torchtext.vocab")
    place(Vocab, "torchtext.vocab")
    place(Field, "torchtext.data.field")
    place(TextMultiField, "onmt.inputters.text_dataset")
    place(_feature_tokenize, "onmt.inputters.text_dataset")
    saved = {name: sys.modules.get(name) for name in made}
    sys.modules.update(made)
    try:
        yield types.SimpleNamespace(Vocab=Vocab, Field=Field, TextMultiField=TextMultiField,
                                    tokenize=_feature_tokenize)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def write_legacy_checkpoint(modern: dict, path: Path, *, version: int) -> None:
    """``modern`` (our 3.x layout) re-pickled as OpenNMT-py ``version`` (1 or 2) would have."""
    vocab = modern["vocab"]
    with fake_legacy_modules() as fake:
        opt = argparse.Namespace(**vars(modern["opt"]))
        opt.some_tokenizer = functools.partial(fake.tokenize, layer=1)  # not a plain value
        model = dict(modern["model"])
        generator = dict(modern["generator"])
        if version == 2:
            fields = {"src": fake.TextMultiField("src", fake.Field(fake.Vocab(vocab["src"]))),
                      "tgt": fake.TextMultiField("tgt", fake.Field(fake.Vocab(vocab["tgt"])))}
            torch.save({"model": model, "generator": generator, "vocab": fields, "opt": opt,
                        "optim": None}, path)
        else:
            # 2018 layout: custom LayerNorm (a_2/b_2), Sequential generator, vocab pairs, old format
            renamed = {}
            for key, value in model.items():
                module, _, leaf = key.rpartition(".")
                if module.rsplit(".", 1)[-1].startswith("layer_norm"):
                    leaf = {"weight": "a_2", "bias": "b_2"}[leaf]
                renamed[f"{module}.{leaf}"] = value
            for key in ("max_relative_positions", "self_attn_type", "pos_ffn_activation_fn",
                        "feat_merge", "lambda_align", "decoder_start_token"):
                delattr(opt, key)
            torch.save({"model": renamed, "generator": {f"0.{k}": v for k, v in generator.items()},
                        "vocab": [("src", fake.Vocab(vocab["src"])), ("tgt", fake.Vocab(vocab["tgt"]))],
                        "opt": opt, "epoch": 10, "optim": None},
                       path, _use_new_zipfile_serialization=False)


@pytest.mark.parametrize("version", [1, 2])
def test_legacy_checkpoints_convert_to_the_same_model(version, trained, converted, pairs, tmp_path):
    modern = M.load_opennmt_checkpoint(trained / "model.pt")
    legacy = tmp_path / "averaged-10-epoch.pt"
    write_legacy_checkpoint(modern, legacy, version=version)
    assert "torchtext" not in sys.modules and "onmt" not in sys.modules
    with pytest.raises(Exception):  # the weights-only unpickler refuses it, as the plain converter does
        with torch.serialization.safe_globals([argparse.Namespace]):
            torch.load(legacy, weights_only=True)
    loaded = CK.load_checkpoint(legacy)
    assert loaded.layout == f"opennmt-py-{version}"
    assert "torchtext.vocab.Vocab" in loaded.stand_ins
    assert loaded.checkpoint["vocab"] == {"src": modern["vocab"]["src"], "tgt": modern["vocab"]["tgt"]}
    assert not hasattr(loaded.checkpoint["opt"], "some_tokenizer")
    (tmp_path / "sentencepiece.model").write_bytes((trained / "sentencepiece.model").read_bytes())
    out = tmp_path / "ct2"
    info = CV.convert_checkpoint(legacy, out, quantization="none")  # tokenizer found beside it
    assert info["source"]["layout"] == f"opennmt-py-{version}"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    sentences = [en for en, _ in pairs] + [en for en, _ in world_pairs(4, seed=5)]
    assert ct2_greedy(out, sentences) == ct2_greedy(converted, sentences)


def test_paper_model_source():
    source = TS.paper_model_source()
    assert source["url"] == "https://s3.amazonaws.com/opennmt-models/transformer-ende-wmt-pyOnmt.tar.gz"
    assert source["checkpoint"] == "averaged-10-epoch.pt" and source["tokenizer"] == "sentencepiece.model"
    assert source["sha256"] is None  # none published; see checksums.json


# ---------------------------------------------------------------------------------------------
# translate-captions


@pytest.fixture()
def captions(tmp_path, pairs) -> Path:
    """English and German rows interleaved, images out of order, an empty and a blank caption,
    a very long one."""
    long = " ".join(en.rstrip(".") for en, _ in pairs[:6]) + "."
    rows = [
        ("train", "img9", "en", 0, pairs[0][0]),
        ("train", "img9", "de", 0, pairs[0][1]),
        ("train", "img9", "en", 1, pairs[1][0]),
        ("train", "img2", "en", 0, ""),
        ("restval", "img2", "en", 1, pairs[2][0]),
        ("train", "img2", "de", 0, pairs[2][1]),
        ("train", "img5", "en", 3, "   "),
        ("train", "img5", "en", 0, long),
        ("restval", "img7", "en", 4, pairs[3][0]),
        ("restval", "img1", "en", 2, pairs[4][0]),
        ("restval", "img1", "en", 0, pairs[5][0]),
    ]
    path = tmp_path / "captions" / "train.parquet"
    path.parent.mkdir()
    caption_table(rows).to_parquet(path, index=False)
    return path


def translate(captions: Path, output: Path, model: Path, **overrides):
    settings = TS.TranslateSettings.from_dict({**TRANSLATE, **overrides})
    return TL.translate_captions(captions, output, model_dir=model, source_lang="en", target_lang="de",
                                dataset="coco.de-mt", settings=settings, command="test", progress=False)


def test_translations_empty_once_the_special_tokens_are_dropped_are_counted_and_warned(
        captions, converted, tmp_path, caplog, monkeypatch):
    """A model whose output for a caption is only special / language tokens (here: the first
    non-empty caption's decoded translation made empty) leaves an empty translation: counted in
    the sidecar apart from the empty inputs, and one warning with the count and the first."""
    decode = CV.ModelDir.decode
    lost = []

    def first_lost(self, outputs, *, prefix):   # called once per chunk
        texts = decode(self, outputs, prefix=prefix)
        first = None if lost else next((i for i, t in enumerate(texts) if t), None)
        lost.extend([] if first is None else [first])
        return [("" if i == first else t) for i, t in enumerate(texts)]

    monkeypatch.setattr(CV.ModelDir, "decode", first_lost)
    output = tmp_path / "out" / "train.parquet"
    with caplog.at_level(logging.WARNING, logger="pseudopairs.translation.translate"):
        run = translate(captions, output, converted)
    source = read_captions(captions, lang="en")
    first = next(i for i, t in enumerate(source["raw"]) if t.strip())
    assert (run.empty, run.empty_output) == (2, 1)
    sidecar = json.loads(output.with_suffix(".json").read_text())
    assert (sidecar["counts"]["empty"], sidecar["counts"]["empty_output"]) == (2, 1)
    warnings = [r.getMessage() for r in caplog.records if "translations are empty" in r.getMessage()]
    assert warnings == [f"1 of 9 translations are empty once the model's special and language tokens are "
                        f"dropped (first: image {source['image_id'][first]!r} caption {source['caption_idx'][first]}); "
                        "they are kept as empty captions (a model trains on one as a single padding step), "
                        "and a table with more than 1% of its captions empty is refused where it is read: "
                        "check the model and its language codes"]
    assert read_captions(output)["raw"].tolist()[first] == ""


def test_translations_are_aligned_with_the_source_captions(captions, converted, tmp_path, pairs, caplog):
    output = tmp_path / "out" / "train.parquet"
    source = read_captions(captions, lang="en")
    lengths = [len(p) for p in CV.open_model_dir(converted).source_tokenizer.encode(source["raw"].tolist())]
    longest_normal = sorted(lengths)[-2]  # the long caption is the longest by far
    assert lengths[5] > 2 * longest_normal
    with caplog.at_level(logging.WARNING, logger="pseudopairs.translation.translate"):
        run = translate(captions, output, converted, max_input_tokens=longest_normal)
    out = read_captions(output)
    assert list(out.columns) == CAPTION_COLUMNS
    assert len(out) == len(source) == run.rows == 9
    for column in ("split", "image_id", "caption_idx"):
        assert out[column].tolist() == source[column].tolist()
    assert set(out["lang"]) == {"de"} and set(out["dataset"]) == {"coco.de-mt"}
    assert out["caption_idx"].dtype == source["caption_idx"].dtype
    by_key = dict(zip(zip(out["image_id"], out["caption_idx"]), out["raw"]))
    assert by_key[("img9", 0)] == pairs[0][1] and by_key[("img1", 0)] == pairs[5][1]
    assert by_key[("img2", 0)] == "" and by_key[("img5", 3)] == ""
    assert out["text"].tolist() == [prepare_line(r, lang="de") for r in out["raw"]]
    assert run.empty == 2 and run.truncated == 1
    assert "were truncated" in caplog.text and "'img5'" in caplog.text
    sidecar = json.loads(output.with_suffix(".json").read_text())
    assert sidecar["model_id"] == "tiny-demo" and sidecar["command"] == "test"
    assert sidecar["settings"]["beam_size"] == 1 and sidecar["counts"]["rows"] == 9
    assert sidecar["source_lang"] == "en" and sidecar["target_lang"] == "de"
    assert not (output.parent / "train.parquet.chunks").exists()
    # the untruncated captions get exactly what a bare CTranslate2 call gives
    keep = [i for i, raw in enumerate(source["raw"]) if raw.strip() and i != 5]
    assert [out["raw"][i] for i in keep] == ct2_greedy(converted, [source["raw"][i] for i in keep])


def test_a_declared_opennmt_py_model_translates_as_the_default_conversion(captions, converted, trained, tmp_path):
    """translation.models.NAME with format opennmt_py (convert-mt --spec) goes through the same
    OpenNMTPyConverter call: the same CTranslate2 weights, bare pieces, the same translations;
    its description adds the direction it was declared for, and another is refused."""
    from pseudopairs.translation import models as MD
    from pseudopairs.translation.converters import prepare_model

    config = {"translation": {"models": {"demo": {"format": "opennmt_py", "path": str(trained),
                                                  "files": {"checkpoint": "model.pt"},
                                                  "source_lang": "en", "target_lang": "de"}}}}
    info = prepare_model(MD.convert_spec(config, "demo", model_path=str(trained)), tmp_path / "declared")
    assert info["family"] == "plain" and info["pair"] == ["en", "de"]
    assert info["tokens"] == {"source_prefix": [], "source_suffix": [], "target_prefix": [], "special": []}
    assert info["source"]["format"] == "opennmt_py" and info["source"]["layout"] == "opennmt-py-3"
    assert (tmp_path / "declared" / "model.bin").read_bytes() == (converted / "model.bin").read_bytes()
    translate(captions, tmp_path / "a.parquet", converted)
    translate(captions, tmp_path / "b.parquet", tmp_path / "declared")
    assert read_captions(tmp_path / "a.parquet")["raw"].tolist() == read_captions(tmp_path / "b.parquet")["raw"].tolist()
    with pytest.raises(ValueError, match=r"^translation\.models\.demo: the model translates en -> de, not en -> fr$"):
        TL.translate_captions(captions, tmp_path / "c.parquet", model_dir=tmp_path / "declared", source_lang="en",
                              target_lang="fr", dataset="x", settings=TS.TranslateSettings.from_dict(TRANSLATE),
                              progress=False)


def test_killed_run_resumes_from_its_chunks(captions, converted, tmp_path, monkeypatch):
    reference = tmp_path / "reference" / "train.parquet"
    translate(captions, reference, converted)
    output = tmp_path / "resumed" / "train.parquet"
    real_write = TL._write_chunk
    calls = {"write": 0, "translate": 0}

    def dying_write(*args, **kwargs):
        if calls["write"] == 2:
            raise KeyboardInterrupt("simulated kill")
        calls["write"] += 1
        return real_write(*args, **kwargs)

    monkeypatch.setattr(TL, "_write_chunk", dying_write)
    with pytest.raises(KeyboardInterrupt):
        translate(captions, output, converted)
    assert not output.exists() and not output.with_suffix(".json").exists()
    chunk_dir = output.with_name(output.name + ".chunks")
    assert sorted(p.name for p in chunk_dir.iterdir()) == ["chunk-000000.json", "chunk-000001.json"]
    monkeypatch.setattr(TL, "_write_chunk", real_write)

    real_translate = TL.translate_texts

    def counting(*args, **kwargs):
        calls["translate"] += 1
        return real_translate(*args, **kwargs)

    monkeypatch.setattr(TL, "translate_texts", counting)
    run = translate(captions, output, converted)
    assert (run.reused_chunks, run.computed_chunks, calls["translate"]) == (2, 1, 1)
    pd.testing.assert_frame_equal(read_captions(output), read_captions(reference))
    assert not chunk_dir.exists()


def test_changed_settings_do_not_reuse_chunks(captions, converted, tmp_path, monkeypatch):
    output = tmp_path / "out" / "train.parquet"
    real_write = TL._write_chunk
    chunk_dir = output.with_name(output.name + ".chunks")
    # store one chunk of a beam-1 run, then ask for beam 2
    written = {"n": 0}

    def one_chunk(*args, **kwargs):
        if written["n"] == 1:
            raise KeyboardInterrupt("simulated kill")
        written["n"] += 1
        return real_write(*args, **kwargs)

    monkeypatch.setattr(TL, "_write_chunk", one_chunk)
    with pytest.raises(KeyboardInterrupt):
        translate(captions, output, converted)
    assert len(list(chunk_dir.iterdir())) == 1
    monkeypatch.setattr(TL, "_write_chunk", real_write)
    run = translate(captions, output, converted, beam_size=2)
    assert run.reused_chunks == 0 and run.computed_chunks == 3


def test_missing_or_corrupt_model_is_a_clear_error(captions, converted, tmp_path, capsys):
    output = tmp_path / "out.parquet"
    with pytest.raises(FileNotFoundError, match="translation model directory not found: .*nowhere"):
        translate(captions, output, tmp_path / "nowhere")
    broken = tmp_path / "broken"
    broken.mkdir()
    for item in converted.iterdir():
        (broken / item.name).write_bytes(item.read_bytes())
    (broken / "model.bin").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ValueError, match=r"broken: cannot load the CTranslate2 model"):
        translate(captions, output, broken)
    (broken / CV.MODEL_INFO).write_text("{not json")
    with pytest.raises(ValueError, match=r"pseudopairs_mt.json: corrupt model description"):
        translate(captions, output, broken)
    (broken / CV.MODEL_INFO).unlink()
    with pytest.raises(ValueError, match=r"broken: not a converted translation model directory"):
        translate(captions, output, broken)
    assert not output.exists()
    code = run_cli("translate-captions", "--model", str(tmp_path / "nowhere"), "--captions", str(captions),
                   "--source-lang", "en", "--target-lang", "de", "--dataset", "coco.de-mt",
                   "--output", str(output))
    assert code == 1 and "nowhere" in capsys.readouterr().err


def test_no_source_language_rows_is_an_error(captions, converted, tmp_path):
    settings = TS.TranslateSettings.from_dict(TRANSLATE)
    with pytest.raises(ValueError, match=r"no captions in language 'fr'"):
        TL.translate_captions(captions, tmp_path / "o.parquet", model_dir=converted, source_lang="fr",
                             target_lang="de", dataset="x", settings=settings, progress=False)


def test_cli_convert_and_translate(trained, captions, tmp_path, capsys):
    ct2 = tmp_path / "ct2"
    assert run_cli("convert-mt", "--checkpoint", str(trained / "model.pt"), "--output-dir", str(ct2),
                   "--quantization", "int8") == 0
    info = json.loads((ct2 / CV.MODEL_INFO).read_text())
    assert info["quantization"] == "int8" and info["model_id"].endswith("-int8")
    output = tmp_path / "mt" / "train.parquet"
    assert run_cli("translate-captions", "--model", str(ct2), "--captions", str(captions),
                   "--source-lang", "en", "--target-lang", "de", "--dataset", "coco.de-mt",
                   "--output", str(output), "--settings", json.dumps({"device": "cpu", "chunk_size": 5}),
                   "--threads", "1", "--no-progress") == 0
    sidecar = json.loads(output.with_suffix(".json").read_text())
    assert sidecar["compute_type"] == "int8" and sidecar["settings"]["intra_threads"] == 1
    assert sidecar["command"].startswith("pseudopairs ")
    assert len(read_captions(output)) == 9


def test_moses_preparation_in_worker_processes_gives_the_same_table(captions, converted, tmp_path):
    inline, pooled = tmp_path / "a" / "train.parquet", tmp_path / "b" / "train.parquet"
    translate(captions, inline, converted)
    translate(captions, pooled, converted, prepare_workers=2)
    pd.testing.assert_frame_equal(read_captions(inline), read_captions(pooled))


def test_translate_captions_command_error_is_one_line(captions, tmp_path, capsys):
    """``python -m pseudopairs translate-captions`` (the torch-free GPU environment's command)."""
    code = cli.main(["translate-captions", "--model", str(tmp_path / "absent"), "--captions", str(captions),
                   "--source-lang", "en", "--target-lang", "de", "--dataset", "coco.de-mt",
                   "--output", str(tmp_path / "o.parquet")])
    assert code == 1 and "translation model directory not found" in capsys.readouterr().err


def test_translate_captions_needs_no_torch(captions, converted, tmp_path):
    """The GPU translation environment has no torch: translate-captions must not import it."""
    import subprocess

    output = tmp_path / "nt" / "train.parquet"
    script = (
        "import sys; sys.modules['torch'] = None\n"  # any `import torch` now fails
        "from pseudopairs import cli\n"
        f"sys.exit(cli.main(['translate-captions', '--model', {str(converted)!r}, '--captions', {str(captions)!r},"
        f" '--source-lang', 'en', '--target-lang', 'de', '--dataset', 'coco.de-mt', '--output', {str(output)!r},"
        f" '--settings', {json.dumps(json.dumps(TRANSLATE))}, '--no-progress']))\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(TL.__file__).parents[2])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(read_captions(output)) == 9


# ---------------------------------------------------------------------------------------------
# translate-captions on plain text


@pytest.fixture()
def text_captions(tmp_path, pairs) -> Path:
    """English sentences one per line, gzip-compressed: an empty line, a very long one."""
    import gzip

    long = " ".join(en.rstrip(".") for en, _ in pairs[:6]) + "."
    lines = [pairs[0][0], "", pairs[1][0], long, pairs[2][0], "   ", pairs[3][0]]
    path = tmp_path / "text" / "captions.en.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode("utf-8")))
    return path


def test_plain_text_translates_line_for_line(text_captions, converted, tmp_path, pairs, caplog):
    output = tmp_path / "out" / "captions.de"
    source = TX.read_text_lines(text_captions)
    lengths = [len(p) for p in CV.open_model_dir(converted).source_tokenizer.encode(source)]
    limit = sorted(lengths)[-2]  # the long line is the longest by far
    with caplog.at_level(logging.WARNING, logger="pseudopairs.translation.translate"):
        run = translate(text_captions, output, converted, max_input_tokens=limit)
    out = TX.read_text_lines(output)
    assert len(out) == len(source) == run.rows == 7
    assert (run.empty, run.truncated) == (2, 1) and "(first: line 4)" in caplog.text
    assert out[1] == out[5] == ""
    keep = [0, 2, 4, 6]
    assert [out[i] for i in keep] == ct2_greedy(converted, [source[i] for i in keep])
    assert [out[i] for i in keep] == [pairs[i][1] for i in range(4)]  # the raw translations
    sidecar = json.loads(output.with_suffix(".json").read_text())
    assert sidecar["input"] == "text" and sidecar["dataset"] is None and sidecar["case"] is None
    assert sidecar["counts"]["rows"] == 7 and sidecar["model_id"] == "tiny-demo"
    assert not (output.parent / "captions.de.chunks").exists()
    # with --case the lines are Moses-prepared, as captions are; a .gz output is compressed
    prepared = tmp_path / "out" / "captions.prepared.de.gz"
    assert run_cli("translate-captions", "--model", str(converted), "--captions", str(text_captions),
                   "--source-lang", "en", "--target-lang", "de", "--output", str(prepared),
                   "--case", "lowercase", "--settings", json.dumps({**TRANSLATE, "max_input_tokens": limit}),
                   "--no-progress") == 0
    assert prepared.read_bytes()[:2] == TX.GZIP_MAGIC
    assert TX.read_text_lines(prepared) == [prepare_line(r, lang="de") for r in out]


def test_plain_text_and_table_outputs_are_checked(text_captions, captions, converted, tmp_path, capsys):
    with pytest.raises(ValueError, match="the input .*captions.en.gz is plain text, so the output is plain text"):
        translate(text_captions, tmp_path / "o.parquet", converted)
    with pytest.raises(ValueError, match="--output must be a .parquet caption table"):
        translate(captions, tmp_path / "o.de", converted)
    with pytest.raises(ValueError, match="--dataset must name the data set"):
        TL.translate_captions(captions, tmp_path / "o.parquet", model_dir=converted, source_lang="en",
                              target_lang="de", settings=TS.TranslateSettings.from_dict(TRANSLATE))
    with pytest.raises(FileNotFoundError, match="captions not found: .*nothing.en"):
        translate(tmp_path / "nothing.en", tmp_path / "o.de", converted)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("o.")]


def test_translate_captions_help_describes_both_inputs(capsys):
    with pytest.raises(SystemExit):
        run_cli("translate-captions", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "caption table a .parquet caption table" in text
    assert "plain text any other file: UTF-8, one sentence per line, optionally gzip-compressed" in text
    assert "--dataset" in text and "required for a caption table" in text
    doc = " ".join(TL.translate_captions.__doc__.split())
    assert "A **caption table**" in doc and "**Plain text**" in doc


# ---------------------------------------------------------------------------------------------
# score-mt


def test_score_mt_on_the_memorised_pairs(trained, converted, pairs):
    src, tgt = trained.parent / "train.en", trained.parent / "train.de"
    result = SC.score_mt(model_dir=converted, source=src, reference=tgt,
                         settings=TS.TranslateSettings.from_dict(TRANSLATE), command="test")
    output = converted.with_name("model.train.bleu.json")  # beside the model directory
    assert json.loads(output.read_text()) == result
    assert result["bleu"] == 100.0 and result["sentences"] == len(pairs)
    assert result["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    assert result["model_id"] == "tiny-demo" and result["settings"]["beam_size"] == 1
    assert result["compute_type"] == "float32" and result["device"] == "cpu"
    assert result["counts"]["sentences"] == len(pairs) and result["counts"]["empty"] == 0
    # the same numbers as train-mt's greedy decoding of the PyTorch model on these pairs
    bleu = json.loads((trained / "bleu.json").read_text())
    assert {k: result[k] for k in ("bleu", "precisions", "sys_len", "ref_len")} == \
        {k: bleu[k] for k in ("bleu", "precisions", "sys_len", "ref_len")}


def test_score_mt_command_with_the_pipeline_settings(converted, pairs, tmp_path, capsys):
    import gzip

    src, tgt = tmp_path / "test.en.gz", tmp_path / "test.de"
    novel = world_pairs(8, seed=11)
    src.write_bytes(gzip.compress("".join(en + "\n" for en, _ in pairs + novel).encode()))
    write_lines(tgt, [de for _, de in pairs + novel])
    output, hypotheses = tmp_path / "bleu.json", tmp_path / "test.hyp.de"
    settings = {"device": "cpu", "chunk_size": 7}  # otherwise the defaults: beam 5, int8
    assert run_cli("score-mt", "--model", str(converted), "--source", str(src), "--reference", str(tgt),
                   "--output", str(output), "--hypotheses", str(hypotheses), "--threads", "1",
                   "--settings", json.dumps(settings)) == 0
    result = json.loads(output.read_text())
    assert f"score-mt: BLEU {result['bleu']:.2f} on 20 sentences" in capsys.readouterr().out
    assert result["settings"]["beam_size"] == 5 and result["compute_type"] == "int8"
    assert result["settings"]["intra_threads"] == 1 and result["command"].startswith("pseudopairs ")
    assert 0 < result["bleu"] <= 100 and result["counts"]["sentences"] == 20
    hyps = TX.read_text_lines(hypotheses)
    assert len(hyps) == 20 and TX.compute_bleu(hyps, [de for _, de in pairs + novel])["bleu"] == result["bleu"]
    # exactly the translations translate-captions makes with these settings
    translated = tmp_path / "test.mt.de"
    assert run_cli("translate-captions", "--model", str(converted), "--captions", str(src), "--source-lang",
                   "en", "--target-lang", "de", "--output", str(translated), "--threads", "1",
                   "--settings", json.dumps(settings), "--no-progress") == 0
    assert TX.read_text_lines(translated) == hyps
    assert run_cli("score-mt", "--model", str(converted), "--source", str(src), "--reference",
                   str(tmp_path / "missing.de")) == 1
    assert "missing.de" in capsys.readouterr().err
    write_lines(tgt, ["eins"])
    assert run_cli("score-mt", "--model", str(converted), "--source", str(src), "--reference", str(tgt)) == 1
    assert "test.en.gz has 20 lines" in capsys.readouterr().err


def test_score_mt_and_text_translation_need_no_torch(text_captions, converted, trained, tmp_path):
    import subprocess

    output, scored = tmp_path / "nt" / "captions.de", tmp_path / "nt" / "bleu.json"
    src, tgt = trained.parent / "train.en", trained.parent / "train.de"
    settings = json.dumps(json.dumps(TRANSLATE))
    script = (
        "import sys; sys.modules['torch'] = None\n"  # any `import torch` now fails
        "from pseudopairs import cli\n"
        f"code = cli.main(['translate-captions', '--model', {str(converted)!r}, '--captions', {str(text_captions)!r},"
        f" '--source-lang', 'en', '--target-lang', 'de', '--output', {str(output)!r},"
        f" '--settings', {settings}, '--no-progress'])\n"
        f"code += cli.main(['score-mt', '--model', {str(converted)!r}, '--source', {str(src)!r},"
        f" '--reference', {str(tgt)!r}, '--output', {str(scored)!r}, '--settings', {settings}])\n"
        "sys.exit(code)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(TL.__file__).parents[2])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(TX.read_text_lines(output)) == 7 and json.loads(scored.read_text())["bleu"] == 100.0

"""Paper 002's augmented training set (§4, supplementary Table 4): the
``augment-captions`` step on hand-made caption tables (captions per image counted by hand, the
``min_per_image`` check), the contract (directions from the config, the checks naming their key),
the SMALR rows training on it, and both configurations' dry runs."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest

from conftest import paper_dry_run, run_snakemake
from pseudopairs import cli
from pseudopairs.workflow.config import ConfigError, check_config, load_schema
from pseudopairs.core.io import CAPTION_COLUMNS
from pseudopairs.model import contract as model_contract
from pseudopairs.smalr import augment_contract, clc_contract
from pseudopairs.smalr.augment import augmented_table
from test_experiments import demo
from test_workflow import job_counts


def _table(path, rows):
    """A prepared caption table: rows of (image_id, lang, caption_idx, text)."""
    frame = pd.DataFrame([("x", "train", img, lang, idx, text.upper(), text)
                          for img, lang, idx, text in rows], columns=CAPTION_COLUMNS)
    frame.to_parquet(path, index=False)
    return str(path)


def _spec(tmp_path, *, min_per_image=3):
    # French: a human table with German rows too (only fr kept): img0 1 caption, img1 1 caption;
    # English -> French translations: img0 2 captions, img1 3 captions
    human = _table(tmp_path / "human.parquet", [("img0", "fr", 0, "un chat"), ("img0", "de", 0, "eine katze"),
                                               ("img1", "fr", 0, "un chien")])
    translated = _table(tmp_path / "mt.parquet", [("img0", "fr", 0, "le chat"), ("img0", "fr", 1, "chat"),
                                                 ("img1", "fr", 0, "le chien"), ("img1", "fr", 1, "chien"),
                                                 ("img1", "fr", 2, "un chien noir")])
    return {"dataset": "aug.fr", "lang": "fr", "min_per_image": min_per_image,
            "human": [{"source": "task1.fr", "captions": human}],
            "translated": [{"source": "m30k.en", "captions": translated}]}


def test_the_augmented_table_is_the_human_captions_then_the_translations_by_image(tmp_path):
    frame = augmented_table(_spec(tmp_path))
    assert list(frame.columns) == CAPTION_COLUMNS + ["source"]
    assert (frame["lang"] == "fr").all() and (frame["dataset"] == "aug.fr").all()
    img0 = frame[frame["image_id"] == "img0"]
    assert img0["text"].tolist() == ["un chat", "le chat", "chat"]            # the German row dropped
    assert img0["caption_idx"].tolist() == [0, 1, 2]                          # renumbered per image
    assert img0["source"].tolist() == ["task1.fr", "mt:m30k.en", "mt:m30k.en"]
    img1 = frame[frame["image_id"] == "img1"]
    assert img1["caption_idx"].tolist() == [0, 1, 2, 3] and img1["raw"].iloc[0] == "UN CHIEN"


def test_an_image_with_too_few_captions_is_named_and_nothing_is_written(tmp_path):
    spec = _spec(tmp_path, min_per_image=4)                                  # img0 has 3
    with pytest.raises(ValueError, match=r"data set aug\.fr: image 'img0' has 3 fr caption\(s\), fewer "
                                         r"than augment\.min_per_image = 4 \(1 of 2 images"):
        augmented_table(spec)
    out, sidecar = tmp_path / "out" / "train.parquet", tmp_path / "out" / "train.json"
    assert cli.main(["augment-captions", "--spec", json.dumps(spec), "--output", str(out),
                     "--sidecar", str(sidecar)]) != 0
    assert not out.exists() and not sidecar.exists()
    assert cli.main(["augment-captions", "--spec", json.dumps(_spec(tmp_path)), "--output", str(out),
                     "--sidecar", str(sidecar)]) == 0
    info = json.loads(sidecar.read_text())
    assert info["per_image"] == {"min": 3, "mean": 3.5, "max": 4}
    assert info["per_source"] == {"task1.fr": 2, "mt:m30k.en": 5} and info["captions"] == 7
    assert pd.read_parquet(out)["text"].tolist()[:2] == ["un chat", "un chien"]


def test_a_table_without_the_language_or_prepared_text_is_named(tmp_path):
    spec = _spec(tmp_path)
    spec["lang"] = "cs"
    with pytest.raises(ValueError, match=r"human\.parquet: no 'cs' captions \(human task1\.fr\)"):
        augmented_table(spec)
    spec = _spec(tmp_path)
    raw = pd.read_parquet(spec["translated"][0]["captions"]).drop(columns=["text"])
    raw.to_parquet(tmp_path / "raw.parquet", index=False)
    spec["translated"][0]["captions"] = str(tmp_path / "raw.parquet")
    with pytest.raises(ValueError, match=r"raw\.parquet: caption table has no prepared 'text' column "
                                         r"\(translation of m30k\.en\)"):
        augmented_table(spec)


# ---------------------------------------------------------------------------------------------
# the contract: 002's Table 4 as config data


def test_the_demo_augments_as_002s_table_4():
    """Supplementary Table 4 (Multi30K): En from De, Fr, Cs; De, Fr, Cs from En. Per image (5
    comparable En and De, 1 of each translation-portion language): En 5 + 1 + 5 + 1 + 1 = 13,
    De 5 + 1 + 5 = 11, Fr and Cs 1 + 5 = 6, all at least 002's five."""
    config = demo()
    assert augment_contract.augmented_datasets(config) == ["m30k_aug.en", "m30k_aug.de", "m30k_aug.fr",
                                                           "m30k_aug.cs"]
    assert augment_contract.augment_directions(config) == [("de", "en"), ("fr", "en"), ("cs", "en"),
                                                           ("en", "de"), ("en", "fr"), ("en", "cs")]
    per_image = {"m30k.en": 5, "m30k.de": 5, "m30k_task1.en": 1, "m30k_task1.de": 1,
                 "m30k_task1.fr": 1, "m30k_task1.cs": 1}
    counts = {name: sum(per_image[s] for key in ("human", "translate")
                        for s in augment_contract.augment_entry(config, name)[key])
              for name in augment_contract.augmented_datasets(config)}
    assert counts == {"m30k_aug.en": 13, "m30k_aug.de": 11, "m30k_aug.fr": 6, "m30k_aug.cs": 6}
    assert all(augment_contract.augment_entry(config, n)["min_per_image"] == 5 for n in counts)
    # the translations reuse the CLC models: no new direction, language or parallel text
    assert len(clc_contract.directions(config)) == 12 and clc_contract.mt_langs(config) == clc_contract.clc_langs(config)
    assert clc_contract.augment_translate_spec(config, "m30k_aug.de", "m30k.en") == {
        "model": "results/translation_model/ctranslate2", "captions": "results/captions/m30k/train.parquet",
        "source_lang": "en", "target_lang": "de", "dataset": "m30k_aug.de.mt-m30k.en"}
    assert clc_contract.augment_translate_spec(config, "m30k_aug.en", "m30k_task1.cs")["model"] == \
        "results/clc/mt/cs2en/ctranslate2"
    assert augment_contract.augment_inputs(config, "m30k_aug.fr") == [
        "results/captions/m30k_task1/train.parquet", "results/smalr/augment/m30k_aug.fr/mt/m30k.en.parquet"]


def test_002s_rows_train_on_the_augmented_set_and_the_dagger_rows_on_the_translation_portion():
    config = demo()
    for name in ("smalr_la", "smalr_hem", "smalr"):
        spec = model_contract.training_spec(config, name, 1)
        assert [d["captions"] for d in spec["c2i"]] == [
            f"results/smalr/augment/m30k_aug.{lang}/train.parquet" for lang in ("en", "de", "fr", "cs")]
        assert [d["lang"] for d in spec["c2i"]] == ["en", "de", "fr", "cs"]
        assert spec["c2i"][2]["features"] == "results/features/m30k/train.npz"
    for name in ("smalr_hem_task1", "smalr_task1"):
        spec = model_contract.training_spec(config, name, 1)
        assert {d["captions"] for d in spec["c2i"]} == {"results/captions/m30k_task1/train.parquet"}


def _errors(config):
    from pseudopairs.workflow.config import contract_errors
    return contract_errors(config)


def test_bad_augmentations_are_refused_naming_the_key():
    config = demo()
    cases = [
        ({"human": ["m30k.de"]}, "datasets.m30k_aug.fr.augment.human.0'", "human captions are kept as they are"),
        ({"translate": ["m30k_task1.fr"]}, "datasets.m30k_aug.fr.augment.translate.0'", "list it under human"),
        ({"translate": ["m30k.xx"]}, "datasets.m30k_aug.fr.augment.translate.0'", "unknown data set 'm30k.xx'"),
        ({"translate": ["coco.en"]}, "datasets.m30k_aug.fr.augment.translate.0'", "describes the 'coco' images"),
        ({"translate": ["coco.de-mt"]}, "datasets.m30k_aug.fr.augment.translate.0'", "is a translation data set"),
        ({"human": [], "translate": []}, "datasets.m30k_aug.fr.augment'", "names no data set"),
    ]
    for entry, key, why in cases:
        bad = copy.deepcopy(config)
        bad["datasets"]["m30k_aug.fr"]["augment"] = {**bad["datasets"]["m30k_aug.fr"]["augment"], **entry}
        messages = _errors(bad)
        assert any(key in m and why in m for m in messages), (entry, messages)
    bad = copy.deepcopy(config)
    bad["datasets"]["m30k_aug.fr"]["select"] = {"captions_per_image": 1, "seed": 0}
    assert any("a data set is one of pseudopairs, a translation, a selection or an augmentation" in m
               for m in _errors(bad))
    bad = copy.deepcopy(config)
    bad["datasets"]["m30k_aug.fr"]["augment"]["mt"] = ["m30k.en"]
    with pytest.raises(ConfigError, match=r"datasets\.m30k_aug\.fr\.augment.*'mt'"):
        check_config(bad, load_schema())
    assert not augment_contract.check(config)


# ---------------------------------------------------------------------------------------------
# dry runs


def test_demo_dag_augments_before_the_smalr_rows_train(tmp_path):
    result = run_snakemake(tmp_path, "-n", "--cores", "2", "results/models/smalr/seed1/metrics.json")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert counts["translate_augment"] == 6 and counts["augment_captions"] == 4
    assert counts["train_mt_clc"] == 5            # en2fr, en2cs, de2en, fr2en, cs2en (en2de: translation.model)
    assert "output: results/smalr/augment/m30k_aug.fr/train.parquet, results/smalr/augment/m30k_aug.fr/train.json" in result.stdout


def test_real_configuration_dag_augments_too(tmp_path):
    result = paper_dry_run(tmp_path, "results/smalr/augment/m30k_aug.cs/train.parquet")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert counts["translate_augment"] == 1 and counts["augment_captions"] == 1
    assert "results/clc/mt/en2cs/ctranslate2" in result.stdout

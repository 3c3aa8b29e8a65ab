"""Config validation: both shipped configs pass; wrong types, missing and unknown keys and
dangling references fail naming the key; Snakemake refuses before any job runs."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from conftest import REPO, run_snakemake
from pseudopairs.workflow.config import ConfigError, check_config, load_config


def shipped(name: str) -> dict:
    return load_config(REPO / "config" / "experiments.yaml", REPO / "config" / name)


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_shipped_configs_are_valid(name):
    config = check_config(shipped(name))
    assert config["experiments"]["en"].get("c2c", []) == []  # schema default filled in


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["training"].update(batch_size="big"), "config key 'training.batch_size': 'big' is not of type 'integer'"),
        (lambda c: c["model"].pop("joint_dim"), "config key 'model': 'joint_dim' is a required property"),
        (lambda c: c["training"].update(learning_rat=1e-3), "config key 'training': unknown key(s) 'learning_rat'"),
        (lambda c: c.update(sedes=[1]), "config key '<top level>': unknown key(s) 'sedes'"),
        (lambda c: c["text"].update(case="upper"), "config key 'text.case'"),
        (lambda c: c["data"].update(source="paper"), "'paper_data' is a required property"),
        (lambda c: c["experiments"]["en"].update(c2i=["m30k.fr"]), "config key 'experiments.en.c2i.0': unknown data set 'm30k.fr'"),
        (lambda c: c["experiments"]["en"].update(c2c=[["m30k.en", "coco.en"]]), "config key 'experiments.en.c2c.0': a c2c pair needs two languages over the same images"),
        (lambda c: c["experiments"]["en"].update(finetune="nope"), "config key 'experiments.en.finetune': unknown experiment 'nope'"),
        (lambda c: (c["experiments"]["en"].update(finetune="de"), c["experiments"]["de"].update(finetune="en")), "cycle en -> de -> en"),
        (lambda c: c["tables"]["table1"]["rows"][0].update(experiment="missing"), "config key 'tables.table1.rows.0.experiment': unknown experiment 'missing'"),
        (lambda c: c.update(seeds=[1, 1]), "config key 'seeds'"),
        (lambda c: c["datasets"]["coco.de-pseudo@de_coco"].update(pseudopairs="nope"),
         "config key 'datasets.coco.de-pseudo@de_coco.pseudopairs': unknown pseudopair set 'nope'"),
        (lambda c: c["datasets"]["coco.de-pseudo@de_coco"].update(lang="en"),
         "pseudopair set 'de_coco' gives 'de' captions of 'coco' images, but the data set says corpus 'coco', lang 'en'"),
        (lambda c: c["datasets"]["m30k.de"].update(min_percentile=25),
         "config key 'datasets.m30k.de.min_percentile': only pseudopair data sets are filtered"),
        (lambda c: c["datasets"]["coco.de-pseudo@de_coco"].update(min_percentile=150),
         "config key 'datasets.coco.de-pseudo@de_coco.min_percentile': 150 is greater than the maximum of 100"),
        (lambda c: c["datasets"]["coco.de-mt"].update(translation="coco.de-pseudo@de_coco"),
         "translate the captions of a corpus, not of the synthetic data set 'coco.de-pseudo@de_coco'"),
        (lambda c: c["pseudopairs"]["de_coco"].update(source="nope"),
         "config key 'pseudopairs.de_coco.source': unknown experiment 'nope'"),
        (lambda c: c["pseudopairs"]["de_coco"].update(database="coco.en"),
         "config key 'pseudopairs.de_coco': queries and database are in the same language"),
        (lambda c: c["pseudopairs"]["de_coco.csls"]["mining"].update(beta=3),
         "config key 'pseudopairs.de_coco.csls.mining.beta': beta is only used by the criteria "
         "['dynamic_inverted_softmax', 'inverted_softmax', 'sinkhorn'], not 'csls'"),
        (lambda c: c["pseudopairs"]["de_coco.csls"]["mining"].update(criterion="hubless"),
         "config key 'pseudopairs.de_coco.csls.mining.criterion'"),
        (lambda c: c["pseudopairs"]["de_coco.csls"]["mining"].update(k=0),
         "config key 'pseudopairs.de_coco.csls.mining.k': 0 is less than the minimum of 1"),
        (lambda c: c["training"].update(c2c_warmup=2.0),
         "config key 'training.c2c_warmup': 2.0 is greater than the maximum of 1"),
        (lambda c: c["training"].update(objective="joint?"),
         "config key 'training.objective': must be one of ['sampled', 'joint', 'smalr'] (got 'joint?')"),
        (lambda c: c["experiments"]["en"].update(training={"similarity": "dot"}),
         "config key 'training.similarity': must be one of ['cosine', 'order'] (got 'dot') (with the overrides of "
         "experiments.en.training)"),
        (lambda c: c["features"].update(resize=50),
         "config key 'features.crop': must not exceed features.resize (50) (got 64)"),
        (lambda c: c["pseudopair_stats"]["compare"][0].update(b="nope"),
         "config key 'pseudopair_stats.compare.0.b': unknown pseudopair set 'nope'"),
        (lambda c: c["pseudopair_stats"].update(sets=["de_coco", "nope"]),
         "config key 'pseudopair_stats.sets.1': unknown pseudopair set 'nope'"),
        (lambda c: c["pseudopair_stats"].update(sets=["de_coco"]),
         "config key 'pseudopair_stats.compare.0.b': set 'en_de_coco_c2c' is not among pseudopair_stats.sets"),
        # de_coco trained on pseudopairs mined by its own model
        (lambda c: c["experiments"]["de_coco"].update(c2i=["m30k.de", "coco.de-pseudo@de_coco"]),
         "dependency cycle de_coco -> de_coco"),
        (lambda c: c.pop("translation"), "config key 'translation': required by the translated data set(s) ['coco.de-mt']"),
        (lambda c: c["translation"]["model"].update(target_lang="fr"),
         "config key 'datasets.coco.de-mt': translates 'en' -> 'de', but the model in 'translation.model' goes 'en' -> 'fr'"),
        (lambda c: c["translation"]["model"].update(source="download"),
         "config key 'translation.model.url': required with source: download"),
        (lambda c: c["translation"]["model"].update(quantization="int4"),
         "config key 'translation.model.quantization': 'int4' is not one of"),
        (lambda c: c["translation"]["train"].update(epoch=3),
         "config key 'translation.train': unknown key(s) 'epoch'"),
        (lambda c: c["translation"]["translate"].update(beam_size=0),
         "config key 'translation.translate.beam_size': 0 is less than the minimum of 1"),
        # paper 004's tables: per-table columns, per-language rows, the test corpus, the seeds
        (lambda c: c["tables"]["table_lessons4"]["rows"][1]["paper"].update(en=[67.4, 55.1, 1.0]),
         ("config key 'tables.table_lessons4.rows.1.paper.en': 3 numbers for the table's 2 columns "
          "['i2t_r10', 't2i_r10']")),
        (lambda c: c["tables"]["table_lessons4"]["rows"][0]["experiments"].update(de="t_dee"),
         "config key 'tables.table_lessons4.rows.0.experiments.de': unknown experiment 't_dee'"),
        (lambda c: c["tables"]["table_lessons4"]["rows"][0]["experiments"].update(fr="t_fr"),
         "config key 'tables.table_lessons4.rows.0.experiments.fr': the table has no language 'fr'"),
        (lambda c: c["tables"]["table_lessons4"]["rows"][0].update(experiment="t_en"),
         "config key 'tables.table_lessons4.rows.0': give experiment or per-language experiments, not both"),
        (lambda c: c["tables"]["table_lessons4"].update(columns=["t2i_r10", "t2i_r20"]),
         "config key 'tables.table_lessons4.columns.1': 't2i_r20' is not one of"),
        (lambda c: c["tables"]["table_lessons7"].update(test_corpus="coco"),
         ("config key 'tables.table_lessons7.test_corpus': 'coco' is neither the evaluation corpus 'm30k' "
          "nor the translation corpus 'm30k_task1'")),
        # French is tested on the translation portion only
        (lambda c: c["tables"]["table_lessons7"].pop("test_corpus"),
         "config key 'tables.table_lessons7.langs.0': models are not tested in 'fr' on corpus 'm30k'"),
        (lambda c: c["tables"]["table_lessons7"].update(seeds=[1, 1]), "config key 'tables.table_lessons7.seeds'"),
        (lambda c: c["tables"]["table7"].update(columns=["t2i_r10"]),
         "config key 'tables.table7.columns': only retrieval tables have it"),
        # a language neither the evaluation corpus nor the translation corpus has: no validation
        (lambda c: (c["datasets"].update({"coco.ja": {"corpus": "coco", "lang": "ja"}}),
                    c["experiments"].update({"ja": {"c2i": ["coco.ja"]}})),
         "config key 'experiments.ja': no validation captions in language 'ja'"),
        (lambda c: c["experiments"]["t_multi_c2c"]["c2c"].append(["m30k_task1.fr", "coco.en"]),
         "config key 'experiments.t_multi_c2c.c2c.6': a c2c pair needs two languages over the same images"),
        (lambda c: c["translation"]["model"].update(parallel_text={"train": {"en": "a.en", "de": "a.de"},
                                                                    "valid": {"en": "b.en", "fr": "b.fr"}}),
         "config key 'translation.model.parallel_text.valid': no 'de' file"),
    ],
)
def test_bad_config_names_the_key(mutate, message):
    assert_refused(mutate, message)


def assert_refused(mutate, message):
    """The shipped config changed by ``mutate`` is refused with ``message``."""
    config = copy.deepcopy(shipped("config.yaml"))
    mutate(config)
    with pytest.raises(ConfigError) as err:
        check_config(config)
    assert message in str(err.value)


# What the settings classes document as valid, the config checks accept (the schema's settings
# sections are generated from the classes: pseudopairs.core.settings.expand_schema).
@pytest.mark.parametrize("mutate", [
    lambda c: c["training"].update(grad_clip=0),            # "0 = none"
    lambda c: c["training"].update(device="cuda:1"),        # "auto | cpu | cuda | cuda:N"
    lambda c: c["training"].update(threads=0),              # "0: torch's default"
    lambda c: c["experiments"]["en"].update(training={"grad_clip": 0, "device": "cuda:0", "threads": 0}),
    lambda c: c["translation"]["train"].update(max_steps=None, dropout=0.0),
    lambda c: c["translation"]["translate"].update(intra_threads=0, threads=1),
    lambda c: c["features"].update(threads=None),
    lambda c: c["world"].pop("image_size"),                 # a default of its class
])
def test_what_the_settings_document_as_valid_is_accepted(mutate):
    config = copy.deepcopy(shipped("config.yaml"))
    mutate(config)
    check_config(config)


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["training"].update(grad_clip=-1), "config key 'training.grad_clip': -1 is less than the minimum of 0"),
    (lambda c: c["training"].update(device="gpu"), "config key 'training.device': must be auto, cpu, cuda or cuda:N, got 'gpu'"),
    (lambda c: c["training"].update(threads=-1), "config key 'training.threads'"),
    (lambda c: c["experiments"]["en"].update(training={"grad_clip": -0.5}),
     "config key 'experiments.en.training.grad_clip': -0.5 is less than the minimum of 0"),
    (lambda c: c["experiments"]["en"].update(training={"device": "gpu"}),
     "config key 'experiments.en.training.device': must be auto, cpu, cuda or cuda:N, got 'gpu'"),
    (lambda c: c["experiments"]["en"].update(training={"learning_rat": 1}),
     "config key 'experiments.en.training': unknown key(s) 'learning_rat'"),
    (lambda c: c["translation"]["train"].update(layers=3), "config key 'translation.train': unknown key(s) 'layers'"),
    (lambda c: c["translation"]["translate"].update(beams=3), "config key 'translation.translate': unknown key(s) 'beams'"),
    (lambda c: c["translation"]["translate"].update(threads=0), "config key 'translation.translate.threads'"),
    (lambda c: c["translation"]["train"].update(dropout=1.0),
     "config key 'translation.train.dropout': 1.0 is greater than or equal to the maximum of 1.0"),
    (lambda c: c["training"].update(c2c_warmup=0), "config key 'training.c2c_warmup': 0 is less than or equal to the minimum of 0"),
    (lambda c: c["world"].update(max_groups=4), "config key 'world.max_groups': 4 is greater than the maximum of 3"),
    (lambda c: c["world"]["images"].pop("coco"), "config key 'world.images': 'coco' is a required property"),
    (lambda c: c["world"].update(max_groups=3, max_objects=2),
     "config key 'world.max_objects': must be ≥ world.max_groups (3) (got 2)"),
    (lambda c: c["features"].update(resize=8), "config key 'features.resize': 8 is less than the minimum of 16"),
    (lambda c: c["mining"].update(device="cuda:x"), "config key 'mining.device': must be auto, cpu, cuda or cuda:N, got 'cuda:x'"),
    (lambda c: c["pseudopairs"]["de_coco.csls"]["mining"].update(tol=-1.0),
     "config key 'pseudopairs.de_coco.csls.mining.tol': -1.0 is less than the minimum of 0.0"),
    (lambda c: c["pseudopairs"]["de_coco.csls"]["mining"].update(kk=3),
     "config key 'pseudopairs.de_coco.csls.mining': unknown key(s) 'kk'"),
])
def test_what_the_settings_call_invalid_is_refused_naming_the_key(mutate, message):
    assert_refused(mutate, message)


def test_settings_defaults_the_workflow_reads_are_filled_in_and_no_others():
    """``x-fill`` in the schema: a default the rules read from the config is written into it (as
    the hand-written schema did); any other default is left to the step, so the jobs' parameters
    of a config that omits it stay what they were."""
    config = copy.deepcopy(shipped("config.yaml"))
    for key in ("device", "threads"):
        config["training"].pop(key)
    config["world"].pop("image_size")
    assert "max_groups" not in config["world"]
    check_config(config)
    assert config["training"]["device"] == "auto" and config["training"]["threads"] == 1
    assert config["world"]["max_groups"] == 3 and config["world"]["image_size"] == 112
    assert "objective" not in config["training"] and "similarity" not in config["training"]
    assert "checkpoint_every" not in config["translation"]["train"]
    assert "device_index" not in config["translation"]["translate"]
    assert "training" not in config["experiments"]["en"]
    assert set(config["experiments"]["en_oe"]["training"]) == {"similarity", "margin", "max_violation"}


def test_snakemake_refuses_bad_config_before_any_job(tmp_path):
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["training"]["patience"] = "ten"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    result = run_snakemake(tmp_path, "-n", "--cores", "1", "results/captions/m30k/train.parquet", "--configfile", str(bad))
    assert result.returncode != 0
    assert "config key 'training.patience': 'ten' is not of type 'integer'" in result.stderr + result.stdout
    assert not (tmp_path / "results").exists()


def test_conda_environment_pins_the_same_versions_as_pyproject():
    """envs/pseudopairs.yaml installs the workflow for conda users: its pins must not drift
    from pyproject.toml's (the venv route), and it installs this package itself."""
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    pinned = set(pyproject["project"]["dependencies"])
    env = yaml.safe_load((REPO / "envs" / "pseudopairs.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "-e ../" in pip
    assert set(pip) - {"-e ../"} == pinned


def test_per_rule_environments_pin_as_pyproject():
    """envs/steps.yaml (every step) and envs/translation.yaml (the translate job, no torch) pin
    the same versions as pyproject.toml (steps.yaml also its `translation` extra, which
    convert-mt needs for Hugging Face models); only the CUDA 12 cuBLAS wheel is translation's own."""
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    pinned = {p.split("==")[0].lower(): p for p in pyproject["project"]["dependencies"]}
    converters = {p.split("==")[0].lower() for p in pyproject["project"]["optional-dependencies"]["translation"]}
    pinned.update({p.split("==")[0].lower(): p for p in pyproject["project"]["optional-dependencies"]["translation"]})
    steps = yaml.safe_load((REPO / "envs" / "steps.yaml").read_text())
    assert converters <= {r.split("==")[0].lower() for r in steps["dependencies"][-1]["pip"]}
    for name, extra in (("steps.yaml", set()), ("translation.yaml", {"nvidia-cublas-cu12"})):
        env = yaml.safe_load((REPO / "envs" / name).read_text())
        pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
        for requirement in pip:
            package = requirement.split("==")[0].lower()
            assert "==" in requirement, (name, requirement)
            assert package in extra or pinned.get(package) == requirement, (name, requirement)
    translation = yaml.safe_load((REPO / "envs" / "translation.yaml").read_text())
    assert not [r for r in translation["dependencies"][-1]["pip"] if r.startswith("torch")]


def test_a_configfile_with_a_few_keys_layers_over_the_defaults(tmp_path):
    """`--configfile` files are merged over config/config.yaml (and each other, in order), as
    Snakemake users expect: a file with just Table 1's seeds is a complete configuration."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("tables: {table1: {seeds: [3]}}\ntraining: {learning_rate: 0.001}\n")
    result = run_snakemake(tmp_path, "-n", "-p", "--cores", "1", "results/table1.csv", "--configfile", str(mine))
    assert result.returncode == 0, result.stderr
    from test_workflow import job_counts
    counts = job_counts(result.stdout)
    # 5 experiments at seed 3 (rule train); with 004's tables at seeds 1 and 2 the others' stack
    # jobs train seeds 1-2 (a block of their own: seed 3 is in the same block of training.stack
    # [3], so those that 004's tables show train 1-3 in one job)
    assert counts.get("train", 0) + sum(n for rule, n in counts.items() if rule.startswith("train_stack_")) == 5
    assert "results/models/en/seed3/checkpoint.pt" in result.stdout
    assert '"learning_rate":0.001' in result.stdout and '"batch_size":64' in result.stdout
    # over the paper configuration: its keys, then mine
    result = run_snakemake(tmp_path, "-n", "-p", "--cores", "1", "results/captions/m30k/test.parquet",
                           "--configfile", str(REPO / "config" / "paper.yaml"), str(mine))
    assert result.returncode == 0, result.stderr
    assert "download_multi30k" in result.stdout and "rule world" not in result.stdout


def test_a_key_given_twice_in_a_config_file_is_refused_naming_file_line_and_key(tmp_path):
    """YAML keeps the last of two equal keys silently: a site file with ``paper_data:`` twice
    lost the first block. Both the package's reader and the workflow refuse it."""
    from pseudopairs.workflow.config import read_config_file

    site = tmp_path / "site.yaml"
    site.write_text("paper_data:\n  flickr30k_images: /data/a\nresources:\n  gpu: 1\n"
                    "paper_data:\n  keep_archives: true\n")
    with pytest.raises(ConfigError, match=rf"{re.escape(str(site))}: a key given twice .*line 5: key "
                                          r"'paper_data' \(first on line 1\)"):
        read_config_file(site)
    nested = tmp_path / "nested.yaml"
    nested.write_text("training:\n  batch_size: 8\n  batch_size: 16\n")
    with pytest.raises(ConfigError, match=r"line 3: key 'batch_size' \(first on line 2\)"):
        load_config(nested)
    result = run_snakemake(tmp_path, "-n", "--cores", "1", "results/table1.csv", "--configfile", str(nested))
    assert result.returncode != 0
    assert f"{nested}: a key given twice in one mapping" in result.stdout + result.stderr
    # the shipped files have none
    for name in ("experiments.yaml", "config.yaml", "paper.yaml", "rehearsal.yaml"):
        read_config_file(REPO / "config" / name)


@pytest.mark.parametrize("value, hint", [("french", " (did you mean 'fr'?)"), ("Deutsch", " (did you mean 'de'?)"),
                                         ("fra", " (did you mean 'fr'?)"), ("en-US", " (did you mean 'en'?)"),
                                         ("xyz", "")])
def test_a_language_given_by_its_name_is_refused_suggesting_its_code(tmp_path, value, hint):
    site = tmp_path / "site.yaml"
    site.write_text(f"data: {{source: own}}\ncorpora:\n  photos: {{root: /data/photos, lang: {value}}}\n")
    with pytest.raises(ConfigError) as err:
        check_config(load_config(REPO / "config" / "config.yaml", REPO / "config" / "own-data.yaml", site))
    assert (f"config key 'corpora.photos.lang': must be a two-letter ISO 639-1 code such as fr, "
            f"got {value!r}{hint}") in str(err.value).splitlines()[1], str(err.value)


def test_a_language_column_value_that_is_a_name_is_refused_suggesting_its_code(tmp_path):
    from pseudopairs.data.generic import CorpusError, read_corpus

    (tmp_path / "a.png").write_bytes(b"")
    (tmp_path / "metadata.csv").write_text("file_name,text,lang\na.png,a dog,French\n", encoding="utf-8")
    with pytest.raises(CorpusError) as err:
        read_corpus("c", {"kind": "imagefolder", "root": "x", "lang_column": "lang"}, tmp_path)
    assert str(err.value) == (f"{tmp_path / 'metadata.csv'}:2: language 'French' (column 'lang') is not a "
                              "two-letter ISO 639-1 code such as fr (did you mean 'fr'?)")


def test_a_translation_run_shorter_than_its_warmup_is_refused_naming_both_keys():
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")
    config["translation"]["train"]["max_steps"] = 250
    with pytest.raises(ConfigError) as err:
        check_config(config)
    assert ("  config key 'translation.train.warmup_steps': must be below translation.train.max_steps (250): "
            "the learning rate rises for warmup_steps updates, so the run would stop before it reaches "
            "translation.train.lr; e.g. warmup_steps: 25 (got 300)") in str(err.value).splitlines()

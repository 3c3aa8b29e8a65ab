"""Workflow dry-runs: the DAG of both configurations resolves without any data present."""

from __future__ import annotations

import re

import pytest

from conftest import REPO, paper_dry_run, run_snakemake


def job_counts(output: str) -> dict[str, int]:
    counts = {}
    table = output.split("Job stats:")[-1]
    for line in table.splitlines():
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if m:
            counts[m.group(1)] = int(m.group(2))
    return counts


def model_counts(output: str) -> dict[str, int]:
    """Models trained and evaluated by a dry run's jobs, whatever the jobs: the checkpoints that
    rule train and the train_stack_* rules (one job per stack) write, and the metrics files
    of rule evaluate and the evaluate_stack_* rules."""
    wanted = {"train": "checkpoint.pt", "evaluate": "metrics.json"}
    found: dict[str, set] = {kind: set() for kind in wanted}
    for block in re.split(r"\n(?=[ ]*(?:local)?rule \w+:\n)", output):
        kind = re.match(r"[ ]*(?:local)?rule (train|evaluate)(?:_stack_\w+)?:\n", block)
        paths = re.search(r"^\s*output: (.*)$", block, re.M)
        if kind and paths:
            found[kind.group(1)].update(p for p in paths.group(1).split(", ") if p.endswith(wanted[kind.group(1)]))
    return {kind: len(paths) for kind, paths in found.items()}


def job_block(output: str, rule_prefix: str, path: str) -> str:
    """The dry-run block of the job of a rule named ``rule_prefix``… whose output holds ``path``."""
    blocks = re.split(r"\n(?=[ ]*(?:local)?rule \w+:\n)", output)
    (found,) = [b for b in blocks if re.search(rf"rule {rule_prefix}\w*:", b) and
                re.search(rf"output: .*{re.escape(path)}", b)]
    return found


def test_demo_data_targets_dry_run(tmp_path):
    result = run_snakemake(tmp_path, "-n", "--cores", "2", "results/captions/m30k/train.parquet",
                           "results/captions/coco/train.parquet",
                           "results/captions/m30k_task1/test.parquet")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    assert counts["world"] == 1
    assert counts["prepare_captions"] == 3
    assert "vocab" not in counts  # each training job builds its own vocabulary


def test_demo_tables_dry_run(tmp_path):
    result = run_snakemake(tmp_path, "-n", "--cores", "2", "results/table1.csv", "results/table2.csv",
                           "results/table3.csv", "results/table7.csv")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    # 9 experiments x the method check's 5 seeds, one job per stack (1-3, 4-5)
    assert model_counts(result.stdout) == {"train": 9 * 5, "evaluate": 45}
    # one job per experiment and stack: rules train_stack_seeds1_3 / _seeds4_5, the
    # experiment a wildcard
    assert "train" not in counts and counts["train_stack_seeds1_3"] == counts["train_stack_seeds4_5"] == 9
    assert counts["features"] == 4   # m30k train/val/test + coco train
    assert counts["pretrain_features"] == 1  # the demo's feature extractor, once for all
    assert counts["table"] == 4


def test_table4_dag_mines_with_the_source_model_of_each_seed(tmp_path):
    result = run_snakemake(tmp_path, "-n", "--cores", "2", "results/table4.csv")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    # De+COCO, 6 pseudopair rows, footnote 7's c2c row, the fine-tuning control, 12 hubness-aware
    # rows (6 criteria, retrained and fine-tuned), 3 reverse-direction rows: 24 experiments x 3 seeds
    assert model_counts(result.stdout) == {"train": 24 * 3, "evaluate": 24 * 3}
    # the paper's cosine set, 6 hubness-aware sets and the reverse set of the De+COCO model, per seed
    assert counts["mine"] == 8 * 3
    # cosine set at percentiles 0, 25, 75; hubness and reverse sets unfiltered; per seed
    assert counts["pseudopair_captions"] == 10 * 3
    # the job's own block (job_block also splits where Snakemake indents a job's header)
    mine = [job_block(result.stdout, "mine", "results/pseudopairs/de_coco/seed2/pairs.parquet")]
    assert len(mine) == 1 and "results/models/de_coco/seed2/checkpoint.pt" in mine[0]
    assert "results/models/de_coco/seed1" not in mine[0]


def test_table5_and_table6_dag_train_convert_and_translate_once(tmp_path):
    result = run_snakemake(tmp_path, "-n", "-p", "--cores", "2", "results/table5.csv", "results/table6.csv")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    # one MT model for every translated data set: trained on the world's parallel text, converted
    assert counts["world_parallel"] == 1 and counts["train_mt"] == 1 and counts["convert_mt"] == 1
    assert counts["translate"] == 1  # coco.de-mt
    # Table 5: baseline, 6 pseudopair rows, translation, the fine-tuning control = 9 (the hubness
    # fine-tunes are table5_criteria's); Table 6 adds de_coco, de_coco_mt, de_coco_mt_c2c; x 5 seeds
    assert model_counts(result.stdout)["train"] == (9 + 3) * 5
    blocks = re.split(r"\n(?=rule |localrule )", result.stdout)
    translate = next(b for b in blocks if "rule translate:" in b)
    assert "results/captions/coco/train.parquet" in translate
    assert "--source-lang en --target-lang de --dataset coco.de-mt" in translate
    assert "results/translations/coco.de-mt/train.parquet" in translate
    train_mt = next(b for b in blocks if "rule train_mt:" in b)
    assert "results/world/parallel/train.en" in train_mt and "results/world/parallel/val.de" in train_mt
    mt_c2c = job_block(result.stdout, "train", "results/models/de_coco_mt_c2c/seed1/checkpoint.pt")
    assert "results/translations/coco.de-mt/train.parquet" in mt_c2c


def test_paper_translation_downloads_and_converts_the_published_model(tmp_path):
    result = paper_dry_run(tmp_path, "results/translations/coco.de-mt/train.parquet")
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert counts["download_translation_model"] == 1 and counts["extract_translation_model"] == 1
    assert counts["convert_mt"] == 1 and counts["translate"] == 1 and "train_mt" not in counts
    assert "https://s3.amazonaws.com/opennmt-models/transformer-ende-wmt-pyOnmt.tar.gz" in result.stdout
    assert ("--checkpoint results/downloads/translation_model/extracted/averaged-10-epoch.pt "
            "--tokenizer results/downloads/translation_model/extracted/sentencepiece.model "
            "--quantization int8_float16") in result.stdout
    # fetched with the data on a login node
    fetch = paper_dry_run(tmp_path, "fetch")
    assert fetch.returncode == 0 and job_counts(fetch.stdout)["download_translation_model"] == 1


LESSONS = [f"results/table_lessons{k}.csv" for k in range(2, 8)] + ["results/figures/table_lessons_fig3.png"]


def test_paper_004_tables_dag(tmp_path):
    """Paper 004's Tables 2-7 and Figure 3 on the demo: 27 new experiments plus 4 of paper 000's
    (En, De, En+De, En+De+c2c) at the tables' two seeds; five selection data sets; the translation
    portion prepared for training and validation; French and Czech validated and tested on it."""
    result = run_snakemake(tmp_path, "-n", "-p", "--cores", "2", *LESSONS)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    # 004's tables' seeds are [1, 2]; En, De, En+De and En+De+c2c are also paper 000's models at
    # seeds 1-3, so their block (training.stack [3]) trains seed 3 with 1 and 2
    assert model_counts(result.stdout) == {"train": (27 + 4) * 2 + 4, "evaluate": (27 + 4) * 2 + 4}
    assert counts["select_captions"] == 5 and counts["table"] == 7 and counts["table_figure"] == 1
    assert counts["prepare_captions"] == 6          # m30k and m30k_task1: train, val, test
    assert counts["features"] == 3                  # the translation portion uses the m30k features
    assert "mine" not in counts and "translate" not in counts
    seed3 = set(re.findall(r"results/models/(\w+)/seed3/checkpoint\.pt", result.stdout))
    assert seed3 == {"en", "de", "en_de", "en_de_c2c"}   # the 004-only models: seeds [1, 2]
    blocks = re.split(r"\n(?=[ ]*(?:local)?rule \w+:\n)", result.stdout)

    def block(rule, wildcards):
        (found,) = [b for b in blocks if f"rule {rule}:" in b and wildcards in b]
        return found

    def model(rule, experiment):  # seeds 1-2 of an experiment: one stack job (training.stack [3])
        name = "checkpoint.pt" if rule == "train" else "metrics.json"
        return job_block(result.stdout, rule, f"results/models/{experiment}/seed1/{name}")

    t_fr = model("train", "t_fr")
    assert "results/captions/m30k_task1/train.parquet" in t_fr and "results/features/m30k/train.npz" in t_fr
    assert '"lang_captions":{"fr":"results/captions/m30k_task1/val.parquet"}' in t_fr
    assert '"similarity":"order"' in model("train", "de_oe")
    assert '"objective":"joint"' in model("train", "t_multi_joint")
    disjoint = model("train", "disjoint_en_de")
    assert "results/captions/selected/m30k.en-half0/train.parquet" in disjoint
    assert "results/captions/selected/m30k.de-half1/train.parquet" in disjoint
    assert '"portion_langs":["en","de","fr","cs"]' in model("evaluate", "t_multi")
    assert '"portion_langs":[]' in model("evaluate", "c1_en_de_c2c")   # Table 4, Fig. 3
    assert '"retrieval_key":"portion_retrieval"' in block("table", "table=table_lessons7")
    select = block("select_captions", "dataset=m30k.en-1cap")
    assert '--select \'{"captions_per_image":1,"seed":0}\'' in select


def test_paper_004_tables_dag_in_the_real_configuration(tmp_path):
    """config/paper.yaml: 004's tables average over ten seeds (as 004 does); French and Czech
    come from Multi30K task 1 (train, val, test 2016)."""
    flickr = tmp_path / "flickr30k"
    flickr.mkdir()
    site = tmp_path / "site.yaml"
    site.write_text(f"paper_data: {{flickr30k_images: {flickr}}}\n")
    result = run_snakemake(tmp_path, "-n", "-p", "--cores", "8", *LESSONS,
                           "--configfile", str(REPO / "config" / "paper.yaml"), str(site))
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert model_counts(result.stdout) == {"train": (27 + 4) * 10, "evaluate": (27 + 4) * 10}
    assert counts["read_multi30k_task1"] == 3 and counts["select_captions"] == 5
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("fr", "cs"):
            assert f"task1/raw/{split}.{lang}.gz" in result.stdout


def test_pseudopair_statistics_and_figure_dag(tmp_path):
    result = run_snakemake(tmp_path, "-n", "--cores", "2", "results/pseudopair_stats.csv",
                           "results/figures/pseudopair_examples.png")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    # 14 pseudopair sets (2 source models x 7 criteria), the reverse set and the 2 x 3 rounds'
    # sets, x 3 seeds; trained: the sources and the models of rounds 1 and 2 that mine rounds 2, 3
    assert counts["mine"] == (14 + 1 + 6) * 3
    assert model_counts(result.stdout) == {"train": (2 + 2 * 2) * 3, "evaluate": 0}
    assert counts["pseudopair_stats"] == 1 and counts["pseudopair_figure"] == 1


def test_paper_data_targets_dry_run_without_data(tmp_path):
    result = run_snakemake(tmp_path, "results/captions/m30k/train.parquet",
                           "results/captions/coco/train.parquet", "results/captions/m30k_task1/test.parquet",
                           "-n", "-p", "--cores", "8", "--configfile", str(REPO / "config" / "paper.yaml"))
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    # task2 train: 5 captions x 2 languages + image split; task1 test: 4 languages + image split
    assert counts["download_multi30k"] == 11 + 5
    assert counts["read_multi30k_task2"] == 1 and counts["read_multi30k_task1"] == 1
    assert counts["download_karpathy"] == 1 and counts["read_coco"] == 1
    assert "world" not in counts
    assert "raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a" in result.stdout


def test_paper_truecase_adds_truecaser_jobs(tmp_path):
    import yaml
    config = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    config["text"]["case"] = "truecase"
    path = tmp_path / "paper_truecase.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_snakemake(tmp_path, "results/captions/m30k/train.parquet", "-n", "--cores", "2",
                           "--configfile", str(path))
    assert result.returncode == 0, result.stderr
    assert job_counts(result.stdout)["train_truecaser"] == 4  # en, de, fr, cs (paper 004)


def test_paper_multi30k_from_local_mirror_dry_run(tmp_path, multi30k_root):
    """`paper_data.multi30k.base` may be a local mirror directory: the download jobs then copy
    its files, still verified against the recorded SHA-256."""
    import yaml
    from pseudopairs.data.download import multi30k_sha256

    config = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    config["paper_data"]["multi30k"]["base"] = str(multi30k_root)
    path = tmp_path / "paper_mirror.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_snakemake(tmp_path, "results/captions/raw/m30k/test.parquet", "-n", "-p",
                           "--cores", "2", "--configfile", str(path))
    assert result.returncode == 0, result.stderr
    assert job_counts(result.stdout)["download_multi30k"] == 11  # 5 x (en, de) + image list
    source = multi30k_root / "task2" / "raw" / "test_2016.3.de.gz"
    sha = multi30k_sha256("task2/raw/test_2016.3.de.gz")
    assert sha and f"--url {source} " in result.stdout and f"--sha256 {sha}" in result.stdout
    assert "raw.githubusercontent.com" not in result.stdout


def test_jobs_without_the_environment_fail_at_the_start_with_advice(tmp_path):
    """Run from a python that lacks the workflow's packages (an unactivated venv), the workflow
    stops before any job, saying what to activate."""
    import os
    import subprocess

    from conftest import snakemake_exe

    env = {**os.environ, "PATH": "/usr/bin:/bin"}   # the venv's python is not on PATH
    result = subprocess.run([snakemake_exe(), "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
                             "--cores", "1", "results/captions/m30k/val.parquet"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode != 0
    assert "Activate the workflow's environment before running snakemake" in result.stderr + result.stdout
    assert not (tmp_path / "results").exists()


# A dry run lists the jobs of a group job (train + evaluate of one model) indented below its
# "Group job NAME" line.
def _job_blocks(output: str) -> list[dict]:
    """(rule, threads, resources) of every job a dry run lists, also inside group jobs."""
    jobs = []
    for block in re.split(r"\n(?=[ ]*(?:local)?rule \w+:\n)", output):
        head = re.match(r"[ ]*(?:local)?rule (\w+):\n", block)
        if not head:
            continue
        resources = re.search(r"^\s+resources: (.*)$", block, re.M)
        threads = re.search(r"^\s+threads: (\d+)$", block, re.M)
        pairs = dict(item.split("=", 1) for item in resources.group(1).split(", ")) if resources else {}
        jobs.append({"rule": head.group(1), "threads": int(threads.group(1)) if threads else 1, **pairs})
    return jobs


def test_slurm_profile_dry_run_gives_every_job_its_resources(tmp_path):
    """With the SLURM profile (plugin installed, no SLURM needed for a dry run) every job carries
    the resources the rules declare from config/paper.yaml, and the profile adds only partitions.
    The GPU jobs ask what the shipped H100 calibration gives (config/calibration/h100.yaml; worked
    by hand in tests/test_cluster.py and tests/test_calibration.py)."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    flickr = tmp_path / "flickr30k"
    flickr.mkdir()
    site = tmp_path / "site.yaml"
    site.write_text(f"paper_data: {{flickr30k_images: {flickr}}}\n"
                    "resources: {slurm: {partition: {cpu: cpu, gpu: gpu}, account: nlp-a7}}\n")
    result = run_snakemake(tmp_path, "-n", "--profile", str(REPO / "profiles" / "slurm"), "--cores", "64",
                           "results/table4.csv", "results/translations/coco.de-mt/train.parquet",
                           "--configfile", str(REPO / "config" / "paper.yaml"), str(site))
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = _job_blocks(result.stdout)
    by_rule: dict[str, list[dict]] = {}
    for job in jobs:
        by_rule.setdefault(job["rule"], []).append(job)
    stacks = [job for job in jobs if job["rule"].startswith("train_stack_")]
    assert "train" not in by_rule and len(stacks) == 24   # 24 experiments x one block of seeds 1-3
    for job in stacks:      # 3 models: 563.5 s estimated x 1.5 -> 15 min; (3,254 + 3,000) MB x 1.5
        assert (job["gpu"], job["mem_mb"], job["runtime"], job["slurm_partition"], job["threads"]) == \
            ("1", "9500", "15", "gpu", 4)
    for job in by_rule["features"]:    # 8 decoding workers + 1 forward thread; 173 s x 1.5 -> the 5-min floor
        assert (job["gpu"], job["mem_mb"], job["runtime"], job["slurm_partition"], job["threads"]) == \
            ("1", "8500", "5", "gpu", 9)
    for job in by_rule["mine"]:
        assert (job["gpu"], job["slurm_partition"], job["threads"]) == ("1", "gpu", 4)
    for job in by_rule["download_multi30k"] + by_rule["prepare_captions"] + by_rule["table"]:
        assert "gpu" not in job and job["slurm_partition"] == "cpu" and job["slurm_account"] == "nlp-a7"
    assert by_rule["download_coco_images"][0]["runtime"] == "360"   # resources.runtime_cap
    (translate,) = by_rule["translate"]
    assert (translate["gpu"], translate["mem_mb"], translate["runtime"], translate["slurm_partition"],
            translate["threads"]) == ("1", "6000", "11", "gpu", 8)   # 404 s x 1.5; (1,000 + 3,000) MB x 1.5
    (convert,) = by_rule["convert_mt"]
    assert "gpu" not in convert and convert["slurm_partition"] == "cpu" and convert["mem_mb"] == "16000"


def test_downloads_and_light_steps_never_go_to_a_cluster(tmp_path):
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    flickr = tmp_path / "flickr30k"
    flickr.mkdir()
    site = tmp_path / "site.yaml"
    site.write_text(f"paper_data: {{flickr30k_images: {flickr}}}\n")
    with SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=[REPO / "config" / "paper.yaml", site]),
            snakefile=REPO / "Snakefile", workdir=tmp_path)
        local = set(workflow._workflow._localrules)
    assert {"download_multi30k", "download_karpathy", "download_coco_images", "fetch", "table",
            "tables_markdown", "training_curves", "pseudopair_captions", "pseudopair_stats",
            "pseudopair_figure", "download_translation_model", "download_fasttext",
            "parameters_figure"} <= local
    assert not {"train", "features", "evaluate", "mine", "translate", "convert_mt"} & local


@pytest.mark.parametrize("configfiles", [[], ["config/paper.yaml"], ["config/own-data.yaml"]])
def test_snakemake_lint_is_clean(tmp_path, configfiles):
    extra = ["--configfile", *[str(REPO / c) for c in configfiles]] if configfiles else []
    result = run_snakemake(tmp_path, "--lint", *extra)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr


def test_snakefmt_leaves_the_workflow_unchanged():
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("snakefmt")
    if not exe.exists() and not shutil.which("snakefmt"):
        pytest.skip("snakefmt is not installed (pip install -e '.[lint]')")
    result = subprocess.run([str(exe if exe.exists() else "snakefmt"), "--check", "Snakefile", "workflow"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_slurm_dry_run_lists_the_jobs_inside_group_jobs(tmp_path):
    """Every training and evaluation job of the plan is found, each inside its stack's group
    job: Table 1's 5 experiments, seeds 1-3 and 4-5 each one block (training.stack [3])."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    result = run_snakemake(tmp_path, "-n", "--profile", str(REPO / "profiles" / "slurm"), "--cores", "8",
                           "results/table1.csv")
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = _job_blocks(result.stdout)
    assert sum(j["rule"].startswith("train_stack_") for j in jobs) == 5 * 2
    assert sum(j["rule"].startswith("evaluate_stack_") for j in jobs) == 5 * 2
    assert model_counts(result.stdout) == {"train": 5 * 5, "evaluate": 5 * 5}
    assert result.stdout.count("Group job stack_") == 5 * 2

"""Running on a cluster: the rules declare every resource a job asks for -- memory and
walltime (x attempt), GPUs, and the SLURM placement from config `resources.slurm` -- so neither
the profile nor the command line has to repeat them; train + evaluate of a model are one group
job; `--config KEY=VALUE` values are typed; the software comes as pinned conda environments and
one container (Dockerfile / apptainer.def, `containerized:`)."""

from __future__ import annotations

import re
import tomllib
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_snakemake
from pseudopairs.workflow.config import ConfigError, check_config, coerce_config_strings, load_config, load_schema
from pseudopairs.workflow.dryrun import listed_jobs

PAPER = REPO / "config" / "paper.yaml"
SLURM_PROFILE = REPO / "profiles" / "slurm"


def by_rule(jobs: list[dict]) -> dict[str, list[dict]]:
    rules: dict[str, list[dict]] = {}
    for job in jobs:
        rules.setdefault(job["rule"], []).append(job)
    return rules


def training_jobs(jobs: list[dict]) -> list[dict]:
    """The jobs that train models: rule train (one model) and the train_stack_* rules (a seed
    block of an experiment each)."""
    return [job for job in jobs if job["rule"] == "train" or job["rule"].startswith("train_stack_")]


def evaluation_jobs(jobs: list[dict]) -> list[dict]:
    """The jobs that evaluate models: rule evaluate (one model), evaluate_stack_* (a stack's)."""
    return [job for job in jobs if job["rule"] == "evaluate" or job["rule"].startswith("evaluate_stack_")]


def stack_size(job: dict) -> int:
    """The seeds of a train_stack_* / evaluate_stack_* job, from its rule name (``_seeds<a>_<b>``)."""
    first, last = re.search(r"_seeds(\d+)_(\d+)$", job["rule"]).groups()
    return int(last) - int(first) + 1


def site_file(tmp_path: Path, extra: str = "") -> Path:
    """A site file over config/paper.yaml: the Flickr30K folder (checked when jobs need it)."""
    flickr = tmp_path / "flickr30k"
    flickr.mkdir(exist_ok=True)
    site = tmp_path / "site.yaml"
    site.write_text(f"paper_data: {{flickr30k_images: {flickr}}}\n{extra}")
    return site


# a site's placement over config/paper.yaml (which ships none: null = the cluster's default)
SITE_SLURM = "resources: {slurm: {partition: {cpu: cpu, gpu: gpu}, account: nlp-a7}}\n"


@pytest.fixture(scope="module")
def paper_slurm_dry_run(tmp_path_factory) -> str:
    """The whole paper workflow (rule all) planned with the SLURM profile and a site's partitions
    and account, plus a command-line --set-resources (which replaces a profile's set-resources as
    a whole)."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    tmp_path = tmp_path_factory.mktemp("paper_slurm")
    result = run_snakemake(tmp_path, "-n", "--profile", str(SLURM_PROFILE), "--cores", "64",
                           "--configfile", str(PAPER), str(site_file(tmp_path, SITE_SLURM)),
                           "--set-resources", "mine:mem_mb=24000")
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def paper_models() -> int:
    """Models (experiment x seed) of every table of config/paper.yaml, each at the seeds of the
    tables that show it (paper 004's tables: ten)."""
    from pseudopairs.data import experiments as ex

    config = check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml", PAPER))
    return sum(len(seeds) for seeds in ex.shown_models(config).values())


def test_partitions_come_from_the_config_and_survive_set_resources(paper_slurm_dry_run):
    """The site's resources.slurm places every job (GPU jobs in the GPU partition), and a
    --set-resources for one resource of one rule changes that resource only. Models train in
    stacks (config/paper.yaml training.stack [3, 7]): per stack of an experiment one
    training job and one evaluation job, asking the walltime and memory the shipped H100
    calibration gives a stack of that size (config/calibration/h100.yaml, by hand: a stack of 3
    trains 3 x 30,000 updates at 190.3 model-updates/s = 472.9 s + 3 x 60 validations x 0.17 s +
    60 s start = 563.5 s, x 1.5 = 14.1 -> 15 min; of 7, at 190.3 + 4/7 x (242.7 - 190.3) = 220.2
    model-updates/s: 1,084.9 s x 1.5 -> 28 min; evaluating 3 models 60 + 3 x 24 = 132 s x 1.5 ->
    3.3 min, raised to the floor of 5 but held to twice the estimate, 4.4 -> 4 min; 7 models 228 s
    x 1.5 -> 6 min; memory (3,254 + 3,000) x 1.5 -> 9,500 MB
    to train, (1,385 + 3,000) x 1.5 -> 7,000 MB to evaluate)."""
    jobs = listed_jobs(paper_slurm_dry_run)
    rules = by_rule(jobs)
    stacks, evaluations = training_jobs(jobs), evaluation_jobs(jobs)
    assert "train" not in rules and "evaluate" not in rules   # every model is in a block of 3 or 7
    assert sorted({stack_size(job) for job in stacks}) == [3, 7]
    assert sum(stack_size(job) for job in stacks) == sum(stack_size(job) for job in evaluations) \
        == paper_models() >= 45 * 3
    for job in stacks:
        assert (job["slurm_partition"], job["slurm_account"], job["gpu"], job["mem_mb"], job["runtime"],
                job["threads"]) == ("gpu", "nlp-a7", "1", "9500", {3: "15", 7: "28"}[stack_size(job)], 4)
    for job in evaluations:
        assert (job["mem_mb"], job["runtime"]) == ("7000", {3: "4", 7: "6"}[stack_size(job)])
    for rule in ("features", "mine", "translate"):
        for job in rules[rule] + evaluations:
            assert (job["slurm_partition"], job["slurm_account"], job["gpu"]) == ("gpu", "nlp-a7", "1"), job
    assert {job["mem_mb"] for job in rules["mine"]} == {"24000"}   # set for mine only
    for rule in ("download_multi30k", "prepare_captions", "read_coco", "convert_mt", "table"):
        for job in rules[rule]:
            assert "gpu" not in job and (job["slurm_partition"], job["slurm_account"]) == ("cpu", "nlp-a7")
    # optional placement keys are unset in config/paper.yaml, so they are not asked for at all
    assert not {"qos", "constraint", "gpu_model", "gres", "slurm_extra"} & {k for job in stacks for k in job}


def test_a_stack_and_its_evaluations_are_one_group_job(paper_slurm_dry_run):
    """Each evaluation runs in its training job's allocation: one group job per stack (an
    experiment's stack) holding its train job and its evaluate job (the
    models' evaluations one after the other), so SLURM gets one GPU job per stack and no
    evaluation queues for a GPU alone."""
    jobs = listed_jobs(paper_slurm_dry_run)
    groups: dict[str, list[dict]] = {}
    for job in jobs:
        if job["group"]:
            groups.setdefault(job["group"], []).append(job)
    stacks = training_jobs(jobs)
    assert len(groups) == len(stacks) < paper_models()
    for name, members in groups.items():
        rules = sorted(j["rule"] for j in members)
        assert len(rules) == 2 and rules[0].replace("evaluate_stack_", "train_stack_") == rules[1], name
        assert len({j["slurm_partition"] for j in members}) == 1
    assert all(job["group"] for job in stacks + evaluation_jobs(jobs))
    # what is submitted to a GPU: one group job per stack, the feature, mining and translation jobs
    gpu_submissions = len(groups) + sum(1 for job in jobs if job["rule"] in ("features", "mine", "translate"))
    mines = sum(1 for job in jobs if job["rule"] == "mine")
    assert mines >= 14 * 3   # the 14 pseudopair sets of Tables 4-5 x 3 seeds (+ any further sets)
    assert gpu_submissions == len(stacks) + 4 + mines + 1   # + 4 feature jobs + 1 translation


def test_site_placement_keys_reach_the_jobs(tmp_path):
    """A site file sets partitions per job kind and per rule, a GPU QOS, a node constraint, a GPU
    model and extra sbatch options; jobs grouped with train take train's placement."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    site = site_file(tmp_path, """
resources:
  slurm:
    partition: {cpu: short, gpu: gpu-a100, features: gpu-io, train: gpu-long}
    account: null
    qos: {gpu: gpu-normal}
    constraint: {gpu: "a100&nvlink"}
    gpu_model: a100
    extra: "--mail-type=FAIL"
""")
    result = run_snakemake(tmp_path, "-n", "--profile", str(SLURM_PROFILE), "--cores", "64",
                           "results/table1.csv", "--configfile", str(PAPER), str(site))
    assert result.returncode == 0, result.stderr[-3000:]
    rules = by_rule(listed_jobs(result.stdout))
    rules["train"] = training_jobs(listed_jobs(result.stdout))   # stacks take train's placement
    rules["evaluate"] = evaluation_jobs(listed_jobs(result.stdout))
    assert rules["train"] and rules["evaluate"]
    for rule, partition in (("train", "gpu-long"), ("evaluate", "gpu-long"), ("features", "gpu-io")):
        for job in rules[rule]:
            assert (job["slurm_partition"], job["qos"], job["constraint"], job["gpu_model"], job["gpu"],
                    job["slurm_extra"]) == (partition, "gpu-normal", "a100&nvlink", "a100", "1",
                                            "--mail-type=FAIL"), job
    for job in rules["prepare_captions"]:
        assert job["slurm_partition"] == "short" and job["slurm_extra"] == "--mail-type=FAIL"
        assert not {"qos", "constraint", "gpu_model", "gres", "gpu"} & set(job)
    assert not any("slurm_account" in job for job in listed_jobs(result.stdout))


def test_gres_asks_for_the_gpus_instead_of_gpus(tmp_path):
    """Sites that want --gres=gpu[:type]:N instead of --gpus=N set resources.slurm.gres: GPU jobs
    then carry gres (with resources.gpu as the count) and no gpu / gpu_model; CPU jobs neither."""
    site = site_file(tmp_path, "resources: {gpu: 2, slurm: {gres: {gpu: 'gpu:a100'}, gpu_model: v100}}\n")
    with parsed_workflow(tmp_path, [PAPER, site]) as workflow:
        rules = {rule.name: rule for rule in workflow.rules}
        for name in ("train", "evaluate", "features", "mine", "translate"):
            declared = rules[name].resources
            assert declared["gres"] == "gpu:a100:2", name
            assert "gpu" not in declared and "gpu_model" not in declared, name
        assert not {"gres", "gpu", "gpu_model"} & set(rules["convert_mt"].resources)


def test_the_slurm_profile_declares_no_resources():
    """Anything the profile put under set-resources/default-resources would be dropped by the same
    option on the command line: the rules declare all of it instead."""
    profile = yaml.safe_load((SLURM_PROFILE / "config.v8+.yaml").read_text())
    assert profile["executor"] == "slurm" and profile["retries"] >= 1
    assert not {"set-resources", "default-resources", "resources"} & set(profile)


@contextmanager
def parsed_workflow(tmp_path, configfiles):
    """The parsed workflow (Snakemake's API), for its rules."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(resource_settings=ResourceSettings(cores=64),
                                config_settings=ConfigSettings(configfiles=configfiles),
                                snakefile=REPO / "Snakefile", workdir=tmp_path)
        yield workflow._workflow


def test_memory_grows_with_each_attempt_and_walltime_up_to_the_sites_cap(tmp_path):
    """A job retried after running out of memory or time (profile: retries) asks for its memory
    times the attempt number, and its walltime times the attempt number up to
    resources.runtime_cap (config/paper.yaml: 360 min), which train and evaluate -- one group
    job -- share in proportion to their own times."""
    from snakemake.iocontainers import InputFiles, Wildcards

    uncalibrated = site_file(tmp_path, "resources: {calibration: null}\n")  # resources.runtime / mem_mb
    with parsed_workflow(tmp_path, [PAPER, uncalibrated]) as workflow:
        rules = {rule.name: rule for rule in workflow.rules}
        model = Wildcards(fromdict={"experiment": "de", "seed": "1"})
        block = Wildcards(fromdict={"experiment": "de"})
        asked, stacked = {}, {}
        for attempt in (1, 2, 3, 4):
            train = rules["train"].expand_resources(model, InputFiles(), attempt)
            evaluate = rules["evaluate"].expand_resources(model, InputFiles(), attempt)
            assert (train["mem_mb"], train["gpu"], evaluate["mem_mb"]) == (32000 * attempt, 1, 16000 * attempt)
            asked[attempt] = (train["runtime"], evaluate["runtime"])
            train = rules["train_stack_seeds4_10"].expand_resources(block, InputFiles(), attempt)
            evaluate = rules["evaluate_stack_seeds4_10"].expand_resources(block, InputFiles(), attempt)
            assert (train["mem_mb"], train["gpu"], evaluate["mem_mb"]) == (32000 * attempt, 1, 16000 * attempt)
            stacked[attempt] = (train["runtime"], evaluate["runtime"])
            table = rules["table"].expand_resources(Wildcards(fromdict={"table": "table1"}), InputFiles(), attempt)
            assert (table["mem_mb"], table["runtime"]) == (4000 * attempt, min(60 * attempt, 360))
        # one model alone (a seed outside the config's blocks): 25 + 8 minutes x attempt, under the cap
        assert asked == {1: (25, 8), 2: (50, 16), 3: (75, 24), 4: (100, 32)}
        # a stack of 7 (seeds 4-10): 7 x (25 + 8) = 231 first; the retry (462) capped at 360 in
        # all: 360 x 25/33 and 360 x 8/33, rounded down
        assert stacked == {1: (175, 56), 2: (272, 87), 3: (272, 87), 4: (272, 87)}
    site = site_file(tmp_path, "resources: {runtime_cap: null, calibration: null}\n")
    with parsed_workflow(tmp_path, [PAPER, site]) as workflow:   # null: no cap, x attempt
        rules = {rule.name: rule for rule in workflow.rules}
        assert rules["train"].expand_resources(model, InputFiles(), 5)["runtime"] == 125
        assert rules["train_stack_seeds4_10"].expand_resources(block, InputFiles(), 5)["runtime"] == 875


def test_a_stack_group_job_asks_its_calibrated_minutes_first(paper_slurm_dry_run):
    """Every training group job of the paper plan (rule all) asks SLURM for its stack's
    calibrated training plus evaluation on its first attempt: 15 + 4 minutes for a stack of 3 (5, the minimum, before
    evaluations were held to twice their estimate),
    28 + 6 for a stack of 7 (it asked 99 and 231, S x (25 + 8), before the calibration; 1,470 per
    model before that)."""
    groups: dict[str, int] = {}
    for job in listed_jobs(paper_slurm_dry_run):
        if job["group"]:
            groups[job["group"]] = groups.get(job["group"], 0) + int(job["runtime"])
    assert set(groups.values()) == {19, 34}


def test_a_stack_group_job_asks_slurm_for_training_then_evaluation(tmp_path):
    """The group job of one stack (seeds 1-3 of an experiment), with Snakemake's own group
    arithmetic (jobs one after the other: walltimes add up, memory/GPUs/cores are the larger),
    turned into an sbatch call by the SLURM plugin: one GPU, train's memory, both walltimes --
    doubled on the retry, then capped at resources.runtime_cap (here a site's 200 min)."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    from types import SimpleNamespace

    from snakemake.iocontainers import InputFiles, ResourceList, Wildcards
    from snakemake.resources import GroupResources
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    site = site_file(tmp_path, "resources: {runtime_cap: 200, calibration: null, slurm: {partition: {gpu: gpu}}}\n")
    with parsed_workflow(tmp_path, [PAPER, site]) as workflow:
        rules = {rule.name: rule for rule in workflow.rules}
        block = Wildcards(fromdict={"experiment": "de"})
        # 3 x (25 + 8) = 99 first; 198 on the retry; 297 capped at 200: 151 + 48 (rounded down)
        for attempt, minutes in ((1, 99), (2, 198), (3, 151 + 48)):
            layers = [[SimpleNamespace(resources=rules[name].expand_resources(block, InputFiles(), attempt),
                                       pipe_group=None)] for name in ("train_stack_seeds1_3",
                                                                      "evaluate_stack_seeds1_3")]
            group = GroupResources.basic_layered(toposorted_jobs=layers, constraints=workflow.global_resources,
                                                 run_local=False, additive_resources=["runtime"],
                                                 sortby=["runtime"])
            assert (group["slurm_partition"], group["gpu"], group["mem_mb"], group["runtime"], group["_cores"]) == \
                ("gpu", 1, 32000 * attempt, minutes, 4)
            job = SimpleNamespace(resources=ResourceList(fromdict=group), threads=group["_cores"])
            call = get_submit_command(job, {"run_uuid": "u", "slurm_logfile": "log", "comment_str": "c",
                                            "account": "", "partition": "-p gpu", "workdir": "w"})
            call += set_gres_string(job)
            assert f" -t {minutes} --mem {32000 * attempt} " in call
            assert "--cpus-per-task=4" in call and call.endswith(" --gpus=1")


def test_every_rule_asks_for_memory_walltime_and_placement(tmp_path):
    """Each rule gets its resources from job_resources(), so a rule added later is placed like
    the others (here: with a site's partitions, every rule of the paper workflow has one)."""
    with parsed_workflow(tmp_path, [PAPER, site_file(tmp_path, SITE_SLURM)]) as workflow:
        for rule in workflow.rules:
            if rule.norun:  # target rules (all, default, fetch) run nothing
                continue
            assert {"mem_mb", "runtime", "slurm_partition", "slurm_account"} <= set(rule.resources), rule.name


def test_the_shipped_paper_config_sends_no_site_values(tmp_path):
    """config/paper.yaml ships no partition or account (null: the cluster's defaults), so
    nothing made up reaches sbatch; a site file sets them."""
    with parsed_workflow(tmp_path, [PAPER, site_file(tmp_path)]) as workflow:
        for rule in workflow.rules:
            placed = {"slurm_partition", "slurm_account", "qos", "constraint", "slurm_extra"} & set(rule.resources)
            assert not placed, (rule.name, placed)


@pytest.mark.parametrize("slurm, key", [
    ("{account: myaccount}", "resources.slurm.account"),
    ("{account: YOUR_ACCOUNT}", "resources.slurm.account"),
    ("{partition: {cpu: short, gpu: '<gpu partition>'}}", "resources.slurm.partition.gpu"),
    ("{qos: CHANGEME}", "resources.slurm.qos"),
    ("{constraint: xxx}", "resources.slurm.constraint"),
    ("{extra: '--mail-user=<you@example.org>'}", "resources.slurm.extra"),
])
def test_a_placeholder_site_value_is_refused_naming_its_key(slurm, key):
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml", PAPER)
    config["resources"]["slurm"].update(yaml.safe_load(slurm))
    with pytest.raises(ConfigError, match=rf"config key '{re.escape(key)}': .* looks like a placeholder"):
        check_config(config)


def test_real_site_values_and_null_pass_the_check():
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml", PAPER)
    config["resources"]["slurm"].update({"account": "nlp-a7", "partition": {"cpu": "cpu", "gpu": "gpu"},
                                         "qos": None, "constraint": "a100|h100", "extra": "--mail-type=FAIL"})
    check_config(config)


def test_snakemake_refuses_a_placeholder_before_any_job(tmp_path):
    result = run_snakemake(tmp_path, "-n", "--configfile", str(PAPER),
                           str(site_file(tmp_path, "resources: {slurm: {account: your_account}}\n")))
    assert result.returncode != 0
    assert "config key 'resources.slurm.account': 'your_account' looks like a placeholder" in result.stdout + result.stderr


def test_a_placeholder_on_the_command_line_is_refused_like_one_in_a_site_file(tmp_path):
    """The documented command line's example account (and a placeholder partition for one rule)
    stop the plan before any job, as they would in a site file; a real value passes."""
    result = run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", str(PAPER), str(site_file(tmp_path)),
                           "--default-resources", "slurm_account=proj123",
                           "--set-resources", "features:slurm_partition=CHANGEME", "--", "results/table1.csv")
    assert result.returncode != 0
    text = " ".join((result.stdout + result.stderr).split())
    assert ("--default-resources slurm_account='proj123': looks like a placeholder, not your cluster's value; "
            "give the real one (or leave it out: the cluster's default); --set-resources "
            "features:slurm_partition='CHANGEME': looks like a placeholder") in text, text[-2000:]
    fine = run_snakemake(tmp_path, "-n", "--cores", "1", "--configfile", str(PAPER), str(site_file(tmp_path)),
                         "--default-resources", "slurm_account=nlp-a7", "--", "results/table1.csv")
    assert fine.returncode == 0, fine.stderr[-2000:]


# --------------------------------------------------------------------------------------------
# --config KEY=VALUE


def test_config_on_the_command_line_is_typed_by_the_schema():
    """Snakemake reads `--config seeds=[1]` as ['1']: strings where the schema wants numbers,
    booleans, null or lists are parsed; strings that do not parse to such a value stay, so the
    check still names them."""
    config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml")
    config["seeds"] = ["1", "3"]
    config["training"].update(max_updates="10", c2c_warmup="null", learning_rate="1e-3")
    config["features"]["skip_unreadable"] = "true"
    config["resources"]["mem_mb"]["train"] = "5000"
    config["world"]["images"]["m30k"]["train"] = "100"
    config["text"]["case"] = "truecase"
    config["tables"]["table2"]["seeds"] = ["1", "2"]     # oneOf: a list of seeds, or a list's name
    config["seed_lists"]["check"] = ["4"]
    coerce_config_strings(config, load_schema())
    assert config["seeds"] == [1, 3]
    assert config["tables"]["table2"]["seeds"] == [1, 2] and config["tables"]["table1"]["seeds"] == "check"
    assert config["seed_lists"]["check"] == [4]
    assert (config["training"]["max_updates"], config["training"]["c2c_warmup"],
            config["training"]["learning_rate"]) == (10, None, 1e-3)
    assert config["features"]["skip_unreadable"] is True and config["resources"]["mem_mb"]["train"] == 5000
    assert config["world"]["images"]["m30k"]["train"] == 100
    assert config["text"]["case"] == "truecase" and config["training"]["device"] == "auto"
    check_config(config)
    config["training"]["batch_size"] = "big"
    config["seeds"] = ["1.5"]
    with pytest.raises(ConfigError) as err:
        check_config(config)
    assert "config key 'training.batch_size': 'big' is not of type 'integer'" in str(err.value)
    assert "config key 'seeds.0': '1.5' is not of type 'integer'" in str(err.value)


def test_snakemake_config_seeds_on_the_command_line(tmp_path):
    """config/README.md promises `--config KEY=VALUE`: a list, a nested mapping and a nested number
    work. With seeds [1] for paper 000's tables (their seed list `check`; paper 004's tables at
    seeds 1 and 2), Table 1's experiments that only 000's tables show train seed 1 alone (rule
    train); those 004's tables show too train seeds 1 and 2 in one stack job (training.stack [3]:
    one block)."""
    result = run_snakemake(tmp_path, "-n", "-p", "--cores", "2", "results/table1.csv",
                           "--config", "seeds=[1]", "seed_lists={check: [1]}", "training={max_updates: 10}")
    assert result.returncode == 0, result.stderr[-3000:]
    from test_workflow import job_counts

    counts = job_counts(result.stdout)
    stacks = {rule: n for rule, n in counts.items() if rule.startswith("train_stack_")}
    assert list(stacks) == ["train_stack_seeds1_2"] and counts["train"] + sum(stacks.values()) == 5
    assert counts["evaluate"] == 5 - sum(stacks.values())   # rule evaluate: seed 1 of each model alone
    assert "results/models/en/seed1/checkpoint.pt" in result.stdout
    assert "seed3" not in result.stdout and '"max_updates":10' in result.stdout


# --------------------------------------------------------------------------------------------
# Software: pinned environments and the container


def pyproject_pins() -> dict[str, str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return {p.split("==")[0].lower(): p.split("==")[1] for p in pyproject["project"]["dependencies"]}


def pip_pins(text: str) -> dict[str, str]:
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r"(?<![\w.-])([A-Za-z][\w.-]*)==([\w.+-]+)", text)}


def test_conda_environments_pin_every_package_exactly():
    """envs/*.yaml pin every conda and pip package to one version, so a lock file (conda-lock)
    can be made from them; the pip pins are pyproject.toml's."""
    pins = pyproject_pins()
    for path in sorted((REPO / "envs").glob("*.yaml")):
        env = yaml.safe_load(path.read_text())
        for dep in env["dependencies"]:
            if isinstance(dep, dict):
                for requirement in dep["pip"]:
                    if requirement == "-e ../":   # envs/pseudopairs.yaml installs the clone itself
                        continue
                    name, _, version = requirement.partition("==")
                    assert version and pins.get(name.lower(), version) == version, (path.name, requirement)
            else:
                assert re.fullmatch(r"[\w.-]+=\d+(\.\d+)+", dep), (path.name, dep)


def _deffile(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """Header and sections of an Apptainer definition file, split as Apptainer's parser does
    (pkg/build/types/parser/deffile.go): a section starts at a line whose first word starts with
    %, the header is what comes before the first one, comments start with #."""
    sections: dict[str, str] = {}
    header_lines: list[str] = []
    current = None
    for line in text.splitlines():
        words = line.split()
        if words and words[0].startswith("%"):
            current = words[0][1:].lower()
            assert current not in sections, f"section %{current} twice"
            sections[current] = ""
        elif current is None:
            header_lines.append(line)
        else:
            sections[current] += line + "\n"
    header = {}
    for line in header_lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.split("#")[0].partition(":")
        assert sep, f"header line without a value: {line!r}"
        header[key.strip().lower()] = value.strip()
    return header, sections


def test_apptainer_definition_parses_and_installs_the_pinned_environment():
    header, sections = _deffile((REPO / "apptainer.def").read_text())
    assert header == {"bootstrap": "docker", "from": "python:3.11.7-slim-bookworm"}
    valid = {"help", "setup", "files", "labels", "environment", "pre", "post", "runscript", "test",
             "startscript", "arguments"}
    assert set(sections) <= valid and {"post", "environment", "labels", "test", "help"} <= set(sections)
    installed = pip_pins(sections["post"])
    translation = pip_pins((REPO / "envs" / "translation.yaml").read_text())
    # every job runs in the image: the fasttext rule's gensim (extra smalr) and convert_mt_named's
    # transformers (extra translation) are in it too
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    needed = {p.split("==")[0].lower(): p.split("==")[1] for p in extras["smalr"] + extras["translation"]}
    assert installed == {**pyproject_pins(), **needed, "nvidia-cublas-cu12": translation["nvidia-cublas-cu12"]}
    assert installed["torch"] == "2.14.1" and installed["torchvision"] == "0.29.1"


def test_dockerfile_installs_the_same_environment():
    text = (REPO / "Dockerfile").read_text()
    instructions = []
    for line in re.sub(r"\\\n", " ", text).splitlines():   # join continued lines
        if line.strip() and not line.lstrip().startswith("#"):
            instructions.append(line.split(None, 1))
    known = {"FROM", "RUN", "ENV", "LABEL", "CMD", "COPY", "ARG", "WORKDIR", "ENTRYPOINT", "USER"}
    assert all(word.upper() in known for word, *_ in instructions), instructions
    assert instructions[0] == ["FROM", "python:3.11.7-slim-bookworm"]
    run = " ".join(rest[0] for word, *rest in instructions if word == "RUN")
    _, deffile = _deffile((REPO / "apptainer.def").read_text())
    assert pip_pins(run) == pip_pins(deffile["post"])


def test_every_rule_runs_in_the_workflow_container_with_sdm_apptainer(tmp_path):
    """`containerized:` names the image apptainer.def builds in the clone; --sdm apptainer then
    runs every job in it (a run without --sdm apptainer ignores it)."""
    with parsed_workflow(tmp_path, []) as workflow:
        image = str(REPO / "pseudopairs.sif")
        for rule in workflow.rules:
            if not rule.norun:
                assert (rule.container_img, rule.is_containerized) == (image, True), rule.name
    assert "apptainer build pseudopairs.sif apptainer.def" in (REPO / "profiles" / "README.md").read_text()


def test_sdm_apptainer_runs_each_job_in_the_workflow_image(tmp_path):
    """A real run with --sdm apptainer (against a stand-in `apptainer` on PATH that records its
    arguments and runs the command on the host): the job's command, with the workflow's
    PYTHONPATH prefix, is run through `apptainer exec ... <clone>/pseudopairs.sif bash -c ...`."""
    import os
    import stat
    import subprocess
    import sys

    from conftest import snakemake_exe

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apptainer.log"
    stub = bin_dir / "apptainer"
    stub.write_text(f"""#!/bin/bash
if [ "$1" = "--version" ]; then echo "apptainer version 1.3.4"; exit 0; fi
printf '%s\\n' "$*" >> {str(log)!r}
while [ $# -gt 0 ] && [[ "$1" != *.sif ]]; do shift; done
shift
exec "$@"
""")
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    work = tmp_path / "work"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run([snakemake_exe(), "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "1",
                             "results/world/parallel/val.de", "--sdm", "apptainer"],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (work / "results" / "world" / "parallel" / "val.de").stat().st_size > 0
    (call,) = log.read_text().splitlines()
    assert call.startswith("exec --home ") and f" {REPO / 'pseudopairs.sif'} bash -c " in call
    assert f"export PYTHONPATH={REPO / 'src'}" in call and "python -m pseudopairs world-parallel" in call


def test_walltime_caps_a_rule_alone_and_shares_the_cap_within_a_group():
    from pseudopairs.workflow.cluster import walltime

    runtimes = {"default": 60, "train": 120, "evaluate": 20, "features": 240}
    assert [walltime(runtimes, "features", a, cap=300) for a in (1, 2, 3)] == [240, 300, 300]
    assert [walltime(runtimes, "mine", a, cap=None) for a in (1, 2, 3)] == [60, 120, 180]
    grouped = [(walltime(runtimes, "train", a, cap=300, grouped_with=["evaluate"]),
                walltime(runtimes, "evaluate", a, cap=300, grouped_with=["train"])) for a in (1, 2, 3)]
    assert grouped == [(120, 20), (240, 40), (257, 42)] and sum(grouped[2]) <= 300
    with pytest.raises(ValueError, match="attempt must be a whole number >= 1, got 0"):
        walltime(runtimes, "train", 0, cap=300)


def _documented_site_files() -> list[tuple[str, dict]]:
    """Every example site file the docs show (a YAML block with ``resources: slurm:``)."""
    found = []
    for doc in ("profiles/README.md", "docs/cluster.md"):
        text = (REPO / doc).read_text(encoding="utf-8")
        for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
            data = yaml.safe_load(textwrap.dedent(block))
            if isinstance(data, dict) and "slurm" in (data.get("resources") or {}):
                found.append((doc, data))
    return found


def test_the_docs_example_site_values_are_refused_as_placeholders():
    """A site file copied from the docs as it is (account proj123, mail to me@example.org) is
    refused, naming each example key, instead of reaching sbatch as if it were the site's."""
    documented = _documented_site_files()
    assert {doc for doc, _ in documented} == {"profiles/README.md", "docs/cluster.md"}
    for doc, site in documented:
        config = load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml", PAPER)
        config["resources"]["slurm"].update(site["resources"]["slurm"])
        with pytest.raises(ConfigError) as err:
            check_config(config)
        examples = {key for key, value in site["resources"]["slurm"].items()
                    if isinstance(value, str) and ("proj123" in value or "@example.org" in value)}
        assert examples, doc
        for key in examples:
            assert f"config key 'resources.slurm.{key}'" in str(err.value), (doc, key)
def test_calibrated_gpu_jobs_grow_with_attempts_and_mine_by_criterion(tmp_path):
    """With the shipped calibration (config/paper.yaml: config/calibration/h100.yaml) a stack of 7
    asks 28 + 6 minutes and 9,500 / 7,000 MB, both x the attempt number (the walltime up to the
    site's cap); a mine job asks for its own set's criterion: sinkhorn 7 min (60 + 60 + 7.97 x
    17.5 = 259.5 s x 1.5), cosine 4 (128 s = 2.1 min: the floor of 5 held to twice the estimate)."""
    from snakemake.iocontainers import InputFiles, Wildcards

    with parsed_workflow(tmp_path, [PAPER, site_file(tmp_path)]) as workflow:
        rules = {rule.name: rule for rule in workflow.rules}
        block = Wildcards(fromdict={"experiment": "de"})
        asked = {}
        for attempt in (1, 2, 3):
            train = rules["train_stack_seeds4_10"].expand_resources(block, InputFiles(), attempt)
            evaluate = rules["evaluate_stack_seeds4_10"].expand_resources(block, InputFiles(), attempt)
            assert (train["mem_mb"], evaluate["mem_mb"]) == (9500 * attempt, 7000 * attempt)
            asked[attempt] = (train["runtime"], evaluate["runtime"])
        assert asked == {1: (28, 6), 2: (56, 12), 3: (84, 18)}
        mine = {name: rules["mine"].expand_resources(Wildcards(fromdict={"pseudopairs": name, "seed": "1"}),
                                                     InputFiles(), 1)["runtime"]
                for name in ("de_coco.sinkhorn", "de_coco")}
        assert mine == {"de_coco.sinkhorn": 7, "de_coco": 4}


def test_the_paper_plan_asks_at_most_twice_its_estimated_gpu_hours(paper_slurm_dry_run):
    """The dry run of rule all on config/paper.yaml asks SLURM for GPU-hours (first-attempt
    walltime x GPUs, summed over the GPU jobs) within 2x the estimate from the same measured
    rates, and not less than it (it asked 437 GPU-hours for ~30 before the calibration). Also for
    a site whose GPUs are H200s that keeps the shipped H100 file: the same requests against the
    H200's smaller estimate."""
    from pseudopairs.workflow import calibration as cal

    config = check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml", PAPER))
    jobs = cal.dry_run_jobs(paper_slurm_dry_run)
    plan = cal.plan_gpu_hours(jobs, cal.Calibration.read(REPO / "config" / "calibration" / "h100.yaml"), config)
    assert plan["jobs"] == len([job for job in jobs if job.gpus])
    assert set(plan["by_kind"]) == {"train", "evaluate", "features", "mine", "translate"}
    assert 1.0 <= plan["ratio"] <= 2.0, plan
    assert plan["requested"] < 100
    for kind, hours in plan["by_kind"].items():
        assert hours["requested"] >= hours["estimated"], kind
    on_h200 = cal.plan_gpu_hours(jobs, cal.Calibration.read(REPO / "config" / "calibration" / "h200.yaml"), config)
    assert on_h200["requested"] == plan["requested"] and on_h200["ratio"] <= 2.0, on_h200


def test_resources_override_gives_a_job_kind_memory_and_time_over_the_calibration(tmp_path):
    """The documented way to give training (every stack's generated rule) and the features jobs
    more memory or time: ``resources.override`` in a site file, over the calibration (which
    decides their resources in config/paper.yaml: stacks of 3 ask 15 minutes, of 7 28)."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    site = site_file(tmp_path, "resources: {override: {mem_mb: {train: 64000, features: 50000}, "
                               "runtime: {train: 120}}}\n")
    result = run_snakemake(tmp_path, "-n", "--profile", str(SLURM_PROFILE), "--cores", "64",
                           "results/table1.csv", "--configfile", str(PAPER), str(site))
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = listed_jobs(result.stdout)
    train, evaluate = training_jobs(jobs), evaluation_jobs(jobs)
    assert train and {(job["mem_mb"], job["runtime"]) for job in train} == {("64000", "120")}
    features = by_rule(jobs)["features"]
    assert features and {job["mem_mb"] for job in features} == {"50000"}
    assert {int(job["runtime"]) for job in features} != {120}
    assert evaluate and all(job["mem_mb"] != "64000" and int(job["runtime"]) < 120 for job in evaluate)


def test_a_cpu_device_asks_no_gpu_and_cpu_walltimes(tmp_path):
    """``device: cpu`` for the features and the training: their jobs ask no GPU, go to the CPU
    partition and ask config/paper.yaml's ``resources.runtime`` / ``mem_mb`` (per model for a
    stack) rather than the calibration's GPU minutes."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    site = site_file(tmp_path, SITE_SLURM + "features: {device: cpu}\ntraining: {device: cpu}\n")
    result = run_snakemake(tmp_path, "-n", "--profile", str(SLURM_PROFILE), "--cores", "64",
                           "results/table1.csv", "--configfile", str(PAPER), str(site))
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = listed_jobs(result.stdout)
    features, train, evaluate = by_rule(jobs)["features"], training_jobs(jobs), evaluation_jobs(jobs)
    assert features and train and evaluate
    for job in features + train + evaluate:
        assert "gpu" not in job and job["slurm_partition"] == "cpu", job
    assert {(job["mem_mb"], job["runtime"]) for job in features} == {("32000", "240")}
    # 25 minutes per model (paper.yaml's runtime.train), 32000 MB, for stacks of 3 and 7
    assert {(stack_size(job), job["mem_mb"], job["runtime"]) for job in train} <= {
        (3, "32000", "75"), (7, "32000", "175")}
    assert {(stack_size(job), job["runtime"]) for job in evaluate} <= {(3, "24"), (7, "56")}


def test_a_gpu_index_a_job_does_not_have_is_refused_naming_its_key():
    from pseudopairs.workflow.cluster import device_errors

    config = {"resources": {"gpu": 1}, "features": {"device": "cuda:1"}, "training": {"device": "cuda:0"},
              "mining": {"device": "cuda"}, "translation": {"translate": {"device": "cpu"}}}
    assert device_errors(config) == [
        "config key 'features.device': 'cuda:1' names GPU 1, but each job asks the scheduler for "
        "resources.gpu = 1 GPU(s) and sees them as cuda:0 … cuda:0; use 'cuda' (or 'cuda:0'), or set "
        "resources.gpu: 0 to pick a device yourself on a machine of your own"]
    assert device_errors({**config, "resources": {"gpu": 0}}) == []


def test_an_experiment_trained_on_the_cpu_asks_no_gpu_for_its_stacks(tmp_path):
    """One experiment's own ``training.device: cpu``: its stacks train in rules of their own
    (``train_stack_cpu_seeds…``) that ask no GPU, the CPU partition and paper.yaml's per-model
    runtime (3 x 25 min), while the other experiments' stacks stay GPU jobs."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    site = site_file(tmp_path, SITE_SLURM + "experiments: {en: {training: {device: cpu}}}\n")
    result = run_snakemake(tmp_path, "-n", "--profile", str(SLURM_PROFILE), "--cores", "64",
                           "results/table1.csv", "--configfile", str(PAPER), str(site))
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = listed_jobs(result.stdout)
    mine = [job for job in training_jobs(jobs) + evaluation_jobs(jobs) if job["wildcards"].get("experiment") == "en"]
    others = [job for job in training_jobs(jobs) if job["wildcards"].get("experiment") != "en"]
    assert mine and others
    for job in mine:
        assert "_stack_cpu_seeds" in job["rule"] and "gpu" not in job and job["slurm_partition"] == "cpu", job
    assert {job["runtime"] for job in mine if job["rule"].startswith("train_")} == {"75"}
    for job in others:
        assert "_cpu_" not in job["rule"] and job["gpu"] == "1" and job["slurm_partition"] == "gpu", job

# Shared names and input functions. Rules stay thin: inputs, outputs, params, one CLI call; a
# rule's inputs and spec come from its stage's contract (pseudopairs.<stage>.contract), bridged
# from the job's wildcards by from_wildcards.
import json
import re
from pathlib import Path

from pseudopairs import cluster, environment, layout
from pseudopairs import rounds as chains_of_rounds
from pseudopairs import stacks
from pseudopairs.data import contract as data_contract
from pseudopairs.data import text_contract
from pseudopairs.evaluation import contract as evaluation_contract
from pseudopairs.evaluation.job import EvaluationJob
from pseudopairs.features import contract as features_contract
from pseudopairs.mining import contract as mining_contract
from pseudopairs.mining.job import MiningJob
from pseudopairs.model import contract as model_contract
from pseudopairs.model import smalr_contract
from pseudopairs.report import contract as report_contract
from pseudopairs.report import pages
from pseudopairs.report import targets as report_targets
from pseudopairs.smalr import clc_contract
from pseudopairs.translation import contract as translation_contract

WORLD = config["data"]["source"] == "world"
FMT = config["features"]["format"]
SPLITS = list(data_contract.SPLITS)
MODELS = stacks.model_seeds(config)  # experiment -> the seeds the outputs need (pseudopairs.stacks)
# for `snakemake --report`: the paths that exist (a report after a partial run); else all
present = report_targets.presence(workflow)


wildcard_constraints:
    corpus="[A-Za-z0-9_]+",
    split="train|val|test",
    experiment="[A-Za-z0-9][A-Za-z0-9_-]*",
    seed="[0-9]+",
    lang="[a-z]{2}",
    table="table[A-Za-z0-9_]*",
    pseudopairs="[A-Za-z0-9][A-Za-z0-9_.-]*",
    percentile="[0-9]+(\\.[0-9]+)?",


PAPER = config.get("paper_data", {})  # real data only (data.source: paper)
DOWNLOADS = f"{layout.RESULTS}/downloads"


def as_json(value, *, sort_keys=True):
    """A config section or a typed job (pseudopairs.jobs) as a compact JSON string (a rule param,
    so a change reruns the rule). ``sort_keys=False`` keeps the YAML order where it carries
    meaning."""
    value = value.to_dict() if hasattr(value, "to_dict") else value
    return json.dumps(value, sort_keys=sort_keys, separators=(",", ":"))


def from_wildcards(function, *names, key=None, then=None, to_json=False, sort_keys=True):
    """A rule's input function or param: ``function(config, *values)`` of the job's wildcards
    ``names`` (``seed`` as an int), its ``key`` if given, ``then(result)`` if given (a job's
    ``inputs``), as a JSON string with ``to_json`` -- the one bridge from a job's wildcards to the
    stages' contracts (pseudopairs.<stage>.contract), pseudopairs.rounds and
    pseudopairs.stacks, so no function here only forwards to them."""

    def call(wildcards):
        values = [int(wildcards[n]) if n == "seed" else wildcards[n] for n in names]
        result = function(config, *values)
        result = result if key is None else result[key]
        result = result if then is None else then(result)
        return as_json(result, sort_keys=sort_keys) if to_json else result

    return call


# What each rule asks a scheduler for (memory, walltime, GPUs, SLURM placement; calibrated from
# measured GPU rates with resources.calibration): job_resources(rule, gpu=...) in every rule,
# stack_resources(step, models) in the stack rules (pseudopairs.cluster).
job_resources, stack_resources = cluster.rule_resources(config)


def one_of(names):
    """A wildcard constraint matching exactly ``names`` (none: a pattern that matches nothing)."""
    return "|".join(re.escape(name) for name in names) if names else "$^"


# ----------------------------------------------------------------------------------------------
# Real data (data.source: paper)


def multi30k_files(task, split):
    """Upstream files (relative to the Multi30K data root) behind one canonical split."""
    m30k = PAPER["multi30k"]
    if task == "task2":
        upstream = m30k["task2_splits"][split]
        files = [
            f"task2/raw/{upstream}.{n}.{lang}.gz" for n in range(1, 6) for lang in ("en", "de")
        ]
        return files + [f"task2/image_splits/{upstream}_images.txt"]
    upstream = m30k["task1_splits"][split]
    files = [f"task1/raw/{upstream}.{lang}.gz" for lang in m30k["task1_langs"]]
    return files + [f"task1/image_splits/{upstream}.txt"]


def multi30k_downloads(task, split):
    return [f"{DOWNLOADS}/multi30k/{f}" for f in multi30k_files(task, split)]


def multi30k_url(wildcards):
    return f"{PAPER['multi30k']['base'].rstrip('/')}/{wildcards.path}"


def multi30k_sha256(relpath):
    from pseudopairs.data.download import (
        multi30k_sha256 as recorded,
    )  # tqdm: imported only when needed

    return recorded(relpath)


def sha256_arg(value):
    """``--sha256 VALUE`` as a list (quoted item by item in the shell), or nothing."""
    return ["--sha256", value] if value else []


def coco_image_dirs():
    return [f"{DOWNLOADS}/coco/images/{part}" for part in PAPER["coco"]["images"]]


def archive(path):
    """A downloaded archive is removed once everything extracted from it exists (temp), unless
    paper_data.keep_archives is true."""
    return path if PAPER.get("keep_archives", False) else temp(path)


def flickr30k_images():
    """The Flickr30K image folder (distributed on request), checked when a job needs it, so a
    placeholder path fails at the start of the run instead of inside a GPU job."""
    path = Path(PAPER["flickr30k_images"])
    if not path.is_dir():
        raise ValueError(
            f"config key 'paper_data.flickr30k_images': {path} is not a directory. Set it to the "
            "folder of Flickr30K images ({image_id}.jpg; distributed on request, see "
            "docs/cluster.md)."
        )
    return str(path)


def feature_weights_input(wildcards):
    """The features job's weights input (pseudopairs.features.contract.weights_inputs); a weights
    file it needs that is missing stops the DAG here, dry run included, naming the file."""
    problem = features_contract.missing_weights(config, wildcards.corpus, wildcards.split)
    if problem:
        raise WorkflowError(problem)
    return features_contract.weights_inputs(config)


# Corpora whose images live in a folder the user keeps outside the workflow (real data): their
# features depend on a manifest of the files each split needs, not on the folder, so a file
# added to the folder reruns nothing (pseudopairs.data.manifest).
MANIFEST_CORPORA = () if WORLD else ("m30k",)


def feature_image_inputs(wildcards):
    """The image list, plus (real data) the downloaded COCO image folders it points into, or the
    manifest of the Flickr30K images it names."""
    inputs = {"images": layout.images(wildcards.corpus, wildcards.split)}
    if not WORLD and wildcards.corpus == "coco":
        inputs["folders"] = coco_image_dirs()
    elif wildcards.corpus in MANIFEST_CORPORA:
        flickr30k_images()  # a wrong path fails here, naming the config key
        inputs["manifest"] = layout.image_manifest(wildcards.corpus, wildcards.split)
    return inputs


def refresh_image_manifests():
    """Bring each existing manifest up to date with its image files, before the DAG is built:
    rewritten only when a needed image changed (then the features that read it are older and
    rerun), untouched otherwise. Main process only (not in each cluster job's own parse)."""
    from pseudopairs.data.manifest import refresh_manifest

    if not MANIFEST_CORPORA or not workflow.is_main_process:
        return
    if not Path(PAPER.get("flickr30k_images") or "").is_dir():
        return  # the features jobs' input function names the config key
    for corpus in MANIFEST_CORPORA:
        for split in SPLITS:
            refresh_manifest(layout.images(corpus, split), layout.image_manifest(corpus, split))


refresh_image_manifests()


# ----------------------------------------------------------------------------------------------
# At the start of a run (onstart): before any job is submitted


def check_job_environment():
    """The features jobs' weights exist (the torch hub cache is read, never downloaded: GPU nodes
    are often offline; pseudopairs.features.contract), and the jobs' python has the workflow's
    packages (pseudopairs.environment): one line each instead of every job failing."""
    features = [job for job in workflow.dag.needrun_jobs() if job.rule.name == "features"]
    problem = features_contract.needrun_weights_problem(config, len(features))
    problem = problem or environment.python_problem(workflow.deployment_settings.deployment_method)
    if problem:
        raise WorkflowError(problem)

# Shared names and input functions. Rules stay thin: inputs, outputs, params, one CLI call; a
# rule's inputs and spec come from its stage's contract (pseudopairs.<stage>.contract), bridged
# from the job's wildcards by from_wildcards.
import json
import re
import sys
from pathlib import Path

from pseudopairs.core import layout
from pseudopairs.workflow import cluster, environment, stacks
from pseudopairs.workflow import rounds as chains_of_rounds
from pseudopairs.data import contract as data_contract
from pseudopairs.data import corpora
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
from pseudopairs.search import contract as search_contract
from pseudopairs.smalr import clc_contract
from pseudopairs.translation import contract as translation_contract

WORLD = config["data"]["source"] == "world"
PAPER_SOURCE = config["data"]["source"] == "paper"
WORLD_CORPORA = corpora.WORLD_CORPORA  # corpus -> has images
world_export = corpora.WORLD_EXPORTS
FMT = config["features"]["format"]
SPLITS = list(data_contract.SPLITS)
# experiment -> the seeds the outputs need (pseudopairs.workflow.stacks)
MODELS = stacks.model_seeds(config)
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
# download attempts of every download rule: paper_data.retries (its schema default without paper data)
DOWNLOAD_RETRIES = PAPER.get("retries", 3)
DOWNLOADS = layout.downloads()


def as_json(value, *, sort_keys=True):
    """A config section or a typed job (pseudopairs.core.jobs) as a compact JSON string (a rule param,
    so a change reruns the rule). ``sort_keys=False`` keeps the YAML order where it carries
    meaning."""
    value = value.to_dict() if hasattr(value, "to_dict") else value
    return json.dumps(value, sort_keys=sort_keys, separators=(",", ":"))


def from_wildcards(function, *names, key=None, then=None, to_json=False, sort_keys=True):
    """A rule's input function or param: ``function(config, *values)`` of the job's wildcards
    ``names`` (``seed`` as an int), its ``key`` if given, ``then(result)`` if given (a job's
    ``inputs``), as a JSON string with ``to_json`` -- the one bridge from a job's wildcards to the
    stages' contracts (pseudopairs.<stage>.contract), pseudopairs.workflow.rounds and
    pseudopairs.workflow.stacks, so no function here only forwards to them."""

    def call(wildcards):
        values = [int(wildcards[n]) if n == "seed" else wildcards[n] for n in names]
        result = function(config, *values)
        result = result if key is None else result[key]
        result = result if then is None else then(result)
        return as_json(result, sort_keys=sort_keys) if to_json else result

    return call


# What each rule asks a scheduler for (memory, walltime, GPUs, SLURM placement; calibrated from
# measured GPU rates with resources.calibration): job_resources(rule, gpu=...) in every rule,
# stack_resources(step, models) in the stack rules (pseudopairs.workflow.cluster).
job_resources, stack_resources = cluster.rule_resources(config)


def _raw_resources(resources):
    """name -> the value as written, of Snakemake's parsed --default-resources / --set-resources."""
    items = (resources or {}).items()
    return {name: getattr(resource, "raw", resource) for name, resource in items}


# a placeholder SLURM value given on the command line or in a profile is refused like one in a
# site file (cluster.placeholder_errors), before any job is submitted
_overrides = workflow.resource_settings._parsed_overwrite_resources.items()
_placeholders = cluster.option_placeholder_errors(
    _raw_resources(workflow.resource_settings._parsed_default_resources),
    dict((rule, _raw_resources(values)) for rule, values in _overrides),
)
if _placeholders:
    raise WorkflowError("; ".join(_placeholders))


def one_of(names):
    """A wildcard constraint matching exactly ``names`` (none: a pattern that matches nothing)."""
    return "|".join(re.escape(name) for name in names) if names else "$^"


# ----------------------------------------------------------------------------------------------
# Corpora (config `corpora`; pseudopairs.data.corpora): the paper's downloads, the folders users
# keep outside the workflow (keyed by content: pseudopairs.data.manifest)


def sha256_arg(value):
    """``--sha256 VALUE`` as a list (quoted item by item in the shell), or nothing."""
    return ["--sha256", value] if value else []


def multi30k_sha256(relpath):
    from pseudopairs.data.download import multi30k_sha256 as recorded  # tqdm: only when needed

    return recorded(relpath)


def archive(path):
    """A downloaded archive is removed once everything extracted from it exists (temp), unless
    paper_data.keep_archives is true."""
    return path if PAPER.get("keep_archives", False) else temp(path)


def feature_weights_input(wildcards):
    """The features job's weights input (pseudopairs.features.contract.weights_inputs); a weights
    file it needs that is missing stops the DAG here, dry run included, naming the file: one line,
    once, on the console (SystemExit: Snakemake wraps any Exception raised by an input function
    in an InputFunctionException traceback that repeats it)."""
    problem = features_contract.missing_weights(config, wildcards.corpus, wildcards.split)
    if problem:
        raise SystemExit(problem)
    return features_contract.weights_inputs(config)


# Each existing manifest brought up to date with its files before the DAG is built (main
# process only, not in each cluster job's own parse), and a declared corpus' image lists with
# its source (rewritten only where their content changes: an edited caption reruns no features)
if workflow.is_main_process:
    from pseudopairs.data.generic import refresh_image_lists

    corpora.refresh_manifests(config, after_source=refresh_image_lists)
    translation_contract.refresh_model_manifests(config)


# ----------------------------------------------------------------------------------------------
# When a run fails (onerror): each failed job's one error line on the console, not only in its log


def report_failed_jobs():
    from pseudopairs.cli import failed_job_lines

    scheduler = getattr(workflow, "scheduler", None)
    jobs = []
    for job in getattr(scheduler, "failed", ()):
        for member in job.jobs if job.is_group() else [job]:
            wildcards = ", ".join(f"{k}={v}" for k, v in member.wildcards_dict.items())
            jobs.append((member.rule.name, wildcards, [str(f) for f in member.log]))
    for line in failed_job_lines(jobs):
        print(line, file=sys.stderr)


# ----------------------------------------------------------------------------------------------
# At the start of a run (onstart): before any job is submitted


def check_job_environment():
    """The features jobs' weights exist (the torch hub cache is read, never downloaded: GPU nodes
    are often offline; pseudopairs.features.contract), and the jobs' python has the workflow's
    packages (pseudopairs.workflow.environment): one line each instead of every job failing."""
    features = [job for job in workflow.dag.needrun_jobs() if job.rule.name == "features"]
    problem = features_contract.needrun_weights_problem(config, len(features))
    problem = problem or environment.python_problem(workflow.deployment_settings.deployment_method)
    if problem:
        raise WorkflowError(problem)


# ----------------------------------------------------------------------------------------------
# The search stage (rules/search.smk; docs/search.md)


def search_configfile_args(configfiles):
    """``--configfile FILE …`` for the export job: the run's configuration, as given (the export
    layers the shipped config/ files itself, as the Snakefile does)."""
    shipped = {(REPO / "config" / name).resolve() for name in ("config.yaml", "experiments.yaml")}
    files = [str(Path(f).resolve()) for f in configfiles if Path(f).resolve() not in shipped]
    return ["--configfile", *files] if files else []

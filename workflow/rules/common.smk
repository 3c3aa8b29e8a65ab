# Shared names and input functions. Rules stay thin: inputs, outputs, params, one CLI call; a
# rule's inputs and spec come from its stage's contract (pseudopairs.<stage>.contract), bridged
# from the job's wildcards by from_wildcards.
import inspect
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from pseudopairs import layout
from pseudopairs import rounds as chains_of_rounds
from pseudopairs import seed_blocks as blocks
from pseudopairs.data import contract as data_contract
from pseudopairs.data import corpora
from pseudopairs.data import text_contract
from pseudopairs.evaluation import contract as evaluation_contract
from pseudopairs.features import contract as features_contract
from pseudopairs.mining import contract as mining_contract
from pseudopairs.model import contract as model_contract
from pseudopairs.report import contract as report_contract
from pseudopairs.report import effects as report_effects
from pseudopairs.report import pages
from pseudopairs.smalr import clc_contract
from pseudopairs.smalr import specs as smalr_specs
from pseudopairs.translation import contract as translation_contract

WORLD = config["data"]["source"] == "world"
PAPER_SOURCE = config["data"]["source"] == "paper"
WORLD_CORPORA = corpora.WORLD_CORPORA  # corpus -> has images
world_export = corpora.WORLD_EXPORTS
FMT = config["features"]["format"]
RESOURCES = config["resources"]
GPU = RESOURCES["gpu"]
SPLITS = list(data_contract.SPLITS)
MODELS = blocks.model_seeds(config)  # experiment -> the seeds the outputs need (stack blocks)


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
DOWNLOADS = layout.downloads()


def as_json(value, *, sort_keys=True):
    """A config section as a compact JSON string (a rule param, so a change reruns the rule).
    ``sort_keys=False`` keeps the YAML order where it carries meaning."""
    return json.dumps(value, sort_keys=sort_keys, separators=(",", ":"))


def from_wildcards(function, *names, key=None, to_json=False, sort_keys=True):
    """A rule's input function or param: ``function(config, *values)`` of the job's wildcards
    ``names`` (``seed`` as an int), its ``key`` if given, as a JSON string with ``to_json`` -- the
    one bridge from a job's wildcards to the stages' contracts (pseudopairs.<stage>.contract),
    pseudopairs.rounds and pseudopairs.seed_blocks, so no function here only forwards to them."""

    def call(wildcards):
        values = [int(wildcards[n]) if n == "seed" else wildcards[n] for n in names]
        result = function(config, *values)
        result = result if key is None else result[key]
        return as_json(result, sort_keys=sort_keys) if to_json else result

    return call


def mem_mb(rule):
    """Memory of one job of ``rule`` in MB (config ``resources.mem_mb``, else its ``default``),
    multiplied by the attempt number, so a job killed for memory and retried (``--retries``, set
    in the SLURM profile) asks for more."""
    megabytes = RESOURCES["mem_mb"].get(rule, RESOURCES["mem_mb"]["default"])
    return lambda wildcards, attempt: megabytes * attempt


def runtime(rule, *, grouped_with=(), models=1):
    """Walltime of one job of ``rule`` in minutes (config ``resources.runtime``, else its
    ``default``; × ``models``, the models of a stack job), multiplied by the attempt number, so a
    job killed at its time limit and retried (``--retries``, set in the SLURM profile) asks for
    more -- but never more than ``resources.runtime_cap``, shared with the rules ``grouped_with``
    it in one group job (pseudopairs.cluster.walltime)."""
    from pseudopairs.cluster import walltime

    cap = RESOURCES.get("runtime_cap")
    options = {"cap": cap, "grouped_with": grouped_with, "models": models}
    return lambda wildcards, attempt: walltime(RESOURCES["runtime"], rule, attempt, **options)


# config resources.slurm key -> the resource snakemake-executor-plugin-slurm turns into sbatch
# options (profiles/README.md)
SLURM_RESOURCES = {
    "partition": "slurm_partition",  # -p
    "account": "slurm_account",  # -A
    "qos": "qos",  # --qos
    "constraint": "constraint",  # -C
    "gpu_model": "gpu_model",  # GPU jobs: --gpus=<model>:N
    "gres": "gres",  # GPU jobs: --gres=<value>:N instead of --gpus=N
    "extra": "slurm_extra",  # further sbatch options, verbatim
}
GPU_ONLY = ("gpu_model", "gres")


def placement(rule, *, gpu):
    """Where a job of ``rule`` goes on a SLURM cluster, from config ``resources.slurm``: each key
    is one value for every job, or a mapping of ``cpu`` (CPU jobs), ``gpu`` (jobs that ask for a
    GPU) and rule names (that rule's jobs, before either); null or absent = not set (the site's
    default). A local run ignores these resources."""
    placed = {}
    for key, resource in SLURM_RESOURCES.items():
        value = RESOURCES.get("slurm", {}).get(key)
        if isinstance(value, dict):
            value = value.get(rule, value.get("gpu" if gpu else "cpu"))
        if value is not None and (gpu or key not in GPU_ONLY):
            placed[resource] = value
    return placed


def job_resources(rule, *, gpu=False, placed_with=None, grouped_with=(), models=1):
    """Everything one job of ``rule`` asks a scheduler for, from the config's ``resources``
    section: ``resources: **job_resources("my_rule")`` in every rule (``gpu=True`` for a rule
    whose step can use a GPU).

    - ``mem_mb`` and ``runtime`` (minutes), per rule or the ``default``, × the attempt number;
      the runtime at most ``resources.runtime_cap``, which the rules ``grouped_with`` this one
      (the other rules of its group job, whose walltimes Snakemake adds up) share; × ``models``
      for the jobs of a stack of that many models;
    - ``gpu``: ``resources.gpu`` GPUs when ``gpu`` and that is above 0 (else none); where
      ``resources.slurm.gres`` is set, ``gres=<gres>:<resources.gpu>`` instead (sites that want
      ``--gres`` rather than ``--gpus``);
    - the SLURM placement of :func:`placement` (partition, account, qos, constraint, GPU model,
      extra sbatch options) of a CPU or GPU job -- looked up under the rule ``placed_with`` where
      given: a rule whose jobs share a group job with that rule's (evaluate with train) must ask
      for the same partition.

    The rules declare these, so a profile or the command line only adds to them:
    ``--set-resources train:mem_mb=64000`` changes train's memory and nothing else."""
    gpus = RESOURCES["gpu"] if gpu else 0
    walltime = runtime(rule, grouped_with=grouped_with, models=models)
    resources = {"mem_mb": mem_mb(rule), "runtime": walltime}
    placed = placement(placed_with or rule, gpu=gpus > 0)
    if gpus and "gres" in placed:
        placed["gres"] = f"{placed['gres']}:{gpus}"
        placed.pop("gpu_model", None)  # the GRES names the GPU type
    elif gpus:
        resources["gpu"] = gpus
    return {**resources, **placed}


def all_tables():
    return [layout.table(name) for name in config["tables"]]


def one_of(names):
    """A wildcard constraint matching exactly ``names`` (none: a pattern that matches nothing)."""
    return "|".join(re.escape(name) for name in names) if names else "$^"


def table_figures():
    """The tables drawn as bars too (`figure: true`; rule all and the results page)."""
    return [
        layout.table_figure(name) for name, spec in config["tables"].items() if spec.get("figure")
    ]


def parameters_figures():
    """Each table's `parameters_figure` (paper 002's Figure 3) and its points (rule all)."""
    return [
        layout.parameters_figure(name, ext)
        for name in report_contract.parameters_figures(config)
        for ext in ("png", "csv")
    ]


def parameters_figure_pattern():
    names = report_contract.parameters_figures(config)
    return one_of(names)


def pseudopair_outputs():
    """§7.2 statistics and Figure 1, when the config declares pseudopair sets."""
    outputs = []
    if mining_contract.pseudopair_sets(config):
        outputs += [
            layout.pseudopair_stats(),
            layout.caption_use_plot(),
            layout.similarity_histogram(),
        ]
    if config.get("pseudopair_stats", {}).get("figure"):
        outputs += [layout.pseudopair_figure("png"), layout.pseudopair_figure("html")]
    return outputs


# ----------------------------------------------------------------------------------------------
# Input functions and params of the steps. All inputs are computed here, and each step reads
# exactly the files it is given (the spec a param holds lists the same files the input function
# gives Snakemake).


def stack_rules():
    """The rules of the train-stack jobs as (name, experiment, seeds), one per seed block of two
    or more seeds (config training.stack; pseudopairs.seed_blocks). Their rules have no
    wildcards, so Snakemake prefers them to rule train for those models."""
    named = {}
    for name, seeds in blocks.stacks(config, MODELS):
        rule_name = f"train_stack_{re.sub('[^A-Za-z0-9_]', '_', name)}_seeds{seeds[0]}_{seeds[-1]}"
        if rule_name in named:
            raise ValueError(
                f"experiments {named[rule_name][0]!r} and {name!r} give one rule name {rule_name}"
            )
        named[rule_name] = (name, seeds)
    return [(rule_name, name, seeds) for rule_name, (name, seeds) in named.items()]


def stack_label(name, seeds):
    return f"{name}.seeds{seeds[0]}-{seeds[-1]}"


def stack_outputs(name, seeds):
    return [
        path
        for seed in seeds
        for path in (
            layout.checkpoint(name, seed),
            layout.model_vocabulary(name, seed),
            layout.train_log(name, seed),
        )
    ]


def stack_metrics(name, seeds):
    return [layout.metrics(name, seed) for seed in seeds]


def stack_resources(step, n_models):
    """The resources of a stack's ``step`` (train or evaluate) for ``n_models`` models: its
    walltime × the models (for training an upper bound: on a GPU a stack of S runs faster than S
    jobs; docs/benchmarks.md), its memory as one model's (the models share the loaded data; the
    evaluations run one after the other)."""
    other = {"train": "evaluate", "evaluate": "train"}[step]
    placed = {"placed_with": "train", "grouped_with": (other,), "models": n_models}
    return job_resources(step, gpu=True, **placed)


def pseudopair_stats_outputs():
    """The §7.2 statistics table, when the config declares pseudopair sets (for tables.md)."""
    return [layout.pseudopair_stats()] if mining_contract.pseudopair_sets(config) else []


# Iterated bootstrapping (config `rounds:`, pseudopairs.rounds; rule rounds_summary in rounds.smk)


def rounds_outputs():
    """Each chain's summary CSV and figure (rule all)."""
    return [
        path
        for chain in chains_of_rounds.chains(config)
        for path in (layout.rounds_summary(chain), layout.rounds_figure(chain))
    ]


def rounds_chain_pattern():
    names = chains_of_rounds.chains(config)
    return one_of(names)


def training_runs_outputs():
    """How every table's training runs ended (written by rule method_check with its CSV)."""
    return [layout.training_runs()] if method_check_outputs() else []


def method_check_outputs():
    """The method check, when the config declares effects (for tables.md and rule all)."""
    return [layout.method_check()] if config.get("method_check", {}).get("effects") else []


def selection_dataset_pattern():
    names = data_contract.selection_datasets(config)
    return one_of(names)


# Text preparation (pseudopairs.data.text_contract: languages, tokenizers, truecasers)


def truecase_inputs(wildcards):
    """prepare_captions' model files: truecasers and trained tokenizers of every language."""
    return text_contract.prepare_inputs(config)


def truecase_args(wildcards, input):
    """prepare-captions' options naming them, as a list (each item quoted in the shell)."""
    return text_contract.prepare_args(config)


def text_preparation_key(wildcards):
    """The case, plus each tokenizer other than Moses (a param: a change reruns the jobs)."""
    return text_contract.preparation_key(config)


def sentencepiece_lang_pattern():
    return one_of(text_contract.sentencepiece_langs(config))


# ----------------------------------------------------------------------------------------------
# Translation

# (logic: pseudopairs.translation.contract: the default model translation.model and the named
# ones of translation.models; the rules call it directly)


def translated_dataset_pattern():
    return one_of(translation_contract.translation_datasets(config))


def named_model_pattern(*, downloaded=False):
    """The names of translation.models (those fetched from a url: ``downloaded``)."""
    if downloaded:
        return one_of(translation_contract.downloaded_models(config))
    return one_of(translation_contract.named_models(config))


def truecaser_of(lang):
    """The model files of ``lang``'s text preparation (a translation job's input)."""
    return text_contract.model_inputs(config, lang)


def truecaser_args(lang):
    """``translate-captions``' options naming them (and a tokenizer other than Moses)."""
    return text_contract.model_args(config, lang)


def translation_truecase_inputs(wildcards):
    return truecaser_of(data_contract.dataset(config, wildcards.dataset)["lang"])


def translation_truecase_args(wildcards, input):
    return truecaser_args(data_contract.dataset(config, wildcards.dataset)["lang"])


def clc_direction_pattern(*, trained):
    """The CLC translation directions (paper 002 §3.4): those trained here (``trained``) or all."""
    return one_of(
        clc_contract.trained_directions(config)
        if trained
        else list(clc_contract.directions(config))
    )


def clc_truecase_inputs(wildcards):
    return truecaser_of(clc_contract.direction(config, wildcards.direction)[1])


def clc_truecase_args(wildcards, input):
    return truecaser_args(clc_contract.direction(config, wildcards.direction)[1])


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
    file it needs that is missing stops the DAG here, dry run included, naming the file."""
    problem = features_contract.missing_weights(config, wildcards.corpus, wildcards.split)
    if problem:
        raise WorkflowError(problem)
    return features_contract.weights_inputs(config)


# Each existing manifest brought up to date with its files before the DAG is built (main
# process only, not in each cluster job's own parse)
if workflow.is_main_process:
    corpora.refresh_manifests(config)


# ----------------------------------------------------------------------------------------------
# Software


JOB_MODULES = (
    "torch",
    "torchvision",
    "pandas",
    "pyarrow",
    "sacremoses",
    "ctranslate2",
    "matplotlib",
)


def check_feature_weights():
    """Before any features job is submitted: its weights file exists (the torch hub cache is read,
    never downloaded: GPU nodes are often offline), else one line naming it
    (pseudopairs.features.contract.needrun_weights_problem)."""
    if workflow.dag is None:
        return
    jobs = [job for job in workflow.dag.needrun_jobs() if job.rule.name == "features"]
    problem = features_contract.needrun_weights_problem(config, len(jobs))
    if problem:
        raise WorkflowError(problem)


def check_job_environment():
    """Jobs run ``python -m pseudopairs``. Unless each rule gets its own conda environment
    (--sdm conda) or runs in the workflow's container (--sdm apptainer), the ``python`` on PATH
    must have the workflow's packages: say so at the start instead of failing every job. The
    features' ImageNet weights are checked first (check_feature_weights)."""
    check_feature_weights()
    if any(
        getattr(m, "name", str(m)).lower() in ("conda", "apptainer")
        for m in workflow.deployment_settings.deployment_method
    ):
        return
    python = shutil.which("python")
    probe = (
        "import importlib.util, sys; "
        f"missing = [m for m in {JOB_MODULES!r} if importlib.util.find_spec(m) is None]; "
        "print(' '.join(missing)); sys.exit(1 if missing else 0)"
    )
    result = (
        subprocess.run([python or "python", "-c", probe], capture_output=True, text=True)
        if python
        else None
    )
    if result is None or result.returncode != 0:
        missing = result.stdout.strip() if result is not None else "python itself"
        raise WorkflowError(
            f"the jobs' python ({python or 'not on PATH'}) lacks {missing}. Activate the workflow's "
            "environment before running snakemake (`. .venv/bin/activate` after the install in "
            "README.md, or `conda activate pseudopairs`), or let Snakemake build one per rule "
            "with --sdm conda, or run every job in the workflow's container with --sdm apptainer "
            "(profiles/README.md)."
        )


# ----------------------------------------------------------------------------------------------
# Report
# The HTML pages `snakemake --report` shows (pseudopairs.report.html, paths in
# pseudopairs.report.pages): every table with its effect chart (each row's difference from its
# source row, ours beside the paper's; pseudopairs.report.effects) and its numbers; the method
# check and the §7.2 statistics when the config declares them; all of it on one page.
# A further CSV with paper_* columns is one more `--csv TITLE PATH` of report_results_args.


def building_report():
    """Whether Snakemake is building the DAG for `snakemake --report` (Workflow.create_report
    is on the call stack): the report shows what exists, while a run plans everything."""
    create_report = getattr(type(workflow), "create_report", None)
    code = getattr(create_report, "__code__", None)
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def present(paths):
    """``paths`` as they are, or for `snakemake --report` those that exist: a report after a
    partial run (`snakemake results/table5.csv`) shows what is there instead of failing on every
    result a complete run would add (Snakemake refuses a report() output that does not exist)."""
    paths = list(paths)
    return [path for path in paths if Path(path).exists()] if building_report() else paths


def all_targets(*groups):
    """Rule all's inputs (an input function): every output of ``groups`` (lists of paths), or for
    `snakemake --report` those that exist (:func:`present`)."""
    return lambda wildcards: present(path for group in groups for path in group)


def report_pages():
    """Every HTML page of the report (rule all)."""
    outputs = [pages.page(name) for name in config["tables"]]
    if method_check_outputs():
        outputs.append(pages.page(pages.METHOD_CHECK))
    if pseudopair_stats_outputs():
        outputs.append(pages.page(pages.PSEUDOPAIR_STATS))
    return outputs + [pages.page(pages.RESULTS)]


def report_note():
    """The line under each page's title: where this run's numbers come from."""
    seeds = config["seeds"]
    runs = f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
    if WORLD:
        return (
            f"Demo world (synthetic data), {runs}: the numbers show the machinery and how the "
            "methods compare inside one small world; they are not comparable to the paper's."
        )
    return f"Real data (Multi30K, COCO), {runs}."


def report_ours_label():
    """Our numbers' name in the effect charts: which world they come from."""
    return "ours (demo world)" if WORLD else "ours (real data)"


def report_table_inputs(wildcards):
    """A table's page: its CSV and the metrics of every row's model and seed (the per-seed
    differences of its effect chart)."""
    return {
        "table": layout.table(wildcards.table),
        "metrics": report_effects.page_inputs(config, wildcards.table),
    }


def report_table_specs(wildcards):
    """One table's page spec (its config entry, row sources, seeds), keyed by its name."""
    return as_json(
        {wildcards.table: report_effects.page_spec(config, wildcards.table)}, sort_keys=False
    )


def report_name(name):
    """(short name, what it shows) of a table or page for the report's lists: its title split at
    the first ": " (Table 1, English M30K test 2016, aligned setting)."""
    titles = {
        pages.RESULTS: "All results: every table with its effect chart, the checks and figures",
        pages.METHOD_CHECK: pages.METHOD_CHECK_TITLE,
        pages.PSEUDOPAIR_STATS: pages.PSEUDOPAIR_STATS_TITLE,
    }
    title = titles.get(name) or config["tables"].get(name, {}).get("title") or name
    short, _, about = title.partition(": ")
    return short, about


def report_labels(name):
    """The label a result has in the report's lists, shown there instead of the file's path: the
    short name of a table or page (:func:`report_name`: Table 5, 004 Table 2, Method check) or
    ``name`` itself. ``name``: a table or page name, or a function of the wildcards giving one."""
    pick = name if callable(name) else (lambda wildcards: name)
    return lambda wildcards: {"name": report_name(pick(wildcards))[0]}


# The report's subcategories of Tables (listed alphabetically by the report)
REPORT_PAGES = "Charts and tables (pages)"
REPORT_DATA = "Data (CSV, Markdown)"
REPORT_FIGURES = "Figures"


def report_figures():
    """(caption, path) of the figures on the results page: training curves, Figure 1, the tables
    drawn as bars."""
    figures = [(pages.TRAINING_CURVES_CAPTION, layout.training_curves())]
    if config.get("pseudopair_stats", {}).get("figure"):
        figures.append((pages.FIGURE1_CAPTION, layout.pseudopair_figure("png")))
    for name, spec in config["tables"].items():
        if spec.get("figure"):  # "heading — caption"
            caption = "bars: ours (mean ± sd over seeds), the paper's number as a tick where known"
            figures.append((f"{spec['title']} — {caption}", layout.table_figure(name)))
    for name, table in report_contract.parameters_figures(config).items():
        title = config["tables"][table]["parameters_figure"].get("title", name)
        caption = "mR (mean ± sd over seeds) against trainable parameters"
        figures.append((f"{title} — {caption}", layout.parameters_figure(name)))
    return figures


def natural(path):
    """Sort key: table1 … table7 before table10, whatever order layered config files left."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


def report_results_inputs(wildcards):
    """The results page's inputs, tables in natural order (for `snakemake --report`: the tables
    and figures that exist), and the metrics of every table's effect chart."""
    tables = present(sorted(all_tables(), key=natural))
    shown = [Path(path).stem for path in tables]
    return {
        "tables": tables,
        "metrics": sorted(
            {path for name in shown for path in report_effects.page_inputs(config, name)}
        ),
        "method_check": present(method_check_outputs()),
        "stats": present(pseudopair_stats_outputs()),
        "figures": present(path for _, path in report_figures()),
    }


def report_results_specs(wildcards, input):
    """The page spec of every table on the results page."""
    return as_json(
        {
            Path(path).stem: report_effects.page_spec(config, Path(path).stem)
            for path in input.tables
        },
        sort_keys=False,
    )


def report_results_args(wildcards, input):
    """report-page's sections, as a list (each item quoted in the shell)."""
    args = [arg for path in input.tables for arg in ("--table", path)]
    args += [
        arg for path in input.method_check for arg in ("--csv", pages.METHOD_CHECK_TITLE, path)
    ]
    args += [arg for path in input.stats for arg in ("--pseudopair-stats", path)]
    captions = dict((path, caption) for caption, path in report_figures())
    args += [arg for path in input.figures for arg in ("--image", captions[path], path)]
    return args

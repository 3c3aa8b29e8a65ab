# pseudopairs: Kádár et al., "Bootstrapping Disjoint Datasets for Multilingual Multimodal
# Representation Learning", from raw data to the paper's tables.
#
#   snakemake --cores 2 results/table1.csv                       # offline demo world (default)
#   snakemake --cores 8 --configfile config/paper.yaml ...       # real data (see README)
import shlex
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

REPO = Path(workflow.basedir)
# The package's source travels with the workflow: Snakemake from any environment (a cluster
# module, pipx) can parse the workflow, and every job finds the same code, also inside a per-rule
# conda environment (--sdm conda), which holds the third-party packages only.
sys.path.insert(0, str(REPO / "src"))
shell.prefix(
    f"export PYTHONPATH={shlex.quote(str(REPO / 'src'))}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
)

from pseudopairs.config import check_config, load_schema


# Data sets, experiments and tables are shared by every configuration; the demo world is the
# default. Files given with --configfile (and --config values) are layered on top of both, in the
# order given: `--configfile config/paper.yaml` for the real data, plus a file of your own with
# just the keys you change (`--configfile config/paper.yaml my.yaml`).
configfile: REPO / "config" / "experiments.yaml"
configfile: REPO / "config" / "config.yaml"


# snakemake --report results/report.html: this description, then every output marked report().
report: "workflow/report/workflow.rst"


# Fails before any job runs, naming each wrong, missing or unknown key.
check_config(config, load_schema(REPO / "workflow" / "schemas" / "config.schema.yaml"))


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/text.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/translation.smk"
include: "workflow/rules/pseudopairs.smk"
include: "workflow/rules/tables.smk"


onstart:
    check_job_environment()


rule all:
    default_target: True
    input:
        all_tables(),
        layout.tables_markdown(),
        layout.training_curves(),
        pseudopair_outputs(),

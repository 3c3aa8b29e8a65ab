# The workflow lives in workflow/Snakefile (Snakemake workflow catalog layout); this file lets
# `snakemake` run it from the repository root, as README.md shows.


include: "workflow/Snakefile"


# `snakemake` without a target builds what workflow/Snakefile's rule `all` builds (an included
# file's default target does not carry over to the including Snakefile).
rule default:
    default_target: True
    input:
        rules.all.input,

# The paper's tables: mean, standard deviation and n over seeds, with the published numbers.


# Seconds of work each: run where Snakemake runs, never submitted to a cluster.
localrules:
    table,
    tables_markdown,
    training_curves,


rule table:
    input:
        table_inputs,
    output:
        report(
            layout.table("{table}"),
            caption="../report/table.rst",
            category="Tables",
            labels={"table": "{table}"},
        ),
    log:
        layout.log("table", "{table}"),
    benchmark:
        layout.benchmark("table", "{table}")
    conda:
        "../../envs/steps.yaml"
    resources:
        mem_mb=mem_mb("table"),
        runtime=runtime("table"),
    params:
        spec=table_spec,
    shell:
        "python -m pseudopairs table --name {wildcards.table:q} --spec {params.spec:q} "
        "--output {output:q} > {log:q} 2>&1"


rule tables_markdown:
    input:
        tables=all_tables(),
        stats=pseudopair_stats_outputs(),
        method_check=method_check_outputs(),
    output:
        report(layout.tables_markdown(), caption="../report/tables_markdown.rst", category="Tables"),
    log:
        layout.log("tables_markdown", "tables"),
    benchmark:
        layout.benchmark("tables_markdown", "tables")
    conda:
        "../../envs/steps.yaml"
    resources:
        mem_mb=mem_mb("tables_markdown"),
        runtime=runtime("tables_markdown"),
    params:
        specs=as_json(config["tables"]),
        stats=lambda w, input: ["--pseudopair-stats", input.stats[0]] if input.stats else [],
        method_check=lambda w, input: (
            ["--method-check", input.method_check[0]] if input.method_check else []
        ),
    shell:
        "python -m pseudopairs tables-markdown --specs {params.specs:q} --output {output:q} "
        "{params.stats:q} {params.method_check:q} {input.tables:q} > {log:q} 2>&1"


rule training_curves:
    input:
        training_curves_inputs(),
    output:
        report(
            layout.training_curves(), caption="../report/training_curves.rst", category="Training"
        ),
    log:
        layout.log("training_curves", "training_curves"),
    benchmark:
        layout.benchmark("training_curves", "training_curves")
    conda:
        "../../envs/steps.yaml"
    resources:
        mem_mb=mem_mb("training_curves"),
        runtime=runtime("training_curves"),
    params:
        spec=training_curves_spec(),
    shell:
        "python -m pseudopairs training-curves --spec {params.spec:q} "
        "--output {output:q} > {log:q} 2>&1"

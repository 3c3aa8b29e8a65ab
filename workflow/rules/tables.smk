# The paper's tables: mean, standard deviation and n over seeds, with the published numbers.


# Seconds of work each: run where Snakemake runs, never submitted to a cluster.
localrules:
    table,
    table_figure,
    parameters_figure,
    tables_markdown,
    training_curves,


rule table:
    input:
        from_wildcards(report_contract.table_inputs, "table"),
    output:
        report(
            layout.table("{table}"),
            caption="../report/table.rst",
            category="Tables",
            subcategory=report_targets.DATA,
            labels=report_targets.labels(config, lambda w: w.table),
        ),
    log:
        layout.log("table", "{table}"),
    benchmark:
        layout.benchmark("table", "{table}")
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("table"),
    params:
        # the table's config entry (YAML order kept: it orders Table 7's direction columns) and
        # its metrics files
        spec=from_wildcards(report_contract.table_spec, "table", to_json=True, sort_keys=False),
    shell:
        "python -m pseudopairs table --name {wildcards.table:q} --spec {params.spec:q} "
        "--output {output:q} > {log:q} 2>&1"


# A table drawn as grouped bars (tables with `figure: true`: paper 004's Figure 3).
rule table_figure:
    input:
        layout.table("{table}"),
    output:
        report(
            layout.table_figure("{table}"),
            caption="../report/table_figure.rst",
            category="Tables",
            subcategory=report_targets.FIGURES,
            labels=report_targets.labels(config, lambda w: w.table),
        ),
    log:
        layout.log("table_figure", "{table}"),
    benchmark:
        layout.benchmark("table_figure", "{table}")
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("table_figure"),
    params:
        spec=lambda w: as_json(report_contract.table_entry(config, w.table), sort_keys=False),
    shell:
        "python -m pseudopairs table-figure --spec {params.spec:q} --table {input:q} "
        "--output {output:q} > {log:q} 2>&1"


# Mean recall against trainable parameters (tables with `parameters_figure`: paper 002's
# Figure 3), with its points as a CSV.
rule parameters_figure:
    input:
        from_wildcards(report_contract.parameters_figure_inputs, "figure"),
    output:
        png=report(
            layout.parameters_figure("{figure}"),
            caption="../report/parameters_figure.rst",
            category="Tables",
            subcategory=report_targets.FIGURES,
            labels=lambda w: {"name": w.figure},
        ),
        csv=layout.parameters_figure("{figure}", "csv"),
    log:
        layout.log("parameters_figure", "{figure}"),
    benchmark:
        layout.benchmark("parameters_figure", "{figure}")
    wildcard_constraints:
        figure=one_of(report_contract.parameters_figures(config)),
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("parameters_figure"),
    params:
        spec=from_wildcards(
            report_contract.parameters_figure_spec, "figure", to_json=True, sort_keys=False
        ),
    shell:
        "python -m pseudopairs parameters-figure --spec {params.spec:q} --png {output.png:q} "
        "--csv {output.csv:q} > {log:q} 2>&1"


rule tables_markdown:
    input:
        # for `snakemake --report`: what exists (common.smk, present)
        tables=lambda w: present(report_targets.tables(config)),
        stats=lambda w: present(report_targets.pseudopair_stats_outputs(config)),
        method_check=lambda w: present(report_targets.method_check_outputs(config)),
        runs=lambda w: present(report_targets.training_runs_outputs(config)),
    output:
        report(
            layout.tables_markdown(),
            caption="../report/tables_markdown.rst",
            category="Tables",
            subcategory=report_targets.DATA,
            labels=report_targets.labels(config, "All tables (Markdown)"),
        ),
    log:
        layout.log("tables_markdown", "tables"),
    benchmark:
        layout.benchmark("tables_markdown", "tables")
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("tables_markdown"),
    params:
        specs=as_json({t: report_contract.table_entry(config, t) for t in config["tables"]}),
        stats=lambda w, input: ["--pseudopair-stats", input.stats[0]] if input.stats else [],
        method_check=lambda w, input: (
            ["--method-check", input.method_check[0], "--training-runs", input.runs[0]]
            if input.method_check
            else []
        ),
    shell:
        "python -m pseudopairs tables-markdown --specs {params.specs:q} --output {output:q} "
        "{params.stats:q} {params.method_check:q} {input.tables:q} > {log:q} 2>&1"


rule training_curves:
    input:
        report_contract.training_logs(config),
    output:
        report(
            layout.training_curves(),
            caption="../report/training_curves.rst",
            category="Training",
            labels=report_targets.labels(config, "Training curves"),
        ),
    log:
        layout.log("training_curves", "training_curves"),
    benchmark:
        layout.benchmark("training_curves", "training_curves")
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("training_curves"),
    params:
        spec=as_json(report_contract.training_curves_spec(config), sort_keys=False),
    shell:
        "python -m pseudopairs training-curves --spec {params.spec:q} "
        "--output {output:q} > {log:q} 2>&1"


# The report's HTML pages (pseudopairs.report.html): what `snakemake --report` shows in the
# page itself. Seconds of work each: run where Snakemake runs.
localrules:
    report_table,
    report_method_check,
    report_pseudopair_stats,
    report_results,


rule report_table:
    input:
        unpack(from_wildcards(report_targets.table_page_inputs, "table")),
    output:
        report(
            pages.page("{table}"),
            caption="../report/table_page.rst",
            category="Tables",
            subcategory=report_targets.PAGES,
            labels=report_targets.labels(config, lambda w: w.table),
        ),
    log:
        layout.log("report_table", "{table}"),
    benchmark:
        layout.benchmark("report_table", "{table}")
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("report_table"),
    params:
        specs=from_wildcards(
            report_targets.table_page_specs, "table", to_json=True, sort_keys=False
        ),
        note=report_targets.note(config),
        ours=report_targets.ours_label(config),
    shell:
        "python -m pseudopairs report-page --specs {params.specs:q} --note {params.note:q} "
        "--ours-label {params.ours:q} --table {input.table:q} --output {output:q} > {log:q} 2>&1"


rule report_method_check:
    input:
        layout.method_check(),
    output:
        report(
            pages.page(pages.METHOD_CHECK),
            caption="../report/method_check_page.rst",
            category="Tables",
            subcategory=report_targets.PAGES,
            labels=report_targets.labels(config, pages.METHOD_CHECK),
        ),
    log:
        layout.log("report_method_check", pages.METHOD_CHECK),
    benchmark:
        layout.benchmark("report_method_check", pages.METHOD_CHECK)
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("report_method_check"),
    params:
        title=pages.METHOD_CHECK_TITLE,
        note=report_targets.note(config),
    shell:
        "python -m pseudopairs report-page --title {params.title:q} --note {params.note:q} "
        "--csv {params.title:q} {input:q} --output {output:q} > {log:q} 2>&1"


rule report_pseudopair_stats:
    input:
        layout.pseudopair_stats(),
    output:
        report(
            pages.page(pages.PSEUDOPAIR_STATS),
            caption="../report/pseudopair_stats_page.rst",
            category="Tables",
            subcategory=report_targets.PAGES,
            labels=report_targets.labels(config, pages.PSEUDOPAIR_STATS),
        ),
    log:
        layout.log("report_pseudopair_stats", pages.PSEUDOPAIR_STATS),
    benchmark:
        layout.benchmark("report_pseudopair_stats", pages.PSEUDOPAIR_STATS)
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("report_pseudopair_stats"),
    params:
        title=pages.PSEUDOPAIR_STATS_TITLE,
        note=report_targets.note(config),
    shell:
        "python -m pseudopairs report-page --title {params.title:q} --note {params.note:q} "
        "--pseudopair-stats {input:q} --output {output:q} > {log:q} 2>&1"


rule report_results:
    input:
        unpack(lambda w: report_targets.results_inputs(config, present)),
    output:
        report(
            pages.page(pages.RESULTS),
            caption="../report/results_page.rst",
            category="Tables",
            subcategory=report_targets.PAGES,
            labels=report_targets.labels(config, pages.RESULTS),
        ),
    log:
        layout.log("report_results", pages.RESULTS),
    benchmark:
        layout.benchmark("report_results", pages.RESULTS)
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("report_results"),
    params:
        title=pages.RESULTS_TITLE,
        specs=lambda w, input: as_json(
            report_targets.results_specs(config, input.tables), sort_keys=False
        ),
        note=report_targets.note(config),
        ours=report_targets.ours_label(config),
        sections=lambda w, input: report_targets.results_args(config, input),
    shell:
        "python -m pseudopairs report-page --title {params.title:q} --specs {params.specs:q} "
        "--note {params.note:q} --ours-label {params.ours:q} {params.sections:q} "
        "--output {output:q} > {log:q} 2>&1"

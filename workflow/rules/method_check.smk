# The method check: the paper's effects in this run (config method_check; Welch t over seeds), and
# how every training run of the tables ended (training_runs.csv: early stopping or the guard).


# Seconds of work: runs where Snakemake runs, never submitted to a cluster.
localrules:
    method_check,


rule method_check:
    input:
        report_contract.method_check_inputs(config),
    output:
        check=report(
            layout.method_check(),
            caption="../report/method_check.rst",
            category="Tables",
            subcategory=report_targets.DATA,
            labels=report_targets.labels(config, pages.METHOD_CHECK),
        ),
        runs=layout.training_runs(),
    log:
        layout.log("method_check", "method_check"),
    benchmark:
        layout.benchmark("method_check", "method_check")
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("method_check"),
    params:
        spec=as_json(report_contract.method_check_spec(config), sort_keys=False),
    shell:
        "python -m pseudopairs method-check --spec {params.spec:q} --output {output.check:q} "
        "--runs {output.runs:q} > {log:q} 2>&1"

# The method check: the paper's effects in this run (config method_check; Welch t over seeds).


# Seconds of work: runs where Snakemake runs, never submitted to a cluster.
localrules:
    method_check,


rule method_check:
    input:
        method_check_inputs(),
    output:
        report(
            layout.method_check(),
            caption="../report/method_check.rst",
            category="Tables",
        ),
    log:
        layout.log("method_check", "method_check"),
    benchmark:
        layout.benchmark("method_check", "method_check")
    conda:
        "../../envs/steps.yaml"
    resources:
        mem_mb=mem_mb("method_check"),
        runtime=runtime("method_check"),
    params:
        spec=method_check_spec(),
    shell:
        "python -m pseudopairs method-check --spec {params.spec:q} --output {output:q} > {log:q} 2>&1"

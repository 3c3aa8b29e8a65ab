# Iterated bootstrapping (beyond the paper; config `rounds:`, pseudopairs.workflow.rounds): every round of
# a chain is an ordinary pseudopair set, data set, experiment and table row, built by the other
# rules. This rule summarises a chain: per round the validation and test scores, the §7.2 shares
# of its pairs and their overlap with the previous round's, and the round a validation-driven stop
# keeps (every round is trained: the DAG is static; the stop rule is applied afterwards).
# Inputs and spec: pseudopairs.workflow.rounds (summary_inputs, summary_spec); rounds_outputs in common.smk.


# Seconds of work each: run where Snakemake runs, never submitted to a cluster.
localrules:
    rounds_summary,


rule rounds_summary:
    input:
        from_wildcards(chains_of_rounds.summary_inputs, "chain"),
    output:
        csv=layout.rounds_summary("{chain}"),
        png=report(
            layout.rounds_figure("{chain}"),
            caption="../report/rounds.rst",
            category="Pseudopairs",
            labels=report_targets.labels(config, lambda w: f"Rounds of {w.chain}"),
        ),
    log:
        layout.log("rounds_summary", "{chain}"),
    benchmark:
        layout.benchmark("rounds_summary", "{chain}")
    wildcard_constraints:
        chain=one_of(chains_of_rounds.chains(config)),
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("rounds_summary"),
    params:
        spec=from_wildcards(chains_of_rounds.summary_spec, "chain", to_json=True, sort_keys=False),
    shell:
        "python -m pseudopairs rounds-summary --spec {params.spec:q} --output {output.csv:q} "
        "--figure {output.png:q} > {log:q} 2>&1"

# Pseudopairs (paper §2.2, §7.2): mine one pair set per pseudopair set x seed of its source model,
# filter it at a similarity percentile into a caption table, and describe the sets (statistics,
# caption-use plot, Figure 1).


# Seconds of work each: run where Snakemake runs, never submitted to a cluster.
localrules:
    pseudopair_captions,
    pseudopair_stats,


rule mine:
    input:
        from_wildcards(mining_contract.mining_job, "pseudopairs", "seed", then=MiningJob.inputs),
    output:
        pairs=layout.pseudopair_pairs("{pseudopairs}", "{seed}"),
        stats=layout.pseudopair_mining_stats("{pseudopairs}", "{seed}"),
    log:
        layout.log("mine", "{pseudopairs}.seed{seed}"),
    benchmark:
        layout.benchmark("mine", "{pseudopairs}.seed{seed}")
    conda:
        "../../envs/steps.yaml"
    threads: lambda w: mining_contract.mining_job(config, w.pseudopairs, int(w.seed)).engine.threads
    resources:
        **job_resources("mine", gpu=True),
    params:
        job=from_wildcards(mining_contract.mining_job, "pseudopairs", "seed", to_json=True),
    shell:
        "python -m pseudopairs mine --job {params.job:q} --threads {threads} --pairs {output.pairs:q} "
        "--stats {output.stats:q} > {log:q} 2>&1"


rule pseudopair_captions:
    input:
        layout.pseudopair_pairs("{pseudopairs}", "{seed}"),
    output:
        layout.pseudopair_captions("{pseudopairs}", "{seed}", "{percentile}"),
    log:
        layout.log("pseudopair_captions", "{pseudopairs}.seed{seed}.p{percentile}"),
    benchmark:
        layout.benchmark("pseudopair_captions", "{pseudopairs}.seed{seed}.p{percentile}")
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("pseudopair_captions"),
    shell:
        "python -m pseudopairs pseudopair-captions --pairs {input:q} --min-percentile {wildcards.percentile:q} "
        "--dataset {wildcards.pseudopairs:q}.p{wildcards.percentile:q} --output {output:q} > {log:q} 2>&1"


rule pseudopair_stats:
    input:
        report_contract.pseudopair_stats_inputs(config),
    output:
        stats=report(
            layout.pseudopair_stats(),
            caption="../report/pseudopair_stats.rst",
            category="Pseudopairs",
            labels=report_targets.labels(config, "§7.2 statistics (CSV)"),
        ),
        plot=report(
            layout.caption_use_plot(),
            caption="../report/caption_use.rst",
            category="Pseudopairs",
            labels=report_targets.labels(config, "Caption use (hubness)"),
        ),
        histogram=report(
            layout.similarity_histogram(),
            caption="../report/similarity.rst",
            category="Pseudopairs",
            labels=report_targets.labels(config, "Similarity of the mined pairs"),
        ),
    log:
        layout.log("pseudopair_stats", "pseudopair_stats"),
    benchmark:
        layout.benchmark("pseudopair_stats", "pseudopair_stats")
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("pseudopair_stats"),
    params:
        spec=as_json(report_contract.pseudopair_stats_spec(config), sort_keys=False),
    shell:
        "python -m pseudopairs pseudopair-stats --spec {params.spec:q} --output {output.stats:q} "
        "--plot {output.plot:q} --histogram {output.histogram:q} > {log:q} 2>&1"


# Figure 1, when the config asks for it (pseudopair_stats.figure)
if config.get("pseudopair_stats", {}).get("figure"):

    localrules:
        pseudopair_figure,

    rule pseudopair_figure:
        input:
            report_contract.pseudopair_figure_inputs(config),
        output:
            png=report(
                layout.pseudopair_figure("png"),
                caption="../report/figure1.rst",
                category="Pseudopairs",
                labels=report_targets.labels(config, "Figure 1"),
            ),
            html=report(
                layout.pseudopair_figure("html"),
                caption="../report/figure1.rst",
                category="Pseudopairs",
                labels=report_targets.labels(config, "Figure 1 (page)"),
            ),
        log:
            layout.log("pseudopair_figure", "pseudopair_examples"),
        benchmark:
            layout.benchmark("pseudopair_figure", "pseudopair_examples")
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("pseudopair_figure"),
        params:
            spec=as_json(report_contract.pseudopair_figure_spec(config), sort_keys=False),
        shell:
            "python -m pseudopairs pseudopair-figure --spec {params.spec:q} --png {output.png:q} "
            "--html {output.html:q} > {log:q} 2>&1"

# The rehearsal (config/rehearsal.yaml over config/paper.yaml; docs/scale.md): the paper
# configuration at the paper's size, offline. `rehearsal_data` makes the inputs that cannot be
# had here -- like `fetch` on a login node, it runs first, as a target of its own -- and
# `rehearsal_summary` turns the benchmark files of Table 5's jobs into results/rehearsal.csv.

if "rehearsal" in config:

    REHEARSAL = config["rehearsal"]
    REHEARSAL_ROOT = f"{layout.RESULTS}/rehearsal"

    # the rehearsal's COCO archives stand where the downloads would put them
    ruleorder: rehearsal_data > download_karpathy
    ruleorder: rehearsal_data > download_coco_images

    rule rehearsal_data:
        output:
            flickr=directory(config["paper_data"]["flickr30k_images"]),
            karpathy=f"{DOWNLOADS}/coco/caption_datasets.zip",
            coco=[f"{DOWNLOADS}/coco/{part}.zip" for part in ("train2014", "val2014")],
            parallel=[
                f"{REHEARSAL_ROOT}/parallel/{split}.{lang}"
                for split in ("train", "val")
                for lang in ("en", "de")
            ],
        log:
            layout.log("rehearsal_data", "inputs"),
        benchmark:
            layout.benchmark("rehearsal_data", "inputs")
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("rehearsal_data"),
        params:
            # what it makes (rehearsal.reduced only labels the summary's rows)
            settings=as_json({k: v for k, v in REHEARSAL.items() if k != "reduced"}),
            coco_dir=f"{DOWNLOADS}/coco",
            parallel_dir=f"{REHEARSAL_ROOT}/parallel",
        shell:
            "python -m pseudopairs rehearsal-data --settings {params.settings:q} "
            "--flickr-dir {output.flickr:q} --karpathy-zip {output.karpathy:q} "
            "--coco-zip-dir {params.coco_dir:q} --parallel-dir {params.parallel_dir:q} > {log:q} 2>&1"

    localrules:
        rehearsal_summary,

    rule rehearsal_summary:
        input:
            layout.table("table5"),
            layout.pseudopair_stats(),
        output:
            f"{layout.RESULTS}/rehearsal.csv",
        log:
            layout.log("rehearsal_summary", "rehearsal"),
        benchmark:
            layout.benchmark("rehearsal_summary", "rehearsal")
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("rehearsal_summary"),
        params:
            settings=as_json(REHEARSAL),
            benchmarks=f"{layout.RESULTS}/benchmarks",
            results=layout.RESULTS,
            # on a cluster these run where Snakemake runs (the login node): 2 GB at most
            login_rules=",".join(sorted(workflow._localrules)),
        shell:
            "python -m pseudopairs rehearsal-summary --settings {params.settings:q} "
            "--benchmarks {params.benchmarks:q} --results {params.results:q} "
            "--login-rules {params.login_rules:q} --output {output:q} > {log:q} 2>&1"

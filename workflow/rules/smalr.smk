# SMALR (paper 002, §3.1): the inputs of an experiment with model.text_encoder hem. FastText
# vectors per language -- trained on the run's own training captions (fasttext.source: train), or
# the published vectors (download) filtered to those captions' words -- then HEM's pretraining
# (its latent vocabulary, hard assignment and initial rows), which that experiment's training reads.

if smalr_contract.downloads_fasttext(config):

    # Compute nodes often have no internet: the vectors are fetched where Snakemake runs (and by
    # the `fetch` target on a login node), resumably, checked against fasttext.sha256 or the
    # SHA-256 recorded for the URL in checksums.json.
    localrules:
        download_fasttext,

    rule download_fasttext:
        output:
            smalr_contract.published_vectors(config, "{lang}"),
        log:
            layout.log("download_fasttext", "{lang}"),
        benchmark:
            layout.benchmark("download_fasttext", "{lang}")
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("download_fasttext"),
        params:
            url=from_wildcards(smalr_contract.fasttext_download, "lang", key="url"),
            sha256=lambda w: sha256_arg(smalr_contract.fasttext_download(config, w.lang)["sha256"]),
            retries=DOWNLOAD_RETRIES,
        shell:
            "python -m pseudopairs download --url {params.url:q} --output {output:q} {params.sha256:q} "
            "--retries {params.retries:q} > {log:q} 2>&1"


rule fasttext:
    input:
        from_wildcards(smalr_contract.fasttext_inputs, "experiment", "seed", "lang"),
    output:
        layout.fasttext_vectors("{experiment}", "{seed}", "{lang}"),
    log:
        layout.log("fasttext", "{experiment}.seed{seed}.{lang}"),
    benchmark:
        layout.benchmark("fasttext", "{experiment}.seed{seed}.{lang}")
    conda:
        "../../envs/smalr.yaml"
    resources:
        **job_resources("fasttext"),
    params:
        spec=from_wildcards(
            smalr_contract.fasttext_spec, "experiment", "seed", "lang", to_json=True
        ),
    shell:
        "python -m pseudopairs train-fasttext --spec {params.spec:q} --output {output:q} "
        "> {log:q} 2>&1"


rule pretrain_hem:
    input:
        from_wildcards(smalr_contract.hem_inputs, "experiment", "seed"),
    output:
        vocab=layout.hem_vocabulary("{experiment}", "{seed}"),
        init=layout.hem_init("{experiment}", "{seed}"),
    log:
        layout.log("pretrain_hem", "{experiment}.seed{seed}"),
    benchmark:
        layout.benchmark("pretrain_hem", "{experiment}.seed{seed}")
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("pretrain_hem"),
    params:
        spec=from_wildcards(smalr_contract.hem_spec, "experiment", "seed", to_json=True),
    shell:
        "python -m pseudopairs pretrain-hem --spec {params.spec:q} --vocab {output.vocab:q} "
        "--init {output.init:q} > {log:q} 2>&1"

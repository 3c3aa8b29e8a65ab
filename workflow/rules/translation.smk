# Translation (paper §2.3, §6): an En->De model -- trained on parallel text (demo) or the
# published OpenNMT-py Transformer (paper) -- converted by CTranslate2's OpenNMT-py converter,
# then every source caption of each translated data set translated, resumably in chunks.

TRANSLATION_MODEL = config["translation"]["model"]

if not TRANSLATION_DOWNLOADED:

    rule train_mt:
        input:
            unpack(translation_parallel_text),
        output:
            directory(layout.translation_trained_model()),
        log:
            layout.log("train_mt", "model"),
        benchmark:
            layout.benchmark("train_mt", "model")
        conda:
            "../../envs/steps.yaml"
        threads: config["translation"]["train"].get("threads") or 1
        resources:
            **job_resources("train_mt"),
        params:
            settings=as_json(config["translation"]["train"]),
        shell:
            "python -m pseudopairs train-mt --source-train {input.source_train:q} "
            "--target-train {input.target_train:q} --source-valid {input.source_valid:q} "
            "--target-valid {input.target_valid:q} --settings {params.settings:q} "
            "--threads {threads} --output-dir {output:q} > {log:q} 2>&1"

else:

    # Compute nodes often have no internet: the model is fetched where Snakemake runs (and by
    # the `fetch` target on a login node).
    localrules:
        download_translation_model,

    rule download_translation_model:
        output:
            archive(f"{DOWNLOADS}/translation_model/model.tar.gz"),
        log:
            layout.log("download_translation_model", "model"),
        benchmark:
            layout.benchmark("download_translation_model", "model")
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("download_translation_model"),
        params:
            url=TRANSLATION_MODEL["url"],
            sha256=sha256_arg(TRANSLATION_MODEL["sha256"]),
            retries=PAPER.get("retries", 5),
        shell:
            "python -m pseudopairs download --url {params.url:q} --output {output:q} {params.sha256:q} "
            "--retries {params.retries:q} > {log:q} 2>&1"

    rule extract_translation_model:
        input:
            f"{DOWNLOADS}/translation_model/model.tar.gz",
        output:
            directory(layout.translation_downloaded_model()),
        log:
            layout.log("extract_translation_model", "model"),
        benchmark:
            layout.benchmark("extract_translation_model", "model")
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("extract_translation_model"),
        shell:
            "python -m pseudopairs extract --archive {input:q} --output {output:q} > {log:q} 2>&1"


rule convert_mt:
    input:
        translation_checkpoint_dir(),
    output:
        directory(layout.translation_model()),
    log:
        layout.log("convert_mt", "model"),
    benchmark:
        layout.benchmark("convert_mt", "model")
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("convert_mt"),
    params:
        checkpoint=lambda w, input: f"{input[0]}/{translation_files()['checkpoint']}",
        tokenizer=lambda w, input: f"{input[0]}/{translation_files()['tokenizer']}",
        quantization=TRANSLATION_MODEL["quantization"],
    shell:
        "python -m pseudopairs convert-mt --checkpoint {params.checkpoint:q} --tokenizer {params.tokenizer:q} "
        "--quantization {params.quantization:q} --output-dir {output:q} > {log:q} 2>&1"


rule translate:
    input:
        model=layout.translation_model(),
        captions=from_wildcards(translation_contract.translation_source, "dataset", key="captions"),
        truecase=translation_truecase_inputs,
    output:
        captions=layout.translated_captions("{dataset}"),
        sidecar=layout.translated_captions_sidecar("{dataset}"),
    log:
        layout.log("translate", "{dataset}"),
    benchmark:
        layout.benchmark("translate", "{dataset}")
    wildcard_constraints:
        dataset=translated_dataset_pattern(),
    conda:
        # CTranslate2 + SentencePiece + sacremoses, no torch; CUDA 12 cuBLAS for the GPU
        "../../envs/translation.yaml"
    threads: config["translation"]["translate"].get("threads", 1)
    resources:
        **job_resources("translate", gpu=config["translation"]["translate"].get("device") != "cpu"),
    params:
        settings=as_json(translation_contract.translate_settings(config)),
        source_lang=from_wildcards(translation_contract.translation_source, "dataset", key="lang"),
        target_lang=from_wildcards(data_contract.dataset, "dataset", key="lang"),
        case=config["text"]["case"],
        truecase=translation_truecase_args,
    shell:
        "python -m pseudopairs translate-captions --model {input.model:q} "
        "--captions {input.captions:q} --source-lang {params.source_lang:q} "
        "--target-lang {params.target_lang:q} --dataset {wildcards.dataset:q} --output {output.captions:q} "
        "--sidecar {output.sidecar:q} --settings {params.settings:q} --case {params.case:q} "
        "{params.truecase:q} --threads {threads} > {log:q} 2>&1"

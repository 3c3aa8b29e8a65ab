# Translation (paper §2.3, §6): an En->De model -- trained on parallel text (demo) or the
# published OpenNMT-py Transformer (paper) -- converted by CTranslate2's OpenNMT-py converter,
# then every source caption of each translated data set translated, resumably in chunks. A data
# set may name another model (datasets.*.translation_model): one of translation.models, any
# format CTranslate2 runs (a converted directory, OpenNMT-py, Marian / OPUS-MT, Hugging Face
# MarianMT / M2M100 / NLLB), from a local path or a checksummed download, converted by
# convert-mt --spec (pseudopairs.translation.converters).

TRANSLATION_MODEL = config.get("translation", {}).get("model")

if TRANSLATION_MODEL is not None and not translation_contract.default_model_downloaded(config):

    rule train_mt:
        input:
            **translation_contract.parallel_text(config),
        output:
            directory(layout.translation_trained_model()),
        log:
            layout.log("train_mt", "model"),
        benchmark:
            layout.benchmark("train_mt", "model")
        conda:
            "../../envs/steps.yaml"
        threads: translation_contract.translation_train_settings(config).threads or 1
        resources:
            **job_resources("train_mt"),
        params:
            settings=as_json(config["translation"]["train"]),
        shell:
            "python -m pseudopairs train-mt --source-train {input.source_train:q} "
            "--target-train {input.target_train:q} --source-valid {input.source_valid:q} "
            "--target-valid {input.target_valid:q} --settings {params.settings:q} "
            "--threads {threads} --output-dir {output:q} > {log:q} 2>&1"

elif TRANSLATION_MODEL is not None:

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
            retries=DOWNLOAD_RETRIES,
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


if TRANSLATION_MODEL is not None:

    DEFAULT_MT_FILES = translation_contract.default_model_files(config)

    rule convert_mt:
        input:
            translation_contract.default_checkpoint_dir(config),
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
            checkpoint=lambda w, input: f"{input[0]}/{DEFAULT_MT_FILES['checkpoint']}",
            tokenizer=lambda w, input: f"{input[0]}/{DEFAULT_MT_FILES['tokenizer']}",
            quantization=TRANSLATION_MODEL["quantization"],
        shell:
            "python -m pseudopairs convert-mt --checkpoint {params.checkpoint:q} --tokenizer {params.tokenizer:q} "
            "--quantization {params.quantization:q} --output-dir {output:q} > {log:q} 2>&1"


# Compute nodes often have no internet: a named model's archive is fetched where Snakemake runs
# (and by the `fetch` target on a login node).
localrules:
    download_translation_named,


rule download_translation_named:
    output:
        archive(layout.translation_named_archive("{name}", "{suffix}")),
    log:
        layout.log("download_translation_named", "{name}{suffix}"),
    benchmark:
        layout.benchmark("download_translation_named", "{name}{suffix}")
    wildcard_constraints:
        name=one_of(translation_contract.downloaded_models(config)),
        suffix=r"\.zip|\.tar\.gz|\.tgz|\.tar",
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("download_translation_model"),
    params:
        url=from_wildcards(translation_contract.model_download, "name", key="url"),
        sha256=lambda w: sha256_arg(translation_contract.model_download(config, w.name)["sha256"]),
        retries=DOWNLOAD_RETRIES,
    shell:
        "python -m pseudopairs download --url {params.url:q} --output {output:q} {params.sha256:q} "
        "--retries {params.retries:q} > {log:q} 2>&1"


rule extract_translation_named:
    input:
        from_wildcards(translation_contract.model_archive, "name"),
    output:
        directory(layout.translation_named_extracted("{name}")),
    log:
        layout.log("extract_translation_named", "{name}"),
    benchmark:
        layout.benchmark("extract_translation_named", "{name}")
    wildcard_constraints:
        name=one_of(translation_contract.downloaded_models(config)),
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("extract_translation_model"),
    shell:
        "python -m pseudopairs extract --archive {input:q} --output {output:q} > {log:q} 2>&1"


# A local model folder is keyed by content (its manifest, refreshed at each parse: common.smk):
# a weight file rewritten in place reconverts; the folder's path is not tracked (it takes `input`).
rule convert_mt_named:
    input:
        from_wildcards(translation_contract.conversion_input, "name"),
    output:
        directory(layout.translation_named_model("{name}")),
    log:
        layout.log("convert_mt_named", "{name}"),
    benchmark:
        layout.benchmark("convert_mt_named", "{name}")
    wildcard_constraints:
        name=one_of(translation_contract.named_models(config)),
    conda:
        # CTranslate2's converters with torch, transformers (Hugging Face models) and PyYAML
        "../../envs/steps.yaml"
    resources:
        **job_resources("convert_mt"),
    params:
        settings=from_wildcards(translation_contract.conversion_settings, "name", to_json=True),
        spec=lambda w, input: as_json(translation_contract.convert_spec(config, w.name)),
    shell:
        "python -m pseudopairs convert-mt --spec {params.spec:q} --output-dir {output:q} > {log:q} 2>&1"


rule translate:
    input:
        model=from_wildcards(translation_contract.dataset_model_dir, "dataset"),
        captions=from_wildcards(translation_contract.translation_source, "dataset", key="captions"),
        truecase=from_wildcards(translation_contract.target_text_inputs, "dataset"),
    output:
        captions=layout.translated_captions("{dataset}"),
        sidecar=layout.translated_captions_sidecar("{dataset}"),
    log:
        layout.log("translate", "{dataset}"),
    benchmark:
        layout.benchmark("translate", "{dataset}")
    wildcard_constraints:
        dataset=one_of(translation_contract.translation_datasets(config)),
    conda:
        # CTranslate2 + SentencePiece + sacremoses, no torch; CUDA 12 cuBLAS for the GPU
        "../../envs/translation.yaml"
    threads: translation_contract.translate_section(config).threads
    resources:
        **job_resources(
            "translate", gpu=translation_contract.translate_section(config).device != "cpu"
        ),
    params:
        settings=as_json(translation_contract.translate_settings(config)),
        source_lang=from_wildcards(translation_contract.translation_source, "dataset", key="lang"),
        target_lang=from_wildcards(data_contract.dataset, "dataset", key="lang"),
        case=config["text"]["case"],
        truecase=from_wildcards(translation_contract.target_text_args, "dataset"),
    shell:
        "python -m pseudopairs translate-captions --model {input.model:q} "
        "--captions {input.captions:q} --source-lang {params.source_lang:q} "
        "--target-lang {params.target_lang:q} --dataset {wildcards.dataset:q} --output {output.captions:q} "
        "--sidecar {output.sidecar:q} --settings {params.settings:q} --case {params.case:q} "
        "{params.truecase:q} --threads {threads} > {log:q} 2>&1"

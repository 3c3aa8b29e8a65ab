# Cross-Lingual Consistency (paper 002 §3.4): the rows of a table with `clc` need every test query
# translated into the table's other languages. Each direction's model is translation.model's, or
# one trained by train-mt on parallel text in every CLC language (the demo world's, or the
# translation corpus' own captions) and converted for CTranslate2; the translation corpus' val and
# test captions are translated resumably (cached per direction and split); evaluate_clc scores
# every version and aggregates (CLC-A, CLC-C trained on val) into metrics.clc.json.
# Paper 002's augmented training set (§4; data sets with `augment`) uses the same models:
# translate_augment translates a source data set's training captions into an augmented data
# set's language, augment_captions joins them with its human captions.
from pseudopairs.smalr import augment_contract

if clc_contract.directions(config):

    rule clc_parallel_text:
        input:
            clc_contract.parallel_inputs(config),
        output:
            **clc_contract.parallel_outputs(config),
        log:
            layout.log("clc_parallel_text", "parallel"),
        benchmark:
            layout.benchmark("clc_parallel_text", "parallel")
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("world_parallel"),
        params:
            spec=as_json(clc_contract.parallel_spec(config)),
            outputs=as_json(clc_contract.parallel_outputs(config)),
        shell:
            "python -m pseudopairs clc-parallel-text --spec {params.spec:q} --outputs {params.outputs:q} "
            "> {log:q} 2>&1"

    rule train_mt_clc:
        input:
            unpack(from_wildcards(clc_contract.train_inputs, "direction")),
        output:
            directory(layout.clc_trained_model("{direction}")),
        log:
            layout.log("train_mt_clc", "{direction}"),
        benchmark:
            layout.benchmark("train_mt_clc", "{direction}")
        wildcard_constraints:
            direction=one_of(clc_contract.trained_directions(config)),
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

    rule convert_mt_clc:
        input:
            layout.clc_trained_model("{direction}"),
        output:
            directory(layout.clc_model("{direction}")),
        log:
            layout.log("convert_mt_clc", "{direction}"),
        benchmark:
            layout.benchmark("convert_mt_clc", "{direction}")
        wildcard_constraints:
            direction=one_of(clc_contract.trained_directions(config)),
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("convert_mt"),
        params:
            checkpoint=lambda w, input: f"{input[0]}/model.pt",
            tokenizer=lambda w, input: f"{input[0]}/sentencepiece.model",
            quantization=config["translation"]["model"]["quantization"],
        shell:
            "python -m pseudopairs convert-mt --checkpoint {params.checkpoint:q} --tokenizer {params.tokenizer:q} "
            "--quantization {params.quantization:q} --output-dir {output:q} > {log:q} 2>&1"

    rule translate_clc:
        input:
            model=from_wildcards(clc_contract.translate_spec, "direction", "split", key="model"),
            captions=from_wildcards(
                clc_contract.translate_spec, "direction", "split", key="captions"
            ),
            truecase=from_wildcards(clc_contract.target_text_inputs, "direction"),
        output:
            captions=layout.clc_translations("{direction}", "{split}"),
            sidecar=layout.clc_translations_sidecar("{direction}", "{split}"),
        log:
            layout.log("translate_clc", "{direction}.{split}"),
        benchmark:
            layout.benchmark("translate_clc", "{direction}.{split}")
        wildcard_constraints:
            direction=one_of(list(clc_contract.directions(config))),
            split="val|test",
        conda:
            "../../envs/translation.yaml"
        threads: translation_contract.translate_section(config).threads
        resources:
            **job_resources(
                "translate", gpu=translation_contract.translate_section(config).device != "cpu"
            ),
        params:
            settings=as_json(translation_contract.translate_settings(config)),
            source_lang=from_wildcards(
                clc_contract.translate_spec, "direction", "split", key="source_lang"
            ),
            target_lang=from_wildcards(
                clc_contract.translate_spec, "direction", "split", key="target_lang"
            ),
            dataset=from_wildcards(clc_contract.translate_spec, "direction", "split", key="dataset"),
            case=config["text"]["case"],
            truecase=from_wildcards(clc_contract.target_text_args, "direction"),
        shell:
            "python -m pseudopairs translate-captions --model {input.model:q} "
            "--captions {input.captions:q} --source-lang {params.source_lang:q} "
            "--target-lang {params.target_lang:q} --dataset {params.dataset:q} --output {output.captions:q} "
            "--sidecar {output.sidecar:q} --settings {params.settings:q} --case {params.case:q} "
            "{params.truecase:q} --threads {threads} > {log:q} 2>&1"

    rule evaluate_clc:
        input:
            from_wildcards(clc_contract.evaluation_inputs, "experiment", "seed"),
        output:
            layout.clc_metrics("{experiment}", "{seed}"),
        log:
            layout.log("evaluate_clc", "{experiment}.seed{seed}"),
        benchmark:
            layout.benchmark("evaluate_clc", "{experiment}.seed{seed}")
        conda:
            "../../envs/steps.yaml"
        threads: lambda w: model_contract.experiment_training(config, w.experiment).threads
        resources:
            **job_resources("evaluate", gpu=True),
        params:
            spec=from_wildcards(clc_contract.evaluation_spec, "experiment", to_json=True),
            checkpoint=lambda w: layout.checkpoint(w.experiment, w.seed),
            vocab=lambda w: layout.model_vocabulary(w.experiment, w.seed),
            device=lambda w: model_contract.experiment_training(config, w.experiment).device,
        shell:
            "python -m pseudopairs evaluate-clc --checkpoint {params.checkpoint:q} --vocab {params.vocab:q} "
            "--spec {params.spec:q} --experiment {wildcards.experiment:q} --seed {wildcards.seed:q} "
            "--device {params.device:q} --threads {threads} --output {output:q} > {log:q} 2>&1"

    rule translate_augment:
        input:
            model=from_wildcards(
                clc_contract.augment_translate_spec, "dataset", "source", key="model"
            ),
            captions=from_wildcards(
                clc_contract.augment_translate_spec, "dataset", "source", key="captions"
            ),
            truecase=from_wildcards(translation_contract.target_text_inputs, "dataset"),
        output:
            captions=layout.augment_translation("{dataset}", "{source}"),
            sidecar=layout.augment_translation_sidecar("{dataset}", "{source}"),
        log:
            layout.log("translate_augment", "{dataset}.{source}"),
        benchmark:
            layout.benchmark("translate_augment", "{dataset}.{source}")
        wildcard_constraints:
            dataset=one_of(augment_contract.augmented_datasets(config)),
            source=one_of(sorted({s for _, s in augment_contract.translations(config)})),
        conda:
            "../../envs/translation.yaml"
        threads: translation_contract.translate_section(config).threads
        resources:
            **job_resources(
                "translate", gpu=translation_contract.translate_section(config).device != "cpu"
            ),
        params:
            settings=as_json(translation_contract.translate_settings(config)),
            source_lang=from_wildcards(
                clc_contract.augment_translate_spec, "dataset", "source", key="source_lang"
            ),
            target_lang=from_wildcards(
                clc_contract.augment_translate_spec, "dataset", "source", key="target_lang"
            ),
            dataset=from_wildcards(
                clc_contract.augment_translate_spec, "dataset", "source", key="dataset"
            ),
            case=config["text"]["case"],
            truecase=from_wildcards(translation_contract.target_text_args, "dataset"),
        shell:
            "python -m pseudopairs translate-captions --model {input.model:q} "
            "--captions {input.captions:q} --source-lang {params.source_lang:q} "
            "--target-lang {params.target_lang:q} --dataset {params.dataset:q} --output {output.captions:q} "
            "--sidecar {output.sidecar:q} --settings {params.settings:q} --case {params.case:q} "
            "{params.truecase:q} --threads {threads} > {log:q} 2>&1"

    rule augment_captions:
        input:
            from_wildcards(augment_contract.augment_inputs, "dataset"),
        output:
            captions=layout.augmented_captions("{dataset}"),
            sidecar=layout.augmented_captions_sidecar("{dataset}"),
        log:
            layout.log("augment_captions", "{dataset}"),
        benchmark:
            layout.benchmark("augment_captions", "{dataset}")
        wildcard_constraints:
            dataset=one_of(augment_contract.augmented_datasets(config)),
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("augment_captions"),
        params:
            spec=from_wildcards(augment_contract.augment_spec, "dataset", to_json=True),
        shell:
            "python -m pseudopairs augment-captions --spec {params.spec:q} "
            "--output {output.captions:q} --sidecar {output.sidecar:q} > {log:q} 2>&1"

# SMALR (paper 002, §3.1): the inputs of an experiment with model.text_encoder hem. FastText
# vectors per language trained on the run's own training captions, then HEM's pretraining (its
# latent vocabulary, hard assignment and initial rows), which that experiment's training reads.


rule fasttext:
    input:
        from_wildcards(smalr_specs.fasttext_inputs, "experiment", "seed", "lang"),
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
        spec=from_wildcards(smalr_specs.fasttext_spec, "experiment", "seed", "lang", to_json=True),
    shell:
        "python -m pseudopairs train-fasttext --spec {params.spec:q} --output {output:q} "
        "> {log:q} 2>&1"


rule pretrain_hem:
    input:
        from_wildcards(smalr_specs.hem_inputs, "experiment", "seed"),
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
        spec=from_wildcards(smalr_specs.hem_spec, "experiment", "seed", to_json=True),
    shell:
        "python -m pseudopairs pretrain-hem --spec {params.spec:q} --vocab {output.vocab:q} "
        "--init {output.init:q} > {log:q} 2>&1"

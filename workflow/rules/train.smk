# Training: one job per seed block of an experiment (config training.stack: the block's seeds
# train together, pseudopairs.model.stack_training), or per experiment x seed for a block of one
# seed and any seed the config does not list; then the evaluation of each model's best checkpoint
# on the test split.


for _rule, _name, _seeds in stack_rules():

    rule:
        name:
            _rule
        input:
            lambda w, name=_name, seeds=_seeds: blocks.stack_inputs(config, name, seeds),
        output:
            stack_outputs(_name, _seeds),
        log:
            layout.log("train", stack_label(_name, _seeds)),
        benchmark:
            layout.benchmark("train", stack_label(_name, _seeds))
        group:
            f"stack_{stack_label(_name, _seeds)}"
        conda:
            "../../envs/steps.yaml"
        threads: config["training"]["threads"]
        resources:
            **stack_resources("train", len(_seeds)),
        params:
            models=lambda w, name=_name, seeds=_seeds: as_json(
                blocks.stack_spec(config, name, seeds)
            ),
            settings=lambda w, name=_name: as_json(model_contract.job_settings(config, name)),
        shell:
            "python -m pseudopairs train-stack --models {params.models:q} "
            "--settings {params.settings:q} --threads {threads} > {log:q} 2>&1"

    # the stack's models evaluated one after the other in one job of the stack's group job (so the
    # group asks one GPU and one evaluation's memory)
    rule:
        name:
            _rule.replace("train_stack_", "evaluate_stack_")
        input:
            lambda w, name=_name, seeds=_seeds: blocks.stack_evaluation_inputs(config, name, seeds),
        output:
            stack_metrics(_name, _seeds),
        log:
            layout.log("evaluate", stack_label(_name, _seeds)),
        benchmark:
            layout.benchmark("evaluate", stack_label(_name, _seeds))
        group:
            f"stack_{stack_label(_name, _seeds)}"
        conda:
            "../../envs/steps.yaml"
        threads: config["training"]["threads"]
        resources:
            **stack_resources("evaluate", len(_seeds)),
        params:
            models=lambda w, name=_name, seeds=_seeds: as_json(
                blocks.stack_evaluation(config, name, seeds)
            ),
            spec=lambda w, name=_name: as_json(evaluation_contract.evaluation_spec(config, name)),
            experiment=_name,
            device=config["training"]["device"],
        shell:
            "python -m pseudopairs evaluate-stack --models {params.models:q} --spec {params.spec:q} "
            "--experiment {params.experiment:q} --device {params.device:q} --threads {threads} "
            "> {log:q} 2>&1"


rule train:
    input:
        from_wildcards(model_contract.training_inputs, "experiment", "seed"),
    output:
        checkpoint=layout.checkpoint("{experiment}", "{seed}"),
        vocab=layout.model_vocabulary("{experiment}", "{seed}"),
        log=layout.train_log("{experiment}", "{seed}"),
    log:
        layout.log("train", "{experiment}.seed{seed}"),
    benchmark:
        layout.benchmark("train", "{experiment}.seed{seed}")
    # train and evaluate of one model are one group job: on a cluster, the evaluation runs in the
    # training job's allocation instead of queueing again for a GPU (profiles/README.md)
    group:
        "model_{experiment}_seed{seed}"
    conda:
        "../../envs/steps.yaml"
    threads: config["training"]["threads"]
    resources:
        **job_resources("train", gpu=True, grouped_with=["evaluate"]),
    params:
        spec=from_wildcards(model_contract.training_spec, "experiment", "seed", to_json=True),
        settings=from_wildcards(model_contract.job_settings, "experiment", to_json=True),
        out_dir=lambda w: layout.model_dir(w.experiment, w.seed),
    shell:
        "python -m pseudopairs train --spec {params.spec:q} --settings {params.settings:q} "
        "--out-dir {params.out_dir:q} --seed {wildcards.seed:q} --threads {threads} > {log:q} 2>&1"


rule evaluate:
    input:
        from_wildcards(evaluation_contract.evaluation_inputs, "experiment", "seed"),
    output:
        layout.metrics("{experiment}", "{seed}"),
    log:
        layout.log("evaluate", "{experiment}.seed{seed}"),
    benchmark:
        layout.benchmark("evaluate", "{experiment}.seed{seed}")
    group:
        "model_{experiment}_seed{seed}"
    conda:
        "../../envs/steps.yaml"
    threads: config["training"]["threads"]
    resources:
        **job_resources("evaluate", gpu=True, placed_with="train", grouped_with=["train"]),
    params:
        spec=from_wildcards(evaluation_contract.evaluation_spec, "experiment", to_json=True),
        checkpoint=lambda w: layout.checkpoint(w.experiment, w.seed),
        vocab=lambda w: layout.model_vocabulary(w.experiment, w.seed),
        device=config["training"]["device"],
    shell:
        "python -m pseudopairs evaluate --checkpoint {params.checkpoint:q} --vocab {params.vocab:q} "
        "--spec {params.spec:q} --experiment {wildcards.experiment:q} --seed {wildcards.seed:q} "
        "--device {params.device:q} --threads {threads} --output {output:q} > {log:q} 2>&1"

# Training: one job per stack of an experiment (config training.stack: the block's seeds
# train together, pseudopairs.model.stack_training), or per experiment x seed for a block of one
# seed and any seed the config does not list; then the evaluation of each model's best checkpoint
# on the test split. Threads and device are the experiment's own (its `training` settings).
#
# A stack's outputs are one file set per seed of its block, so a block's seeds cannot be a
# wildcard (Snakemake needs every output of a job named by the job's wildcards): each distinct
# block (seeds 1-3, 4-5, ...) gets one pair of rules, train_stack_seeds1_3 and
# evaluate_stack_seeds1_3, whose wildcard is the experiment (constrained to the experiments
# trained in that block), ordered before train and evaluate.


for _seeds, _prefix, _names, _device in [
    (seeds, prefix, names, device)
    for seeds, all_names in stacks.stack_experiments(config, MODELS).items()
    for prefix, names, device in stacks.device_groups(config, all_names)
]:
    _block = stacks.stack_label(_seeds)
    _rule = _prefix + _block.replace("-", "_")

    rule:
        name:
            f"train_stack_{_rule}"
        input:
            lambda w, seeds=_seeds: model_contract.training_job_inputs(config, w.experiment, seeds),
        output:
            [
                path
                for seed in _seeds
                for path in (
                    layout.checkpoint("{experiment}", seed),
                    layout.model_vocabulary("{experiment}", seed),
                    layout.train_log("{experiment}", seed),
                )
            ],
        log:
            layout.log("train", f"{{experiment}}.{_block}"),
        benchmark:
            layout.benchmark("train", f"{{experiment}}.{_block}")
        wildcard_constraints:
            experiment=one_of(_names),
        group:
            f"stack_{{experiment}}.{_block}"
        conda:
            "../../envs/steps.yaml"
        threads: lambda w: model_contract.experiment_training(config, w.experiment).threads
        resources:
            **stack_resources("train", len(_seeds), device=_device),
        params:
            job=lambda w, seeds=_seeds: as_json(
                model_contract.training_job(config, w.experiment, seeds)
            ),
        shell:
            "python -m pseudopairs train --job {params.job:q} --threads {threads} > {log:q} 2>&1"

    # the stack's models evaluated one after the other in one job of the stack's group job (so the
    # group asks one GPU and one evaluation's memory)
    rule:
        name:
            f"evaluate_stack_{_rule}"
        input:
            lambda w, seeds=_seeds: evaluation_contract.evaluation_job(
                config, w.experiment, seeds
            ).inputs(),
        output:
            [layout.metrics("{experiment}", seed) for seed in _seeds],
        log:
            layout.log("evaluate", f"{{experiment}}.{_block}"),
        benchmark:
            layout.benchmark("evaluate", f"{{experiment}}.{_block}")
        wildcard_constraints:
            experiment=one_of(_names),
        group:
            f"stack_{{experiment}}.{_block}"
        conda:
            "../../envs/steps.yaml"
        threads: lambda w: model_contract.experiment_training(config, w.experiment).threads
        resources:
            **stack_resources("evaluate", len(_seeds), device=_device),
        params:
            job=lambda w, seeds=_seeds: as_json(
                evaluation_contract.evaluation_job(config, w.experiment, seeds)
            ),
        shell:
            "python -m pseudopairs evaluate --job {params.job:q} --threads {threads} > {log:q} 2>&1"

    # a block's models come from its stack, not from one train / evaluate job per seed
    workflow.ruleorder(f"train_stack_{_rule}", "train")
    workflow.ruleorder(f"evaluate_stack_{_rule}", "evaluate")


rule train:
    input:
        from_wildcards(model_contract.training_job_inputs, "experiment", "seed"),
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
    threads: lambda w: model_contract.experiment_training(config, w.experiment).threads
    resources:
        **job_resources("train", gpu=True, grouped_with=["evaluate"]),
    params:
        job=from_wildcards(model_contract.training_job, "experiment", "seed", to_json=True),
    shell:
        "python -m pseudopairs train --job {params.job:q} --threads {threads} > {log:q} 2>&1"


rule evaluate:
    input:
        from_wildcards(
            evaluation_contract.evaluation_job, "experiment", "seed", then=EvaluationJob.inputs
        ),
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
    threads: lambda w: model_contract.experiment_training(config, w.experiment).threads
    resources:
        **job_resources("evaluate", gpu=True, placed_with="train", grouped_with=["train"]),
    params:
        job=from_wildcards(evaluation_contract.evaluation_job, "experiment", "seed", to_json=True),
    shell:
        "python -m pseudopairs evaluate --job {params.job:q} --threads {threads} > {log:q} 2>&1"

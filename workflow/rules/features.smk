# ResNet average-pool features for every corpus with images, one job per split; in the demo world
# the ResNet is first pretrained on world scenes (the demo's ImageNet).


rule features:
    input:
        unpack(from_wildcards(corpora.feature_image_inputs, "corpus", "split")),
        weights=feature_weights_input,
    output:
        features=layout.features("{corpus}", "{split}", FMT),
        skipped=layout.skipped_images("{corpus}", "{split}"),
    log:
        layout.log("features", "{corpus}.{split}"),
    benchmark:
        layout.benchmark("features", "{corpus}.{split}")
    conda:
        "../../envs/steps.yaml"
    threads: features_contract.job_threads(config)
    resources:
        **job_resources("features", gpu=True),
    params:
        settings=as_json(config["features"]),
        # the folder an external corpus' image list is relative to: not tracked (it takes
        # `input`), so the same files through another path rerun nothing; the manifest is the key
        image_root=lambda w, input: corpora.image_root_args(config, w.corpus),
    shell:
        "python -m pseudopairs features --images {input.images:q} --output {output.features:q} "
        "--skipped {output.skipped:q} --settings {params.settings:q} {params.image_root:q} > {log:q} 2>&1"


if WORLD:

    # The demo's stand-in for ImageNet pretraining: features.arch trained on freshly drawn world
    # scenes (not the corpora's images) to name what they show (pseudopairs.features.pretraining).
    # Used when features.weights names its output (config/config.yaml does).
    rule pretrain_features:
        output:
            weights=layout.pretrained_features("{arch}"),
            report=layout.pretrained_features("{arch}") + ".json",
        log:
            layout.log("pretrain_features", "{arch}"),
        benchmark:
            layout.benchmark("pretrain_features", "{arch}")
        conda:
            "../../envs/steps.yaml"
        threads: features_contract.pretraining_settings(config)["threads"]
        resources:
            **job_resources("pretrain_features"),
        params:
            world=as_json(features_contract.world_scene_settings(config)),
            settings=as_json(features_contract.pretraining_settings(config)),
            features=lambda wildcards: as_json({**config["features"], "arch": wildcards.arch}),
        shell:
            "python -m pseudopairs pretrain-features --world {params.world:q} "
            "--settings {params.settings:q} --features {params.features:q} "
            "--output {output.weights:q} > {log:q} 2>&1"

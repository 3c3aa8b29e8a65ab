# ResNet50 average-pool features for every corpus with images, one job per split.


rule features:
    input:
        unpack(feature_image_inputs),
    output:
        features=layout.features("{corpus}", "{split}", FMT),
        skipped=layout.skipped_images("{corpus}", "{split}"),
    log:
        layout.log("features", "{corpus}.{split}"),
    benchmark:
        layout.benchmark("features", "{corpus}.{split}")
    conda:
        "../../envs/steps.yaml"
    threads: config["features"]["workers"] + (config["features"].get("threads") or 1)
    resources:
        mem_mb=mem_mb("features"),
        runtime=runtime("features"),
        gpu=GPU,
    params:
        settings=as_json(config["features"]),
    shell:
        "python -m pseudopairs features --images {input.images:q} --output {output.features:q} "
        "--skipped {output.skipped:q} --settings {params.settings:q} > {log:q} 2>&1"

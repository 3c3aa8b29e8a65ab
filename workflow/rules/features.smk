# ResNet50 average-pool features for every corpus with images, one job per split.


rule features:
    input:
        unpack(feature_image_inputs),
    output:
        features=layout.features("{corpus}", "{split}", FMT),
        skipped=layout.skipped_images("{corpus}", "{split}"),
    params:
        settings=as_json(config["features"]),
    threads: config["features"]["workers"] + (config["features"].get("threads") or 1)
    resources:
        mem_mb=mem_mb("features"),
        runtime=runtime("features"),
        gpu=GPU,
    conda:
        "../../envs/steps.yaml"
    log:
        layout.log("features", "{corpus}.{split}"),
    benchmark:
        layout.benchmark("features", "{corpus}.{split}")
    shell:
        "python -m pseudopairs features --images {input.images} --output {output.features} "
        "--skipped {output.skipped} --settings {params.settings:q} > {log} 2>&1"

# ResNet50 average-pool features for every corpus with images, one job per split.


def feature_image_inputs(wildcards):
    """The image list, plus (real data) the extracted COCO image folders it points into."""
    inputs = [layout.images(wildcards.corpus, wildcards.split)]
    if not WORLD and wildcards.corpus == "coco":
        inputs += coco_image_dirs()
    return inputs


rule features:
    input:
        feature_image_inputs,
    output:
        features=layout.features("{corpus}", "{split}", FMT),
        skipped=layout.skipped_images("{corpus}", "{split}"),
    params:
        settings=as_json(config["features"]),
    threads: config["features"]["workers"] + (config["features"].get("threads") or 1)
    resources:
        gpu=GPU,
    log:
        layout.log("features", "{corpus}.{split}"),
    benchmark:
        layout.benchmark("features", "{corpus}.{split}")
    shell:
        "pseudopairs features --images {input[0]} --output {output.features} "
        "--skipped {output.skipped} --settings {params.settings:q} > {log} 2>&1"

# Moses text preparation of every caption table and the truecaser models. (Each experiment builds
# its vocabulary from its own training captions inside its training job.)


rule prepare_captions:
    input:
        raw=layout.raw_captions("{corpus}", "{split}"),
        truecase=truecase_inputs,
    output:
        layout.captions("{corpus}", "{split}"),
    log:
        layout.log("prepare_captions", "{corpus}.{split}"),
    benchmark:
        layout.benchmark("prepare_captions", "{corpus}.{split}")
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("prepare_captions"),
    params:
        case=config["text"]["case"],
        truecase=truecase_args,
    shell:
        "python -m pseudopairs prepare-captions --input {input.raw:q} --output {output:q} "
        "--case {params.case:q} {params.truecase:q} > {log:q} 2>&1"


rule train_truecaser:
    input:
        truecaser_inputs(),
    output:
        layout.truecase_model("{lang}"),
    log:
        layout.log("train_truecaser", "{lang}"),
    benchmark:
        layout.benchmark("train_truecaser", "{lang}")
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("train_truecaser"),
    shell:
        "python -m pseudopairs train-truecaser --input {input:q} --lang {wildcards.lang:q} --output {output:q} > {log:q} 2>&1"

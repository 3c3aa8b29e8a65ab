# Text preparation of every caption table (Moses, or the tokenizer text.tokenizers names for a
# language Moses has no rules for), the truecaser models and the SentencePiece tokenizers trained
# on the run's captions. (Each experiment builds its vocabulary from its own training captions
# inside its training job.)


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
        # the case plus each tokenizer other than Moses; the case alone without those
        text=text_preparation_key,
        truecase=truecase_args,
    shell:
        "python -m pseudopairs prepare-captions --input {input.raw:q} --output {output:q} "
        "--case {params.case:q} {params.truecase:q} > {log:q} 2>&1"


rule train_truecaser:
    input:
        unpack(from_wildcards(text_contract.truecaser_training_inputs, "lang")),
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
    params:
        tokenizer=from_wildcards(text_contract.tokenizer_args, "lang"),
    shell:
        "python -m pseudopairs train-truecaser --input {input.tables:q} --lang {wildcards.lang:q} "
        "--output {output:q} {params.tokenizer:q} > {log:q} 2>&1"


rule train_sentencepiece:
    input:
        text_contract.raw_training_tables(config),
    output:
        layout.sentencepiece_model("{lang}"),
    log:
        layout.log("train_sentencepiece", "{lang}"),
    benchmark:
        layout.benchmark("train_sentencepiece", "{lang}")
    wildcard_constraints:
        lang=sentencepiece_lang_pattern(),
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("train_sentencepiece"),
    params:
        case=config["text"]["case"],
        settings=from_wildcards(text_contract.sentencepiece_settings, "lang", to_json=True),
    shell:
        "python -m pseudopairs train-sentencepiece --input {input:q} --lang {wildcards.lang:q} "
        "--case {params.case:q} --settings {params.settings:q} --output {output:q} > {log:q} 2>&1"

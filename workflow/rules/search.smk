# The search stage (docs/search.md): a trained run exported as a self-contained model folder
# (pseudopairs export), and a collection's images and captions embedded by it into a search index
# (pseudopairs index) that `pseudopairs search` and `pseudopairs serve` query.


rule export_model:
    input:
        from_wildcards(search_contract.export_inputs, "experiment", "seed"),
    output:
        directory(layout.exported_model("{experiment}", "{seed}")),
    log:
        layout.log("export_model", "{experiment}.seed{seed}"),
    benchmark:
        layout.benchmark("export_model", "{experiment}.seed{seed}")
    wildcard_constraints:
        experiment=one_of(config.get("experiments", {})),
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("export_model"),
    params:
        run_dir=lambda w: layout.model_dir(w.experiment, w.seed),
        configfiles=search_configfile_args(workflow.configfiles),
    shell:
        "python -m pseudopairs export {params.run_dir:q} {output:q} {params.configfiles:q} > {log:q} 2>&1"


rule search_index:
    input:
        model=layout.exported_model("{experiment}", "{seed}"),
        images=layout.images("{corpus}", "{split}"),
        captions=layout.raw_captions("{corpus}", "{split}"),
    output:
        directory(layout.search_index("{experiment}", "{seed}", "{corpus}", "{split}")),
    log:
        layout.log("search_index", "{experiment}.seed{seed}.{corpus}_{split}"),
    benchmark:
        layout.benchmark("search_index", "{experiment}.seed{seed}.{corpus}_{split}")
    wildcard_constraints:
        experiment=one_of(config.get("experiments", {})),
        corpus=one_of(config.get("corpora", {})),
    conda:
        "../../envs/steps.yaml"
    threads: 2
    resources:
        **job_resources("search_index"),
    params:
        image_root=lambda w: corpora.image_root_args(config, w.corpus),
    shell:
        "python -m pseudopairs index --model {input.model:q} --images {input.images:q} "
        "--captions {input.captions:q} {params.image_root:q} --no-progress {output:q} > {log:q} 2>&1"

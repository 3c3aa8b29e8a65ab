# Selection data sets (config `select`): a corpus' training captions restricted to a seeded
# subset of images and/or captions per image (paper 004's Half, Bi-overlap, Bi-disjoint and
# one-caption-per-image samples).


# Seconds of work: runs where Snakemake runs, never submitted to a cluster.
localrules:
    select_captions,


rule select_captions:
    input:
        from_wildcards(data_contract.selection_spec, "dataset", key="captions"),
    output:
        layout.selected_captions("{dataset}"),
    log:
        layout.log("select_captions", "{dataset}"),
    benchmark:
        layout.benchmark("select_captions", "{dataset}")
    wildcard_constraints:
        dataset=one_of(data_contract.selection_datasets(config)),
    conda:
        "../../envs/steps.yaml"
    resources:
        **job_resources("select_captions"),
    params:
        lang=from_wildcards(data_contract.selection_spec, "dataset", key="lang"),
        select=from_wildcards(data_contract.selection_spec, "dataset", key="select", to_json=True),
    shell:
        "python -m pseudopairs select-captions --captions {input:q} --lang {params.lang:q} "
        "--select {params.select:q} --dataset {wildcards.dataset:q} --output {output:q} > {log:q} 2>&1"

# Raw data → raw caption tables + image lists, one rule per kind of corpus (config `corpora`,
# pseudopairs.data.corpora). Demo: the generated world. Paper: downloads of Multi30K (task1 +
# task2), the Karpathy COCO splits and COCO 2014 images; Flickr30K images are read from the path
# the user gives (they are distributed on request). Your own: an imagefolder or a webdataset.

if WORLD:

    rule world:
        output:
            captions=[layout.raw_captions(c, s) for c in WORLD_CORPORA for s in SPLITS],
            images=[layout.images(c, s) for c, has in WORLD_CORPORA.items() if has for s in SPLITS],
            manifest=layout.world_manifest(),
            meanings=layout.world_caption_meanings(),
            pngs=directory(f"{layout.RESULTS}/world/images"),
        log:
            layout.log("world", "world"),
        benchmark:
            layout.benchmark("world", "world")
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("world"),
        params:
            # the parallel text has a rule of its own: changing it does not redraw the images
            settings=as_json({k: v for k, v in config["world"].items() if k != "parallel"}),
            root=lambda w, output: Path(output.manifest).parents[1],
        shell:
            "python -m pseudopairs world --settings {params.settings:q} --out-root {params.root:q} > {log:q} 2>&1"

    rule world_parallel:
        output:
            [
                layout.world_parallel_text(split, lang)
                for split in ("train", "val")
                for lang in ("en", "de")
            ],
        log:
            layout.log("world_parallel", "parallel"),
        benchmark:
            layout.benchmark("world_parallel", "parallel")
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("world_parallel"),
        params:
            settings=as_json(config["world"]),
            root=lambda w, output: Path(output[0]).parents[2],
        shell:
            "python -m pseudopairs world-parallel --settings {params.settings:q} --out-root {params.root:q} > {log:q} 2>&1"

    # The demo world in the formats of users' own data (docs/own-data.md): the English COCO-like
    # set as an imagefolder, the aligned set's images with their French captions as a webdataset
    # (pseudopairs.world.export; config/own-data.yaml reads them back as corpora)
    rule export_world_corpus:
        input:
            captions=lambda w: [
                layout.raw_captions(world_export[w.format]["captions"], s) for s in SPLITS
            ],
            images=lambda w: [layout.images(world_export[w.format]["images"], s) for s in SPLITS],
        output:
            directory(layout.exported_corpus("{format}")),
        log:
            layout.log("export_world_corpus", "{format}"),
        benchmark:
            layout.benchmark("export_world_corpus", "{format}")
        wildcard_constraints:
            format=one_of(world_export),
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("export_world_corpus"),
        shell:
            "python -m pseudopairs export-world-corpus --format {wildcards.format:q} --captions {input.captions:q} "
            "--images {input.images:q} --output {output:q} > {log:q} 2>&1"

    rule export_world_parallel:
        output:
            [
                f"{layout.exported_corpus('parallel')}/{split}.{lang}"
                for split in config["world"].get("parallel", {})
                for lang in corpora.WORLD_EXPORT_PARALLEL
            ],
        log:
            layout.log("export_world_corpus", "parallel"),
        benchmark:
            layout.benchmark("export_world_corpus", "parallel")
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("export_world_corpus"),
        params:
            world=as_json(config["world"]),
            langs=list(corpora.WORLD_EXPORT_PARALLEL),
            folder=lambda w, output: Path(output[0]).parent,
        shell:
            "python -m pseudopairs export-world-parallel --world {params.world:q} --langs {params.langs:q} "
            "--output {params.folder:q} > {log:q} 2>&1"


if PAPER_SOURCE:

    rule download_multi30k:
        output:
            f"{DOWNLOADS}/multi30k/{{path}}",
        log:
            layout.log("download_multi30k", "{path}"),
        benchmark:
            layout.benchmark("download_multi30k", "{path}")
        wildcard_constraints:
            path="task[12]/(raw|image_splits)/[^/]+",
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("download_multi30k"),
        params:
            url=lambda w: corpora.multi30k_url(config, w.path),
            sha256=lambda w: sha256_arg(multi30k_sha256(w.path)),
            retries=DOWNLOAD_RETRIES,
        shell:
            "python -m pseudopairs download --url {params.url:q} --output {output:q} {params.sha256:q} "
            "--retries {params.retries:q} > {log:q} 2>&1"

    rule read_multi30k_task2:
        input:
            lambda w: corpora.multi30k_downloads(config, "task2", w.split),
        output:
            captions=layout.raw_captions("{corpus}", "{split}"),
            images=layout.images("{corpus}", "{split}"),
        log:
            layout.log("read_multi30k_task2", "{corpus}.{split}"),
        benchmark:
            layout.benchmark("read_multi30k_task2", "{corpus}.{split}")
        wildcard_constraints:
            corpus=one_of(corpora.corpora_of(config, rule="read_multi30k_task2")),
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("read_multi30k_task2"),
        params:
            # the image list names the files relative to paper_data.flickr30k_images, so the
            # same files through another path rerun nothing (pseudopairs.data.manifest)
            upstream=lambda w: PAPER["multi30k"]["task2_splits"][w.split],
            root=f"{DOWNLOADS}/multi30k",
        shell:
            "python -m pseudopairs read-multi30k --root {params.root:q} --task task2 --split {params.upstream:q} "
            "--canonical-split {wildcards.split:q} --corpus {wildcards.corpus:q} "
            "--captions-out {output.captions:q} --images-out {output.images:q} > {log:q} 2>&1"

    rule read_multi30k_task1:
        input:
            lambda w: corpora.multi30k_downloads(config, "task1", w.split),
        output:
            captions=layout.raw_captions("{corpus}", "{split}"),
        log:
            layout.log("read_multi30k_task1", "{corpus}.{split}"),
        benchmark:
            layout.benchmark("read_multi30k_task1", "{corpus}.{split}")
        wildcard_constraints:
            corpus=one_of(corpora.corpora_of(config, rule="read_multi30k_task1")),
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("read_multi30k_task1"),
        params:
            upstream=lambda w: PAPER["multi30k"]["task1_splits"][w.split],
            langs=",".join(PAPER["multi30k"]["task1_langs"]),
            root=f"{DOWNLOADS}/multi30k",
        shell:
            "python -m pseudopairs read-multi30k --root {params.root:q} --task task1 --split {params.upstream:q} "
            "--canonical-split {wildcards.split:q} --corpus {wildcards.corpus:q} "
            "--captions-out {output.captions:q} --langs {params.langs:q} > {log:q} 2>&1"

    rule download_karpathy:
        output:
            archive(f"{DOWNLOADS}/coco/caption_datasets.zip"),
        log:
            layout.log("download_karpathy", "caption_datasets"),
        benchmark:
            layout.benchmark("download_karpathy", "caption_datasets")
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("download_karpathy"),
        params:
            url=PAPER["coco"]["karpathy_url"],
            sha256=sha256_arg(PAPER["coco"].get("karpathy_sha256")),
            retries=DOWNLOAD_RETRIES,
        shell:
            "python -m pseudopairs download --url {params.url:q} --output {output:q} {params.sha256:q} "
            "--retries {params.retries:q} > {log:q} 2>&1"

    rule extract_karpathy:
        input:
            f"{DOWNLOADS}/coco/caption_datasets.zip",
        output:
            directory(f"{DOWNLOADS}/coco/caption_datasets"),
        log:
            layout.log("extract_karpathy", "caption_datasets"),
        benchmark:
            layout.benchmark("extract_karpathy", "caption_datasets")
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("extract_karpathy"),
        shell:
            "python -m pseudopairs extract --archive {input:q} --output {output:q} > {log:q} 2>&1"

    rule download_coco_images:
        output:
            archive(f"{DOWNLOADS}/coco/{{part}}.zip"),
        log:
            layout.log("download_coco_images", "{part}"),
        benchmark:
            layout.benchmark("download_coco_images", "{part}")
        wildcard_constraints:
            part="train2014|val2014",
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("download_coco_images"),
        params:
            url=lambda w: PAPER["coco"]["images"][w.part]["url"],
            sha256=lambda w: sha256_arg(PAPER["coco"]["images"][w.part].get("sha256")),
            retries=DOWNLOAD_RETRIES,
        shell:
            "python -m pseudopairs download --url {params.url:q} --output {output:q} {params.sha256:q} "
            "--retries {params.retries:q} > {log:q} 2>&1"

    rule extract_coco_images:
        input:
            f"{DOWNLOADS}/coco/{{part}}.zip",
        output:
            directory(f"{DOWNLOADS}/coco/images/{{part}}"),
        log:
            layout.log("extract_coco_images", "{part}"),
        benchmark:
            layout.benchmark("extract_coco_images", "{part}")
        wildcard_constraints:
            part="train2014|val2014",
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("extract_coco_images"),
        params:
            unpacked=lambda w, output: Path(output[0]).parent / f".{w.part}.unpacked",
            folder=lambda w, output: Path(output[0]).parent / f".{w.part}.unpacked" / w.part,
        shell:
            # the zip holds a top-level {part}/ folder
            "python -m pseudopairs extract --archive {input:q} --output {params.unpacked:q} "
            "> {log:q} 2>&1 && mv {params.folder:q} {output:q} && rmdir {params.unpacked:q}"

    rule read_coco:
        input:
            f"{DOWNLOADS}/coco/caption_datasets",
        output:
            captions=layout.raw_captions("{corpus}", "{split}"),
            images=layout.images("{corpus}", "{split}"),
        log:
            layout.log("read_coco", "{corpus}.{split}"),
        benchmark:
            layout.benchmark("read_coco", "{corpus}.{split}")
        wildcard_constraints:
            corpus=one_of(corpora.corpora_of(config, rule="read_coco")),
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("read_coco"),
        params:
            karpathy_json=lambda w, input: f"{input[0]}/dataset_coco.json",
            images_dir=f"{DOWNLOADS}/coco/images",
            max_captions=PAPER["coco"]["max_captions"],
        shell:
            "python -m pseudopairs read-coco --karpathy-json {params.karpathy_json:q} --split {wildcards.split:q} "
            "--corpus {wildcards.corpus:q} --images-dir {params.images_dir:q} --max-captions {params.max_captions:q} "
            "--captions-out {output.captions:q} --images-out {output.images:q} > {log:q} 2>&1"

    # Compute nodes often have no internet: downloads always run where Snakemake runs, and
    # `snakemake --cores 4 fetch --configfile config/paper.yaml` on a login node fetches, verifies
    # (SHA-256) and extracts all real data before the cluster run.
    localrules:
        download_multi30k,
        download_karpathy,
        download_coco_images,
        fetch,

    rule fetch:
        input:
            [
                corpora.multi30k_downloads(config, task, split)
                for task in ("task2", "task1")
                for split in SPLITS
            ],
            f"{DOWNLOADS}/coco/caption_datasets",
            corpora.coco_image_dirs(config),
            translation_contract.fetch_inputs(config),
            smalr_contract.fasttext_downloads(config),
        output:
            touch(f"{DOWNLOADS}/fetched"),


# A corpus of your own (kind imagefolder or webdataset): its metadata file or shards keyed by
# content (refreshed at each parse: common.smk), then read into tables. The folder's path is a
# parameter Snakemake does not track (it takes `input`): the same files through another path
# rerun nothing (pseudopairs.data.manifest).
if corpora.generic_corpora(config):

    rule corpus_source:
        input:
            from_wildcards(corpora.produced_by, "corpus"),
        output:
            layout.corpus_source("{corpus}"),
        log:
            layout.log("corpus_source", "{corpus}"),
        benchmark:
            layout.benchmark("corpus_source", "{corpus}")
        wildcard_constraints:
            corpus=one_of(corpora.generic_corpora(config)),
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("corpus_source"),
        params:
            declaration=lambda w, input: as_json(corpora.declaration(config, w.corpus)),
        shell:
            "python -m pseudopairs corpus-source --corpus {wildcards.corpus:q} "
            "--declaration {params.declaration:q} --output {output:q} > {log:q} 2>&1"

    # The caption side: reruns when the source files change (an edited caption) ...
    rule read_corpus:
        input:
            layout.corpus_source("{corpus}"),
        output:
            captions=[layout.raw_captions("{corpus}", s) for s in SPLITS],
        log:
            layout.log("read_corpus", "{corpus}"),
        benchmark:
            layout.benchmark("read_corpus", "{corpus}")
        wildcard_constraints:
            corpus=one_of(corpora.generic_corpora(config)),
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("read_corpus"),
        params:
            # what the tables depend on: the declaration but its folder (tracked) ...
            settings=from_wildcards(corpora.reading_settings, "corpus", to_json=True),
            # ... and where the files are (not tracked: it takes `input`)
            declaration=lambda w, input: as_json(corpora.declaration(config, w.corpus)),
            root=lambda w, input: corpora.image_root(config, w.corpus),
        shell:
            "python -m pseudopairs read-corpus --corpus {wildcards.corpus:q} --declaration {params.declaration:q} "
            "--root {params.root:q} --captions-out {output.captions:q} > {log:q} 2>&1"

    # ... the image lists: made once here, then kept up to date at each parse (common.smk:
    # pseudopairs.data.generic.refresh_image_lists), rewritten only where their content changes,
    # so an edited caption reruns no features job (the source is `ancient`: its time alone
    # reruns nothing here)
    rule corpus_images:
        input:
            ancient(layout.corpus_source("{corpus}")),
        output:
            images=[layout.images("{corpus}", s) for s in SPLITS],
            key=layout.corpus_images_key("{corpus}"),
        log:
            layout.log("corpus_images", "{corpus}"),
        benchmark:
            layout.benchmark("corpus_images", "{corpus}")
        wildcard_constraints:
            corpus=one_of(corpora.generic_corpora(config)),
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("read_corpus"),
        params:
            declaration=lambda w, input: as_json(corpora.declaration(config, w.corpus)),
            root=lambda w, input: corpora.image_root(config, w.corpus),
        shell:
            "python -m pseudopairs read-corpus --corpus {wildcards.corpus:q} --declaration {params.declaration:q} "
            "--root {params.root:q} --images-out {output.images:q} --images-key {output.key:q} "
            "--source {input:q} > {log:q} 2>&1"


# The image files a split of an external corpus needs (Flickr30K, an imagefolder, a webdataset's
# shards), keyed by content; the features depend on it, not on the folder (refreshed at each
# parse: common.smk). A file missing stops the run here, before any features job is submitted.
if corpora.external_corpora(config):

    localrules:
        image_manifest,

    rule image_manifest:
        input:
            layout.images("{corpus}", "{split}"),
        output:
            layout.image_manifest("{corpus}", "{split}"),
        log:
            layout.log("image_manifest", "{corpus}.{split}"),
        benchmark:
            layout.benchmark("image_manifest", "{corpus}.{split}")
        wildcard_constraints:
            corpus=one_of(corpora.external_corpora(config)),
        conda:
            "../../envs/steps.yaml"
        resources:
            **job_resources("image_manifest"),
        params:
            root=lambda w, input: corpora.image_root(config, w.corpus),
        shell:
            "python -m pseudopairs image-manifest --images {input:q} --root {params.root:q} "
            "--output {output:q} > {log:q} 2>&1"

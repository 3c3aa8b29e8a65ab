# Raw data → raw caption tables + image lists. Demo: the generated world. Paper: downloads of
# Multi30K (task1 + task2), the Karpathy COCO splits and COCO 2014 images; Flickr30K images are
# read from the path the user gives (they are distributed on request).

WORLD_CORPORA = {"m30k": True, "m30k_task1": False, "coco": True}  # corpus -> has images

if WORLD:

    rule world:
        output:
            captions=[layout.raw_captions(c, s) for c in WORLD_CORPORA for s in SPLITS],
            images=[layout.images(c, s) for c, has in WORLD_CORPORA.items() if has for s in SPLITS],
            manifest=f"{layout.RESULTS}/world/manifest.json",
            pngs=directory(f"{layout.RESULTS}/world/images"),
        params:
            # the parallel text has a rule of its own: changing it does not redraw the images
            settings=as_json({k: v for k, v in config["world"].items() if k != "parallel"}),
            root=layout.RESULTS,
        log:
            layout.log("world", "world"),
        benchmark:
            layout.benchmark("world", "world")
        shell:
            "pseudopairs world --settings {params.settings:q} --out-root {params.root} > {log} 2>&1"

    rule world_parallel:
        output:
            [layout.world_parallel_text(split, lang) for split in ("train", "val") for lang in ("en", "de")],
        params:
            settings=as_json(config["world"]),
            root=layout.RESULTS,
        log:
            layout.log("world_parallel", "parallel"),
        benchmark:
            layout.benchmark("world_parallel", "parallel")
        shell:
            "pseudopairs world-parallel --settings {params.settings:q} --out-root {params.root} > {log} 2>&1"

else:
    PAPER = config["paper_data"]
    M30K = PAPER["multi30k"]
    DOWNLOADS = f"{layout.RESULTS}/downloads"
    RETRIES = PAPER.get("retries", 3)

    def multi30k_files(task, split):
        """Upstream files (relative to the Multi30K data root) behind one canonical split."""
        if task == "task2":
            upstream = M30K["task2_splits"][split]
            files = [f"task2/raw/{upstream}.{n}.{lang}.gz" for n in range(1, 6) for lang in ("en", "de")]
            return files + [f"task2/image_splits/{upstream}_images.txt"]
        upstream = M30K["task1_splits"][split]
        files = [f"task1/raw/{upstream}.{lang}.gz" for lang in M30K["task1_langs"]]
        return files + [f"task1/image_splits/{upstream}.txt"]

    from pseudopairs.download import multi30k_sha256

    def sha256_arg(value):
        return f"--sha256 {value}" if value else ""

    rule download_multi30k:
        output:
            f"{DOWNLOADS}/multi30k/{{path}}",
        wildcard_constraints:
            path="task[12]/(raw|image_splits)/[^/]+",
        params:
            url=lambda w: f"{M30K['base'].rstrip('/')}/{w.path}",
            sha256=lambda w: sha256_arg(multi30k_sha256(w.path)),
            retries=RETRIES,
        log:
            layout.log("download_multi30k", "{path}"),
        benchmark:
            layout.benchmark("download_multi30k", "{path}")
        shell:
            "pseudopairs download --url {params.url:q} --output {output} {params.sha256} "
            "--retries {params.retries} > {log} 2>&1"

    def read_multi30k_command(task):
        images_out = " --images-out {output.images}" if task == "task2" else " --langs {params.langs}"
        return (
            "pseudopairs read-multi30k --root {params.root} --task " + task + " "
            "--split {params.upstream} --canonical-split {wildcards.split} "
            "--images-dir {params.images_dir:q} --captions-out {output.captions}"
            + images_out + " > {log} 2>&1"
        )

    rule read_multi30k_task2:
        input:
            lambda w: [f"{DOWNLOADS}/multi30k/{f}" for f in multi30k_files("task2", w.split)],
        output:
            captions=layout.raw_captions("m30k", "{split}"),
            images=layout.images("m30k", "{split}"),
        params:
            upstream=lambda w: M30K["task2_splits"][w.split],
            images_dir=PAPER["flickr30k_images"],
            root=f"{DOWNLOADS}/multi30k",
        log:
            layout.log("read_multi30k_task2", "{split}"),
        benchmark:
            layout.benchmark("read_multi30k_task2", "{split}")
        shell:
            read_multi30k_command("task2")

    rule read_multi30k_task1:
        input:
            lambda w: [f"{DOWNLOADS}/multi30k/{f}" for f in multi30k_files("task1", w.split)],
        output:
            captions=layout.raw_captions("m30k_task1", "{split}"),
        params:
            upstream=lambda w: M30K["task1_splits"][w.split],
            langs=",".join(M30K["task1_langs"]),
            images_dir=PAPER["flickr30k_images"],
            root=f"{DOWNLOADS}/multi30k",
        log:
            layout.log("read_multi30k_task1", "{split}"),
        benchmark:
            layout.benchmark("read_multi30k_task1", "{split}")
        shell:
            read_multi30k_command("task1")

    rule download_karpathy:
        output:
            f"{DOWNLOADS}/coco/caption_datasets.zip",
        params:
            url=PAPER["coco"]["karpathy_url"],
            sha256=sha256_arg(PAPER["coco"].get("karpathy_sha256")),
            retries=RETRIES,
        log:
            layout.log("download_karpathy", "caption_datasets"),
        benchmark:
            layout.benchmark("download_karpathy", "caption_datasets")
        shell:
            "pseudopairs download --url {params.url:q} --output {output} {params.sha256} "
            "--retries {params.retries} > {log} 2>&1"

    rule extract_karpathy:
        input:
            f"{DOWNLOADS}/coco/caption_datasets.zip",
        output:
            directory(f"{DOWNLOADS}/coco/caption_datasets"),
        log:
            layout.log("extract_karpathy", "caption_datasets"),
        benchmark:
            layout.benchmark("extract_karpathy", "caption_datasets")
        shell:
            "pseudopairs extract --archive {input} --output {output} > {log} 2>&1"

    rule download_coco_images:
        output:
            f"{DOWNLOADS}/coco/{{part}}.zip",
        wildcard_constraints:
            part="train2014|val2014",
        params:
            url=lambda w: PAPER["coco"]["images"][w.part]["url"],
            sha256=lambda w: sha256_arg(PAPER["coco"]["images"][w.part].get("sha256")),
            retries=RETRIES,
        log:
            layout.log("download_coco_images", "{part}"),
        benchmark:
            layout.benchmark("download_coco_images", "{part}")
        shell:
            "pseudopairs download --url {params.url:q} --output {output} {params.sha256} "
            "--retries {params.retries} > {log} 2>&1"

    rule extract_coco_images:
        input:
            f"{DOWNLOADS}/coco/{{part}}.zip",
        output:
            directory(f"{DOWNLOADS}/coco/images/{{part}}"),
        wildcard_constraints:
            part="train2014|val2014",
        params:
            parent=f"{DOWNLOADS}/coco/images",
        log:
            layout.log("extract_coco_images", "{part}"),
        benchmark:
            layout.benchmark("extract_coco_images", "{part}")
        shell:
            # the zip holds a top-level {part}/ folder
            "pseudopairs extract --archive {input} --output {params.parent}/.{wildcards.part}.unpacked "
            "> {log} 2>&1 && mv {params.parent}/.{wildcards.part}.unpacked/{wildcards.part} {output} "
            "&& rmdir {params.parent}/.{wildcards.part}.unpacked"

    def coco_image_dirs():
        return [f"{DOWNLOADS}/coco/images/{part}" for part in PAPER["coco"]["images"]]

    rule read_coco:
        input:
            f"{DOWNLOADS}/coco/caption_datasets",
        output:
            captions=layout.raw_captions("coco", "{split}"),
            images=layout.images("coco", "{split}"),
        params:
            images_dir=f"{DOWNLOADS}/coco/images",
            max_captions=PAPER["coco"].get("max_captions", 5),
        log:
            layout.log("read_coco", "{split}"),
        benchmark:
            layout.benchmark("read_coco", "{split}")
        shell:
            "pseudopairs read-coco --karpathy-json {input}/dataset_coco.json --split {wildcards.split} "
            "--images-dir {params.images_dir} --max-captions {params.max_captions} "
            "--captions-out {output.captions} --images-out {output.images} > {log} 2>&1"

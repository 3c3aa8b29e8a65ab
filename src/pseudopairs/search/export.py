"""The ``export`` step: a trained run (``results/models/{experiment}/seed{seed}``) as a
self-contained model folder (:mod:`pseudopairs.search.folder`) that :func:`pseudopairs.load`
reads with nothing else of ``results/`` present.

What the folder needs comes from where the run recorded it: the weights, dimensions, similarity,
training spec and settings from ``checkpoint.pt``; the vocabulary from ``vocab.json``; the image
network (arch, weights, resize, crop) from the record in the run's feature files, and the stored
feature type from the features themselves; the test metrics from ``metrics.json``. The text
preparation (``text.case``, ``text.tokenizers``) and the data sets' descriptions come from the
configuration, layered as the Snakefile layers it (the shipped ``config/experiments.yaml`` and
``config/config.yaml``, then ``--configfile`` files in order). The configuration is checked
against the run: it must give the run's training spec and settings (else it is not the run's
configuration, and the export is refused), and the exported text preparation must turn the
run's raw training captions into the very tokens training read (a sample of each language).

The folder is built in a temporary sibling directory and renamed onto ``OUT_DIR`` at the end
(:func:`pseudopairs.core.io.atomic_directory`): a killed export leaves no ``OUT_DIR``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from pseudopairs import commands

from pseudopairs.core import layout
from pseudopairs.features.network import IMAGENET_MEAN, IMAGENET_STD
from pseudopairs.core.io import _umask, atomic_directory, read_captions
from pseudopairs.search import folder as fmt
from pseudopairs.search.card import model_card

log = logging.getLogger(__name__)

#: raw training captions per language whose preparation the export checks against the run's
CHECKED_CAPTIONS = 200

REPO = Path(__file__).resolve().parents[3]


# --------------------------------------------------------------------------------------------
# The run and its configuration


def run_config(configfiles=()) -> dict:
    """The configuration a run of the workflow with ``--configfile configfiles`` sees: the
    shipped ``config/experiments.yaml`` (unless ``paper_experiments: false``) and
    ``config/config.yaml``, then each file in order; checked (schema defaults filled)."""
    from pseudopairs.workflow.config import check_config, load_config
    from pseudopairs.core.settings import deep_update

    given = load_config(*configfiles)
    shipped = ["config.yaml"] if given.get("paper_experiments", True) is False else \
        ["experiments.yaml", "config.yaml"]
    config = load_config(*(REPO / "config" / name for name in shipped))
    deep_update(config, given)
    return check_config(config)


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in sorted(set(a) | set(b), key=str)
                for d in _differences(a.get(key), b.get(key), f"{prefix}{key}.")]
    return [] if a == b else [f"{prefix.rstrip('.')} ({a!r} in the run, {b!r} in the configuration)"]


def check_run_config(meta: dict, config: dict, *, checkpoint: Path, configfiles) -> None:
    """The configuration gives the run's training spec and settings, else it is not the run's."""
    from pseudopairs.model.contract import run_settings, training_spec
    from pseudopairs.model.job import RunSettings

    experiment, seed = meta["spec"]["experiment"], int(meta["seed"])
    if experiment not in config.get("experiments", {}):
        differs = [f"experiment {experiment!r} is not in it"]
    else:
        differs = _differences(meta["spec"], training_spec(config, experiment, seed), "spec.")
        differs += _differences(RunSettings.from_dict(meta["settings"]).run_key(),
                                run_settings(config, experiment).run_key(), "settings.")
    if differs:
        given = " ".join(str(f) for f in configfiles) or "none"
        raise fmt.ModelFolderError(
            f"{checkpoint}: trained with another configuration than the one given (--configfile "
            f"{given}, over the shipped config/): {'; '.join(differs[:3])}"
            f"{' …' if len(differs) > 3 else ''}; give the run's config files with --configfile")


def model_languages(spec: dict) -> list[str]:
    """The languages a run trained on, in the order its spec names them (c2i, c2c, validation)."""
    langs = [ds["lang"] for ds in spec["c2i"]]
    langs += [ds[side]["lang"] for ds in spec["c2c"] for side in ("a", "b")]
    langs += list(spec.get("validation", {}).get("langs", []))
    return list(dict.fromkeys(langs))


# --------------------------------------------------------------------------------------------
# The pieces of the folder


def save_tensors(path: Path, state: dict) -> dict:
    """Write a state dict as safetensors; its tensor table (for ``config.json``)."""
    from safetensors.torch import save_file

    save_file({name: tensor.detach().cpu().contiguous().clone() for name, tensor in state.items()},
              str(path))
    return fmt.tensor_table(path)


def text_preparation(config: dict, langs: list[str], out: Path) -> dict:
    """Each language's preparation (``config.json``'s ``text.languages``), its model files
    (truecaser, SentencePiece) copied into ``out/text/``."""
    from pseudopairs.data.text_contract import sentencepiece_langs, tokenizer, truecased

    entries = {}
    trained = set(sentencepiece_langs(config))
    for lang in langs:
        spec = tokenizer(config, lang)
        if spec is None:
            raise fmt.ModelFolderError(f"config key 'text.tokenizers.{lang}': no tokenizer for {lang!r}")
        entry: dict[str, Any] = {"tokenizer": spec, "truecaser": None, "tokenizer_model": None,
                                 "moses": {"aggressive_dash_splits": False, "escape": True}
                                 if spec["kind"] == "moses" else None}
        copies = []
        if truecased(config):
            copies.append(("truecaser", layout.truecase_model(lang), f"text/{lang}.truecase"))
        if lang in trained:
            copies.append(("tokenizer_model", layout.sentencepiece_model(lang), f"text/{lang}.sentencepiece"))
        for key, source, name in copies:
            if not Path(source).is_file():
                raise fmt.ModelFolderError(f"{source}: missing (the run's {key.replace('_', ' ')} of {lang})")
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, out / name)
            entry[key] = name
        entries[lang] = entry
    return {"case": config["text"]["case"], "vocabulary": fmt.VOCABULARY, "languages": entries}


def check_preparation(model, spec: dict) -> None:
    """The exported preparation turns the run's raw training captions into the tokens training
    read: the first :data:`CHECKED_CAPTIONS` of each language of each c2i data set."""
    for ds in spec["c2i"]:
        frame = read_captions(ds["captions"])
        if "raw" not in frame.columns:
            continue
        rows = frame[frame["lang"] == ds["lang"]].head(CHECKED_CAPTIONS)
        prepared = model.prepare_texts(rows["raw"].tolist(), lang=ds["lang"])
        for index, ours, theirs in zip(rows.index, prepared, rows["text"]):
            if ours != theirs:
                raise fmt.ModelFolderError(
                    f"{ds['captions']}: row {index} ({ds['lang']}): the configuration's text "
                    f"preparation gives {ours!r}, the run trained on {theirs!r}; give the run's "
                    "config files with --configfile")


def image_network(spec: dict, config: dict, *, image_dim: int, out: Path) -> tuple[dict, dict | None]:
    """``config.json``'s ``image`` entry (the run's feature network, from its feature files'
    record) and the network's tensors written to ``out`` (None for torchvision's published
    weights, which are named with their SHA-256 instead)."""
    from pseudopairs.features import backbones
    from pseudopairs.features.network import build_model, weights_checkpoint_path
    from pseudopairs.features.settings import FeatureSettings
    from pseudopairs.core.io import feature_backbone, load_features

    source = spec["validation"]["features"] if spec.get("validation") else spec["c2i"][0]["features"]
    settings = FeatureSettings.from_dict(config["features"])
    record = feature_backbone(source) or {"arch": settings.arch, "weights": settings.weights,
                                          "resize": settings.resize, "crop": settings.crop}
    _, features = load_features(source)
    arch, weights = record["arch"], record["weights"]
    if backbones.feature_dim(arch) != image_dim:
        raise fmt.ModelFolderError(f"{source}: {arch} features are {backbones.feature_dim(arch)}-d, "
                                   f"the model's image branch takes {image_dim}")
    image = {"arch": arch, "resize": int(record["resize"]), "crop": int(record["crop"]),
             "feature_dim": image_dim, "feature_dtype": str(features.dtype),
             "normalization": {"mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD)},
             "features_of_run": source}
    if backbones.is_enum_weights(weights):
        path = weights_checkpoint_path(weights, arch)
        if not path.is_file():
            raise fmt.ModelFolderError(f"{path}: the torchvision weights {weights} of {arch} the run's "
                                       "features were computed with are not in the torch hub cache")
        image["weights"] = {"kind": "torchvision", "name": weights,
                            "entry": backbones.hub_checkpoint_sketch(arch, weights),
                            "sha256": fmt.file_sha256(path), "file": None}
        return image, None
    network = build_model(weights, seed=settings.seed, arch=arch)
    if weights == "none":
        image["weights"] = {"kind": "none", "name": "none", "seed": settings.seed,
                            "file": fmt.IMAGE_WEIGHTS}
    else:
        image["weights"] = {"kind": "file", "name": weights, "sha256": fmt.file_sha256(weights),
                            "file": fmt.IMAGE_WEIGHTS}
    return image, save_tensors(out / fmt.IMAGE_WEIGHTS, network.state_dict())


def package_version() -> str:
    """The installed package's version (its metadata; the top-level package imports this stage)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pseudopairs")
    except PackageNotFoundError:
        return "unknown"


def package_commit() -> str | None:
    """The git commit of the package's checkout (None outside one)."""
    try:
        result = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


def dataset_summary(config: dict, spec: dict) -> list[dict]:
    """Each training data set (c2i, then c2c pairs): its config entry, captions and images."""
    rows, seen = [], set()
    for ds in spec["c2i"] + [d[side] for d in spec["c2c"] for side in ("a", "b")]:
        if ds["name"] in seen:
            continue
        seen.add(ds["name"])
        frame = read_captions(ds["captions"])
        frame = frame[frame["lang"] == ds["lang"]]
        entry = dict(config.get("datasets", {}).get(ds["name"], {}))
        mined = str(entry.get("pseudopairs", ""))
        sets = config.get("pseudopairs", {})
        rows.append({"name": ds["name"], "lang": ds["lang"], "captions": int(len(frame)),
                     "images": int(frame["image_id"].nunique()), "entry": entry,
                     "pseudopairs": sets.get(mined, sets.get(mined.split(".")[0])) if mined else None,
                     "translation": config.get("translation", {}).get("model")
                     if entry.get("translation") else None})
    return rows


# --------------------------------------------------------------------------------------------
# The export


def export_run(run_dir, out_dir, *, configfiles=()) -> Path:
    """Export the run in ``run_dir`` to ``out_dir`` (written atomically); returns ``out_dir``."""
    import torch

    from pseudopairs.model.checkpoints import load_model
    from pseudopairs.search.model import SearchModel

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    checkpoint, vocab, metrics = (run_dir / "checkpoint.pt", run_dir / fmt.VOCABULARY, run_dir / fmt.METRICS)
    for path in (checkpoint, vocab, metrics):
        if not path.is_file():
            raise fmt.ModelFolderError(f"{path}: missing; not a finished run directory "
                                       "(results/models/EXPERIMENT/seedN, trained and evaluated)")
    model, meta = load_model(checkpoint)
    config = run_config(configfiles)
    results_before = layout.RESULTS
    layout.RESULTS = str(config.get("results") or "results")
    try:
        check_run_config(meta, config, checkpoint=checkpoint, configfiles=configfiles)
        spec = meta["spec"]
        langs = model_languages(spec)
        metrics_data = json.loads(metrics.read_text(encoding="utf-8"))
        with atomic_directory(out_dir) as tmp:
            tensors = {fmt.MODEL_WEIGHTS: save_tensors(tmp / fmt.MODEL_WEIGHTS, model.state_dict())}
            shutil.copyfile(vocab, tmp / fmt.VOCABULARY)
            shutil.copyfile(metrics, tmp / fmt.METRICS)
            text = text_preparation(config, langs, tmp)
            image, image_tensors = image_network(spec, config, image_dim=model.image_dim, out=tmp)
            if image_tensors is not None:
                tensors[fmt.IMAGE_WEIGHTS] = image_tensors
            exported = {
                "format": fmt.FORMAT, "library_name": "pseudopairs", "pseudopairs_version": package_version(),
                "git_commit": package_commit(), "experiment": spec["experiment"], "seed": int(meta["seed"]),
                "languages": langs, "dim": model.joint_dim, "similarity": model.similarity,
                "model": model.config(), "text": text, "image": image, "tensors": tensors,
                "training": {"spec": spec, "settings": meta["settings"],
                             "checkpoint": {k: meta[k] for k in ("update", "val_score", "updates", "stop_reason")
                                            if k in meta}},
            }
            card = model_card(exported, metrics=metrics_data, datasets=dataset_summary(config, spec))
            (tmp / fmt.CARD).write_text(card, encoding="utf-8")
            for path in tmp.rglob("*"):  # safetensors writes 0600; give the folder the usual modes
                path.chmod((0o777 if path.is_dir() else 0o666) & ~_umask())
            exported["files"] = fmt.files_table(tmp)
            fmt.write_config(tmp, exported)
            # the folder as load() reads it: its preparation against the run's own captions
            with torch.random.fork_rng(devices=[]):
                check_preparation(SearchModel(tmp, exported, device=torch.device("cpu")), spec)
    finally:
        layout.RESULTS = results_before
    log.info("exported %s seed %s -> %s", spec["experiment"], meta["seed"], out_dir)
    return out_dir


def _cli_export(args: argparse.Namespace) -> None:
    out = export_run(args.run_dir, args.out_dir, configfiles=args.configfile)
    print(f"exported {args.run_dir} -> {out}")


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "export", _cli_export,
        description="Export a trained run (results/models/EXPERIMENT/seedN, run from the workflow "
                    "directory) as a self-contained model folder: safetensors weights, config.json "
                    "with each file's SHA-256, the text preparation, the image network and a model "
                    "card. Load it with pseudopairs.load(OUT_DIR).")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run: results/models/EXPERIMENT/seedN")
    p.add_argument("out_dir", metavar="OUT_DIR", help="the folder to write (atomically)")
    p.add_argument("--configfile", nargs="+", default=[], metavar="FILE",
                   help="the config files the run was made with, as given to snakemake --configfile "
                        "(layered over the shipped config/; checked against the run)")

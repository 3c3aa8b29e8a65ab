"""The inputs of a training run: the resolved experiment description (``spec``, made by
:func:`pseudopairs.model.contract.training_spec`), its caption sets and image features, the run's
vocabulary, and the size/mtime stamps of every input file that key a resumable state."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from pseudopairs.data.vocab import build_vocabulary
from pseudopairs.core.io import check_feature_files, read_captions
from pseudopairs.model.batches import C2CData, C2IData, CaptionSet, load_caption_set
from pseudopairs.model.text_encoders import load_vocabulary


def _check_table_ref(ref: Any, where: str, *, features_required: bool) -> dict:
    if not isinstance(ref, dict):
        raise ValueError(f"spec: {where} must be an object, got {ref!r}")
    required = ["captions", "lang"] + (["features"] if features_required else [])
    missing = [k for k in required if not ref.get(k)]
    if missing:
        raise ValueError(f"spec: {where} lacks {missing}")
    return dict(ref)


def check_spec(spec: dict) -> dict:
    """Validate the resolved experiment description (see :func:`train`); returns a copy."""
    if not isinstance(spec, dict):
        raise ValueError(f"training spec must be a JSON object, got {type(spec).__name__}")
    spec = copy.deepcopy(spec)
    spec.setdefault("experiment", "experiment")
    spec.setdefault("c2c", [])
    spec.setdefault("init_from", None)
    if not isinstance(spec.get("c2i"), list) or not spec["c2i"]:
        raise ValueError("spec: c2i must be a non-empty list of data sets")
    if not isinstance(spec["c2c"], list):
        raise ValueError("spec: c2c must be a list")
    names: set[str] = set()
    for k, entry in enumerate(spec["c2i"]):
        entry = _check_table_ref(entry, f"c2i[{k}]", features_required=True)
        if not entry.get("name"):
            raise ValueError(f"spec: c2i[{k}] lacks a name")
        spec["c2i"][k] = entry
    for k, entry in enumerate(spec["c2c"]):
        if not isinstance(entry, dict) or not entry.get("name"):
            raise ValueError(f"spec: c2c[{k}] must be an object with a name")
        for side in ("a", "b"):
            entry[side] = _check_table_ref(entry.get(side), f"c2c[{k}].{side}", features_required=False)
            entry[side].setdefault("name", f"{entry['name']}.{side}")
    for entry in spec["c2i"] + spec["c2c"]:
        if entry["name"] in names:
            raise ValueError(f"spec: data set name {entry['name']!r} appears twice")
        names.add(entry["name"])
    val = spec.get("validation")
    if not isinstance(val, dict) or not val.get("captions") or not val.get("features"):
        raise ValueError("spec: validation must give captions and features")
    if not isinstance(val.get("langs"), list) or not val["langs"]:
        raise ValueError("spec: validation.langs must be a non-empty list of languages")
    for key, what in (("lang_captions", "caption tables"), ("lang_features", "feature files")):
        other = val.get(key, {})
        if not isinstance(other, dict) or not all(isinstance(v, str) and v for v in other.values()):
            raise ValueError(f"spec: validation.{key} must map languages to {what}, got {other!r}")
    if spec.get("text_init") is not None and not isinstance(spec["text_init"], str):
        raise ValueError(f"spec: text_init must be a HEM initial state path or absent, got "
                         f"{spec['text_init']!r}")
    if spec["init_from"] is not None and not isinstance(spec["init_from"], str):
        raise ValueError(f"spec: init_from must be a checkpoint path or null, got {spec['init_from']!r}")
    vocab = spec.get("vocab")
    if not isinstance(vocab, dict) or len(vocab) != 1 or not (
            isinstance(vocab.get("path"), str) or isinstance(vocab.get("min_count"), int)):
        raise ValueError("spec: vocab must be {\"path\": vocabulary JSON} (e.g. a fine-tuning "
                         f"source's) or {{\"min_count\": N}} (built from the training captions), got {vocab!r}")
    return spec


def file_stamp(path) -> list:
    p = Path(path)
    st = p.stat()
    return [str(p), st.st_size, st.st_mtime_ns]


def input_stamps(spec: dict) -> list:
    paths = [spec["validation"]["captions"], spec["validation"]["features"],
             *spec["validation"].get("lang_captions", {}).values(),
             *spec["validation"].get("lang_features", {}).values()]
    if "path" in spec["vocab"]:
        paths.append(spec["vocab"]["path"])
    for e in spec["c2i"]:
        paths += [e["captions"], e["features"]]
    for e in spec["c2c"]:
        for side in ("a", "b"):
            paths += [e[side]["captions"]] + ([e[side]["features"]] if e[side].get("features") else [])
    if spec["init_from"]:
        paths.append(spec["init_from"])
    if spec.get("text_init"):
        paths.append(spec["text_init"])
    return [file_stamp(p) for p in paths]


def load_data(spec: dict, vocab, *, feature_cache: dict | None = None):
    """The run's c2i and c2c data sets, validation caption sets and image dimension.
    ``feature_cache`` (path → loaded features) lets the runs of one stack job share arrays."""
    feature_cache = {} if feature_cache is None else feature_cache
    sets: dict[tuple, CaptionSet] = {}

    def caption_set(ref: dict, name: str) -> CaptionSet:
        features = ref.get("features")
        key = (str(Path(ref["captions"]).resolve()), ref["lang"],
               str(Path(features).resolve()) if features else None)
        if key not in sets:
            sets[key] = load_caption_set(name=name, captions=ref["captions"], lang=ref["lang"],
                                         vocab=vocab, features=features, feature_cache=feature_cache)
        return sets[key]

    c2i = [C2IData(caption_set(e, e["name"])) for e in spec["c2i"]]
    c2c = [C2CData(e["name"], caption_set(e["a"], e["a"]["name"]), caption_set(e["b"], e["b"]["name"]))
           for e in spec["c2c"]]
    val = spec["validation"]
    # a language the validation table lacks (paper 004's Fr, Cs) comes from its own table
    # (``lang_captions``: the translation portion's val split), over the same images, or over
    # its own corpus' images (``lang_features``: evaluation.lang_corpora)
    val_sets = [caption_set({"captions": val.get("lang_captions", {}).get(lang, val["captions"]),
                             "features": val.get("lang_features", {}).get(lang, val["features"]),
                             "lang": lang}, f"validation.{lang}")
                for lang in val["langs"]]
    dims = {d.name: d.image_dim for d in c2i}
    dims.update({s.name: int(s.features.shape[1]) for s in val_sets})
    widths = {e["features"]: d.image_dim for e, d in zip(spec["c2i"], c2i)}
    widths[val["features"]] = int(val_sets[0].features.shape[1]) if val_sets else None
    check_feature_files({path: width for path, width in widths.items() if width is not None})
    if len(set(dims.values())) != 1:
        raise ValueError(f"image features of different sizes: {dims}")
    return c2i, c2c, val_sets, next(iter(dims.values()))


def training_image_statistics(c2i) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean and standard deviation over the distinct training images of the c2i
    data sets (each features array counted once, even when several data sets share it)."""
    arrays, seen = [], set()
    for data in c2i:
        features = data.captions.features
        if id(features) not in seen:
            seen.add(id(features))
            arrays.append(np.asarray(features, dtype=np.float64))
    stacked = np.concatenate(arrays, axis=0)
    return stacked.mean(axis=0), stacked.std(axis=0)


def run_vocabulary(spec: dict):
    """The run's vocabulary (paper §3.1; the authors' code builds it per run): the one at
    ``spec["vocab"]["path"]`` (a fine-tuning source's, or the pretrain-hem step's HEM vocabulary:
    :func:`~pseudopairs.model.text_encoders.load_vocabulary` reads either), or one built with
    ``spec["vocab"]["min_count"]`` from the training captions of the run's own data sets — every
    c2i and c2c data set (one language of one caption table), each counted once."""
    if "path" in spec["vocab"]:
        return load_vocabulary(spec["vocab"]["path"])
    refs = [*spec["c2i"], *[e[side] for e in spec["c2c"] for side in ("a", "b")]]
    texts: list[str] = []
    seen: set[tuple[str, str]] = set()
    for ref in refs:
        key = (str(Path(ref["captions"]).resolve()), ref["lang"])
        if key in seen:
            continue
        seen.add(key)
        frame = read_captions(ref["captions"], lang=ref["lang"])
        if "text" not in frame.columns:
            raise ValueError(f"{ref['captions']}: caption table has no prepared 'text' column")
        if (frame["split"] != "train").any():
            raise ValueError(f"{ref['captions']}: the vocabulary is built from training captions only")
        texts.extend(frame["text"].astype(str).tolist())
    return build_vocabulary(texts, min_count=spec["vocab"]["min_count"])

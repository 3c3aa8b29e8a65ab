"""Multi-task training of the ranking model (paper §2, §3.1; DESIGN §1).

Each update draws a task (c2c with probability ``c2c_probability`` when the experiment has c2c
data sets, else c2i), a data set of that task uniformly, and the next batch of that data set's
stream; then one Adam step on the VSE++ loss with gradient-norm clipping. Every
``validate_every`` updates (and at the last update) the model is scored on the validation split:
the sum over ``validation.langs`` of R@1+R@5+R@10 in both directions. Training stops after
``patience`` validations without improvement or at ``max_updates``; the best model is kept.

Files in ``out_dir``:
- ``checkpoint.pt`` — best weights + model dimensions + spec + settings + best score and its
  validation metrics; read it back with :func:`load_model`;
- ``vocab.json`` — the run's vocabulary (:func:`run_vocabulary`: built from the run's own
  training captions, or the fine-tuning source's), which evaluation and mining read;
- ``train_log.csv`` — ``update, task, dataset, loss, val_score`` (one row per update;
  ``val_score`` filled at validation updates).
These three (the rule's outputs) are written atomically once training has FINISHED, checkpoint
first, the log last, so a killed job never leaves files that look complete. While it runs:
- ``last.pt`` — the full training state at the last validation (model, optimizer, stream and
  sampler states, RNG states, counters, log rows, best weights so far). A killed run started again
  with the same arguments resumes from it and ends with the same weights and log as an
  uninterrupted run (on the CPU). :func:`load_model` also reads the best weights out of it.
- ``train_log.partial.csv`` — the log so far, rewritten at every validation (for watching a run).
Both are removed once the run has finished and the two final files exist.

A non-finite loss stops training with a RuntimeError naming the update, task and data set; the
``last.pt`` of the last validation (the last good state, with the best weights so far) and the
partial log are kept as they were.
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from pseudopairs.data import (BatchStream, C2CBatch, C2CData, C2IBatch, C2IData, CaptionSet,
                              TaskSampler, TokenTable, load_caption_set)
from pseudopairs.io import (atomic_path, parse_json_object, read_captions, reading, write_json_atomic,
                            write_text_atomic)
from pseudopairs.model import IMAGE_NORMALIZATIONS, RankingModel, contrastive_loss
from pseudopairs.vocab import Vocabulary, build_vocabulary

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"
TRAIN_LOG = "train_log.csv"
VOCAB = "vocab.json"
LAST = "last.pt"
PARTIAL_LOG = "train_log.partial.csv"
LOG_COLUMNS = ["update", "task", "dataset", "loss", "val_score"]
CHECKPOINT_FORMAT = "pseudopairs.ranking-model/1"
STATE_FORMAT = "pseudopairs.train-state/2"
# Losses stay on the device and are read back (one synchronisation) every this many updates and
# at every validation; a non-finite one is reported with its own update number.
LOSS_READBACK_EVERY = 50
ENCODE_BATCH = 256

# The config's ``training`` section merged with ``model``: key → accepted Python types.
SETTINGS_TYPES: dict[str, tuple[type, ...]] = {
    "batch_size": (int,), "learning_rate": (int, float), "grad_clip": (int, float),
    "margin": (int, float), "max_violation": (bool,), "c2c_probability": (int, float),
    "validate_every": (int,), "patience": (int,), "max_updates": (int,), "device": (str,),
    "threads": (int,), "embedding_dim": (int,), "joint_dim": (int,),
    "image_normalization": (str,),
}
# Settings that do not change the result of a (CPU) run, so a resumed run may differ in them.
_RUN_NEUTRAL_SETTINGS = ("device", "threads")


# --------------------------------------------------------------------------------------------
# Checking the inputs


def check_settings(settings: dict) -> dict:
    """Validate the merged ``training`` + ``model`` settings; returns a normalised copy."""
    if not isinstance(settings, dict):
        raise ValueError(f"training settings must be a JSON object, got {type(settings).__name__}")
    unknown = sorted(set(settings) - set(SETTINGS_TYPES))
    if unknown:
        raise ValueError(f"training settings: unknown key(s) {unknown}; known: {sorted(SETTINGS_TYPES)}")
    missing = sorted(set(SETTINGS_TYPES) - set(settings))
    if missing:
        raise ValueError(f"training settings: missing key(s) {missing}")
    out = {}
    for key, types in SETTINGS_TYPES.items():
        value = settings[key]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise ValueError(f"training settings: {key} must be {'/'.join(t.__name__ for t in types)}, "
                             f"got {value!r}")
        out[key] = float(value) if float in types else value
    positive = ["batch_size", "learning_rate", "validate_every", "patience", "max_updates",
                "embedding_dim", "joint_dim"]
    for key in positive:
        if not out[key] > 0:
            raise ValueError(f"training settings: {key} must be > 0, got {out[key]}")
    for key in ("grad_clip", "margin", "threads"):
        if out[key] < 0:
            raise ValueError(f"training settings: {key} must be ≥ 0, got {out[key]}")
    if not 0.0 <= out["c2c_probability"] <= 1.0:
        raise ValueError(f"training settings: c2c_probability must be in [0, 1], got {out['c2c_probability']}")
    if out["image_normalization"] not in IMAGE_NORMALIZATIONS:
        raise ValueError(f"training settings: image_normalization must be one of "
                         f"{list(IMAGE_NORMALIZATIONS)}, got {out['image_normalization']!r}")
    if out["device"] not in ("auto", "cpu") and not out["device"].startswith("cuda"):
        raise ValueError(f"training settings: device must be auto, cpu or cuda[:N], got {out['device']!r}")
    return out


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
    if spec["init_from"] is not None and not isinstance(spec["init_from"], str):
        raise ValueError(f"spec: init_from must be a checkpoint path or null, got {spec['init_from']!r}")
    vocab = spec.get("vocab")
    if not isinstance(vocab, dict) or len(vocab) != 1 or not (
            isinstance(vocab.get("path"), str) or isinstance(vocab.get("min_count"), int)):
        raise ValueError("spec: vocab must be {\"path\": vocabulary JSON} (e.g. a fine-tuning "
                         f"source's) or {{\"min_count\": N}} (built from the training captions), got {vocab!r}")
    return spec


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"training settings: device {name!r} asked for, but CUDA is not available")
    return torch.device(name)


# --------------------------------------------------------------------------------------------
# One update


def embed_batch(model: RankingModel, batch: C2IBatch | C2CBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-aligned embeddings of a batch: (images, captions) for c2i, (captions a, b) for c2c."""
    if isinstance(batch, C2IBatch):
        return model.encode_images(batch.features), model.encode_captions(batch.tokens, batch.lengths)
    return (model.encode_captions(batch.tokens_a, batch.lengths_a),
            model.encode_captions(batch.tokens_b, batch.lengths_b))


def train_step(model: RankingModel, optimizer: torch.optim.Optimizer, batch: C2IBatch | C2CBatch,
               *, margin: float, max_violation: bool, grad_clip: float) -> torch.Tensor:
    """One optimiser update on one batch (already on the model's device); returns the detached
    loss (not synchronised: reading it is the caller's choice)."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    a, b = embed_batch(model, batch)
    loss = contrastive_loss(a, b, margin=margin, max_violation=max_violation)
    loss.backward()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.detach()


def _stream_seed(seed: int, key: str) -> np.random.Generator:
    """A generator for one stream, from the run seed and the stream's name (order-independent)."""
    return np.random.default_rng([int(seed), zlib.crc32(key.encode("utf-8"))])


class Trainer:
    """The model, its optimizer, one batch stream per data set and the task sampler; :meth:`step`
    is the whole per-update work (task draw, batch assembly, transfer, optimiser step)."""

    def __init__(self, model: RankingModel, *, c2i: Sequence[C2IData], c2c: Sequence[C2CData],
                 settings: dict, seed: int, device: torch.device | str) -> None:
        self.model = model
        self.device = torch.device(device)
        self.settings = settings
        self.optimizer = torch.optim.Adam(model.parameters(), lr=settings["learning_rate"])
        self.data: dict[tuple[str, str], C2IData | C2CData] = {}
        self.streams: dict[tuple[str, str], BatchStream] = {}
        for dataset in [*c2i, *c2c]:
            key = (dataset.task, dataset.name)
            if len(dataset) < 2:
                raise ValueError(f"data set {dataset.name}: {len(dataset)} item(s); a contrastive "
                                 "batch needs at least 2")
            self.data[key] = dataset
            self.streams[key] = BatchStream(len(dataset), settings["batch_size"],
                                            rng=_stream_seed(seed, f"{dataset.task}:{dataset.name}"))
        self.sampler = TaskSampler(c2i=[d.name for d in c2i], c2c=[d.name for d in c2c],
                                   c2c_probability=settings["c2c_probability"],
                                   rng=_stream_seed(seed, "task-sampler"))
        self._non_blocking = self.device.type == "cuda"

    def next_batch(self) -> tuple[str, str, C2IBatch | C2CBatch]:
        task, name = self.sampler.draw()
        key = (task, name)
        return task, name, self.data[key].batch(self.streams[key].next())

    def step(self) -> tuple[str, str, torch.Tensor]:
        task, name, batch = self.next_batch()
        loss = train_step(self.model, self.optimizer,
                          batch.to(self.device, non_blocking=self._non_blocking),
                          margin=self.settings["margin"],
                          max_violation=self.settings["max_violation"],
                          grad_clip=self.settings["grad_clip"])
        return task, name, loss

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "sampler": self.sampler.state_dict(),
                "streams": {f"{t}:{n}": s.state_dict() for (t, n), s in self.streams.items()}}

    def load_state_dict(self, state: dict) -> None:
        streams = state["streams"]
        expected = {f"{t}:{n}" for t, n in self.streams}
        if set(streams) != expected:
            raise ValueError(f"saved streams {sorted(streams)} differ from {sorted(expected)}")
        for (task, name), stream in self.streams.items():
            stream.load_state_dict(streams[f"{task}:{name}"])
        self.sampler.load_state_dict(state["sampler"])
        self.optimizer.load_state_dict(state["optimizer"])


# --------------------------------------------------------------------------------------------
# Encoding and validation


@torch.no_grad()
def encode_token_table(model: RankingModel, table: TokenTable, *, batch_size: int = ENCODE_BATCH,
                       progress: bool = False) -> torch.Tensor:
    """L2-normalised embeddings (float32, CPU) of every sequence of ``table``, in table order.
    Sequences are encoded longest first (less padding) and put back in order."""
    was_training = model.training
    model.eval()
    out = torch.empty(len(table), model.joint_dim, dtype=torch.float32)
    order = np.argsort(-table.lengths, kind="stable")
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc="encode captions", disable=not progress, mininterval=5):
        idx = order[start:start + batch_size]
        tokens, lengths = table.batch(idx)
        out[torch.from_numpy(idx)] = model.encode_captions(tokens, lengths).float().cpu()
    model.train(was_training)
    return out


def encode_captions_texts(model: RankingModel, vocab: Vocabulary, texts: Sequence[str], *,
                          batch_size: int = ENCODE_BATCH, progress: bool = False) -> torch.Tensor:
    """Prepared (space-joined) caption texts → L2-normalised embeddings (float32, CPU)."""
    return encode_token_table(model, TokenTable.encode(vocab, list(texts)), batch_size=batch_size,
                              progress=progress)


@torch.no_grad()
def encode_image_features(model: RankingModel, features, *, batch_size: int = 1024) -> torch.Tensor:
    """Stored image features (numpy or torch, any float dtype) → L2-normalised embeddings
    (float32, CPU)."""
    was_training = model.training
    model.eval()
    features = torch.as_tensor(np.asarray(features) if not torch.is_tensor(features) else features)
    chunks = [model.encode_images(features[s:s + batch_size]).float().cpu()
              for s in range(0, features.shape[0], batch_size)]
    model.train(was_training)
    if not chunks:
        return torch.empty(0, model.joint_dim)
    return torch.cat(chunks)


def validate(model: RankingModel, val_sets: Sequence[CaptionSet]) -> tuple[float, dict]:
    """Score = Σ over the validation languages of rsum (R@1,5,10 in both directions, percent).
    Each language: all its validation captions against all validation images (every image is a
    candidate, as in the test evaluation). Returns ``(score, {lang: metrics})``."""
    from pseudopairs.evaluation import retrieval_metrics

    image_cache: dict[int, torch.Tensor] = {}
    score = 0.0
    metrics: dict[str, dict] = {}
    for caption_set in val_sets:
        key = id(caption_set.features)
        if key not in image_cache:
            image_cache[key] = encode_image_features(model, caption_set.features)
        result = retrieval_metrics(image_embeddings=image_cache[key],
                                   caption_embeddings=encode_token_table(model, caption_set.tokens),
                                   caption_image_index=caption_set.feature_rows)
        result = {k: float(v) for k, v in result.items()}
        metrics[caption_set.lang] = result
        score += result["rsum"]
    return score, metrics


# --------------------------------------------------------------------------------------------
# Checkpoints


def _rng_states() -> dict:
    np_state = np.random.get_state(legacy=False)
    np_state["state"]["key"] = np_state["state"]["key"].tolist()
    states = {"python": random.getstate(), "numpy": np_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict) -> None:
    random.setstate(states["python"])
    np_state = copy.deepcopy(states["numpy"])
    np_state["state"]["key"] = np.asarray(np_state["state"]["key"], dtype=np.uint32)
    np.random.set_state(np_state)
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _save_atomic(path: Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def _cpu_state(model: torch.nn.Module) -> dict:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def load_model(checkpoint_path, device: str | torch.device = "cpu") -> tuple[RankingModel, dict]:
    """Read a ``checkpoint.pt`` written by :func:`train`: returns the model (eval mode, on
    ``device``) and the metadata (dims, spec, settings, seed, best score, update, metrics).
    The ``last.pt`` of an unfinished or failed run is read too: its best weights so far."""
    path = Path(checkpoint_path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such checkpoint")
    with reading(path, "a model checkpoint", fix="delete it and rerun its training job"):
        data = torch.load(path, map_location=device, weights_only=True)
    if isinstance(data, dict) and data.get("format") == STATE_FORMAT:
        progress = data["progress"]
        if progress.get("best_state") is None:
            raise ValueError(f"{path}: training state from before the first validation holds no "
                             "best weights yet")
        data = {**data["model_config"], "model_state": progress["best_state"],
                "best_score": progress["best_score"], "val_score": progress["best_score"],
                "update": progress["best_update"], "val_metrics": progress["best_metrics"],
                "spec": data["run_key"]["spec"], "seed": data["run_key"]["seed"]}
    elif not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not a pseudopairs model checkpoint")
    model = RankingModel(data["vocab_size"], embedding_dim=data["embedding_dim"],
                         joint_dim=data["joint_dim"], image_dim=data["image_dim"],
                         image_normalization=data.get("image_normalization", "raw"))
    model.load_state_dict(data["model_state"])
    model.to(device).eval()
    meta = {k: v for k, v in data.items() if k != "model_state"}
    return model, meta


@dataclass
class _Progress:
    update: int = 0
    best_score: float = -math.inf
    best_update: int = 0
    best_metrics: dict = field(default_factory=dict)
    bad_validations: int = 0
    finished: bool = False
    stop_reason: str = ""
    rows: list = field(default_factory=list)          # [update, task, dataset, loss, val_score]
    validations: list = field(default_factory=list)   # {"update", "score", "metrics"}
    best_state: dict | None = None


def _write_log(path: Path, rows: list) -> None:
    frame = pd.DataFrame(rows, columns=LOG_COLUMNS)
    frame["val_score"] = frame["val_score"].astype("float64")
    write_text_atomic(path, frame.to_csv(index=False))


def _file_stamp(path) -> list:
    p = Path(path)
    st = p.stat()
    return [str(p), st.st_size, st.st_mtime_ns]


# --------------------------------------------------------------------------------------------
# The training run


def _load_data(spec: dict, vocab: Vocabulary):
    feature_cache: dict = {}
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
    val_sets = [caption_set({"captions": val["captions"], "features": val["features"], "lang": lang},
                            f"validation.{lang}") for lang in val["langs"]]
    dims = {d.name: d.image_dim for d in c2i}
    dims.update({s.name: int(s.features.shape[1]) for s in val_sets})
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


def run_vocabulary(spec: dict) -> Vocabulary:
    """The run's vocabulary (paper §3.1; the authors' code builds it per run): the one at
    ``spec["vocab"]["path"]`` (a fine-tuning source's), or one built with
    ``spec["vocab"]["min_count"]`` from the training captions of the run's own data sets — every
    c2i and c2c data set (one language of one caption table), each counted once."""
    if "path" in spec["vocab"]:
        path = Path(spec["vocab"]["path"])
        if not path.exists():
            raise FileNotFoundError(f"{path}: vocabulary not found")
        return Vocabulary.load(path)
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


def _input_stamps(spec: dict) -> list:
    paths = [spec["validation"]["captions"], spec["validation"]["features"]]
    if "path" in spec["vocab"]:
        paths.append(spec["vocab"]["path"])
    for e in spec["c2i"]:
        paths += [e["captions"], e["features"]]
    for e in spec["c2c"]:
        for side in ("a", "b"):
            paths += [e[side]["captions"]] + ([e[side]["features"]] if e[side].get("features") else [])
    if spec["init_from"]:
        paths.append(spec["init_from"])
    return [_file_stamp(p) for p in paths]


def train(*, spec: dict, settings: dict, out_dir, seed: int) -> dict:
    """Train one experiment for one seed; see the module docstring for the files written.

    ``spec``: ``{"experiment": str, "c2i": [{"name", "captions", "features", "lang"}, ...],
    "c2c": [{"name", "a": {...}, "b": {...}}, ...], "validation": {"captions", "features",
    "langs": [...]}, "vocab": {"min_count": N} | {"path": vocabulary JSON}, "init_from": null |
    checkpoint path}`` (``init_from``: start from that model's best weights with a fresh
    optimizer; see :func:`run_vocabulary` for ``vocab``). ``settings``: see :data:`SETTINGS_TYPES`.
    Returns a summary (best score and update, updates run, stop reason, per-language metrics).
    """
    spec = check_spec(spec)
    settings = check_settings(settings)
    seed = int(seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if settings["threads"] > 0:
        torch.set_num_threads(settings["threads"])
    device = resolve_device(settings["device"])
    vocab = run_vocabulary(spec)
    c2i, c2c, val_sets, image_dim = _load_data(spec, vocab)
    if c2c and settings["c2c_probability"] == 0:
        log.warning("%s: c2c data sets given but c2c_probability is 0; they are never used",
                    spec["experiment"])

    seed_everything(seed)
    model = RankingModel(len(vocab), embedding_dim=settings["embedding_dim"],
                         joint_dim=settings["joint_dim"], image_dim=image_dim,
                         image_normalization=settings["image_normalization"])
    if settings["image_normalization"] == "standardize":
        mean, std = training_image_statistics(c2i)
        model.set_image_standardization(mean=mean, std=std)
    if spec["init_from"]:
        source, meta = load_model(spec["init_from"])
        if source.config() != model.config():
            raise ValueError(f"spec: init_from {spec['init_from']} has dims {source.config()}, "
                             f"this run needs {model.config()}")
        model.load_state_dict(source.state_dict())
        log.info("fine-tuning from %s (update %s, score %.2f)", spec["init_from"],
                 meta.get("update"), meta.get("best_score", float("nan")))
    model.to(device)
    trainer = Trainer(model, c2i=c2i, c2c=c2c, settings=settings, seed=seed, device=device)

    run_key = {"spec": spec, "seed": seed, "vocab_size": len(vocab),
               "settings": {k: v for k, v in settings.items() if k not in _RUN_NEUTRAL_SETTINGS},
               "inputs": _input_stamps(spec)}
    progress = _Progress()
    last_path, ckpt_path, log_path = out_dir / LAST, out_dir / CHECKPOINT, out_dir / TRAIN_LOG
    vocab_path = out_dir / VOCAB
    partial_log_path = out_dir / PARTIAL_LOG
    if last_path.exists():
        try:
            state = torch.load(last_path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 — a damaged resume state is recomputed, not fatal
            log.warning("%s is unreadable (%s: %s); starting afresh", last_path, type(err).__name__, err)
            state = {}
        if isinstance(state, dict) and state.get("format") == STATE_FORMAT and state.get("run_key") == run_key:
            model.load_state_dict(state["model"])
            trainer.load_state_dict(state["trainer"])
            _set_rng_states(state["rng"])
            progress = _Progress(**state["progress"])
            log.info("resuming %s seed %d from %s at update %d", spec["experiment"], seed,
                     last_path, progress.update)
        else:
            log.warning("%s was written for other inputs or settings; starting afresh", last_path)
            last_path.unlink()
    # The final files are written when training finishes; any present now are from another run.
    for stale in (ckpt_path, vocab_path, log_path) + (() if last_path.exists() else (partial_log_path,)):
        stale.unlink(missing_ok=True)

    def checkpoint_best() -> None:
        _save_atomic(ckpt_path, {
            "format": CHECKPOINT_FORMAT, "model_state": progress.best_state, **model.config(),
            "spec": spec, "settings": settings, "seed": seed, "best_score": progress.best_score,
            "val_score": progress.best_score,
            "update": progress.best_update, "val_metrics": progress.best_metrics})

    def checkpoint_state() -> None:
        _save_atomic(last_path, {
            "format": STATE_FORMAT, "run_key": run_key, "model_config": model.config(),
            "model": _cpu_state(model),
            "trainer": trainer.state_dict(), "rng": _rng_states(),
            "progress": progress.__dict__})

    pending: list[tuple[int, str, str, torch.Tensor]] = []

    def stop_non_finite(what: str) -> None:
        kept = (f"the state of the last validation (update {progress.validations[-1]['update']}; "
                f"best weights so far from update {progress.best_update}, score "
                f"{progress.best_score:.2f}) is kept in {last_path} "
                "(pseudopairs.training.load_model reads it); rerunning with the same settings "
                "resumes from it and meets the same failure, so change them (e.g. a lower "
                "learning_rate) to start afresh"
                if progress.validations else
                "no validation had been reached, so no checkpoint was written")
        raise RuntimeError(f"{spec['experiment']} seed {seed}: {what}; training stopped; {kept}")

    def read_losses() -> None:
        values = torch.stack([p[3] for p in pending]).float().cpu().tolist()
        for (update, task, name, _), value in zip(pending, values):
            if not math.isfinite(value):
                stop_non_finite(f"non-finite training loss ({value}) at update {update} "
                                f"(task {task}, data set {name})")
            progress.rows.append([update, task, name, value, None])
        pending.clear()

    max_updates, every, patience = settings["max_updates"], settings["validate_every"], settings["patience"]
    bar = tqdm(total=max_updates, initial=progress.update, desc=f"train {spec['experiment']}",
               mininterval=10, unit="upd")
    while not progress.finished:
        task, name, loss = trainer.step()
        progress.update += 1
        bar.update(1)
        pending.append((progress.update, task, name, loss))
        at_validation = progress.update % every == 0 or progress.update >= max_updates
        if at_validation or len(pending) >= LOSS_READBACK_EVERY:
            read_losses()
        if not at_validation:
            continue
        bad = [k for k, v in model.named_parameters() if not bool(torch.isfinite(v).all())]
        if bad:
            stop_non_finite(f"non-finite weights ({', '.join(bad)}) after update {progress.update}")
        score, metrics = validate(model, val_sets)
        progress.rows[-1][4] = float(score)
        progress.validations.append({"update": progress.update, "score": float(score),
                                     "metrics": metrics})
        improved = score > progress.best_score
        if improved:
            progress.best_score, progress.best_update = float(score), progress.update
            progress.best_metrics, progress.best_state = metrics, _cpu_state(model)
            progress.bad_validations = 0
        else:
            progress.bad_validations += 1
        if progress.bad_validations >= patience:
            progress.finished, progress.stop_reason = True, f"no improvement in {patience} validations"
        elif progress.update >= max_updates:
            progress.finished, progress.stop_reason = True, f"reached max_updates={max_updates}"
        log.info("%s update %d: validation score %.2f (best %.2f at update %d)%s",
                 spec["experiment"], progress.update, score, progress.best_score,
                 progress.best_update, f"; stopping: {progress.stop_reason}" if progress.finished else "")
        bar.set_postfix(best=f"{progress.best_score:.1f}", refresh=False)
        _write_log(partial_log_path, progress.rows)
        checkpoint_state()
    bar.close()

    # Finished: write the outputs (checkpoint first, the log last), then drop the resumable state.
    checkpoint_best()
    write_json_atomic(vocab_path, vocab.to_json())
    _write_log(log_path, progress.rows)
    last_path.unlink(missing_ok=True)
    partial_log_path.unlink(missing_ok=True)
    return {"experiment": spec["experiment"], "seed": seed, "best_score": progress.best_score,
            "val_score": progress.best_score,
            "best_update": progress.best_update, "updates": progress.update,
            "stop_reason": progress.stop_reason, "val_metrics": progress.best_metrics}


# --------------------------------------------------------------------------------------------
# CLI


def _cli_train(args: argparse.Namespace) -> None:
    settings = parse_json_object(args.settings, option="--settings")
    if args.threads is not None:  # the cores the scheduler granted (Snakemake's {threads})
        settings["threads"] = args.threads
    summary = train(spec=parse_json_object(args.spec, option="--spec"), settings=settings,
                    out_dir=args.out_dir, seed=args.seed)
    print(f"trained {summary['experiment']} seed {summary['seed']}: best validation score "
          f"{summary['best_score']:.2f} at update {summary['best_update']} of {summary['updates']} "
          f"({summary['stop_reason']}) -> {Path(args.out_dir) / CHECKPOINT}")


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("train", help="train a ranking model for one experiment and seed")
    p.add_argument("--spec", required=True,
                   help="resolved experiment inputs as a JSON object, or @file.json")
    p.add_argument("--settings", required=True,
                   help="the config's training section merged with model, as JSON or @file.json")
    p.add_argument("--out-dir", required=True,
                   help="model directory (checkpoint.pt, vocab.json, train_log.csv)")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (overrides the settings' threads; does not change results)")
    p.set_defaults(func=_cli_train)

"""Training data: caption sets, c2i / c2c data sets, batch streams and the task sampler
(paper §2).

- A *caption set* is one language of a prepared caption table, tokenised with the shared
  vocabulary, each caption tied to its image's row in a features file. Captions whose image is
  not in the features file (an image skipped as unreadable, listed in the skipped report beside
  the features) are dropped, and the drop is logged; an unlisted missing image is an error.
- A *c2i* data set walks the captions of one caption set (item = caption + its image).
- A *c2c* data set walks all cross-language caption pairs of the same image of two caption sets
  (5 En × 5 De captions of an image → 25 pairs).
- :class:`BatchStream` shuffles the items, walks them in batches and reshuffles when exhausted.
  The last partial batch of each pass is DROPPED (every batch has exactly ``batch_size`` items, so
  the max-violation loss always sees the same number of negatives; the items left out in one pass
  are random, so every item is equally likely over passes). A set smaller than the batch size is
  one batch of all its items, reshuffled at each draw.
- :class:`PooledC2CData` joins several c2c data sets into one (``training.c2c_pool``, paper 004).
- :class:`PooledC2IData` joins the c2i data sets of one language into one, and
  :func:`c2i_draws` gives the c2i data a run draws from: its data sets (``training.c2i_sampling:
  dataset``) or one per language (``language``, paper 004 §3).
- :class:`TaskSampler` draws each update's task: c2c with probability ``p`` when the experiment has
  c2c data sets, else c2i; then one data set of that task uniformly.

All randomness comes from seeded ``numpy.random.Generator`` objects whose state can be saved and
restored exactly (``state_dict`` / ``load_state_dict``).
"""

from __future__ import annotations

import logging
import os
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from pseudopairs.core.io import check_caption_texts, check_missing_images, load_features, read_captions
from pseudopairs.data.vocab import PAD_ID, Vocabulary
from pseudopairs.model.text_encoders import language_view

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Token storage and batches


class TokenTable:
    """Token-id sequences stored flat (``ids`` + ``offsets``), padded into batches on demand."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        if self.offsets.ndim != 1 or self.offsets[0] != 0 or self.offsets[-1] != len(self.ids):
            raise ValueError("TokenTable: offsets must start at 0 and end at len(ids)")
        self.lengths = np.diff(self.offsets)

    @classmethod
    def from_lists(cls, sequences: Sequence[Sequence[int]]) -> "TokenTable":
        lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
        offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.fromiter((t for s in sequences for t in s), dtype=np.int64, count=int(offsets[-1]))
        return cls(ids, offsets)

    @classmethod
    def encode(cls, vocab: Vocabulary, texts: Sequence[str]) -> "TokenTable":
        return cls.from_lists([vocab.encode(t) for t in texts])

    def __len__(self) -> int:
        return len(self.lengths)

    def sequence(self, i: int) -> list[int]:
        return self.ids[self.offsets[i]:self.offsets[i + 1]].tolist()

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Padded ``(B, T)`` int64 tokens (PAD = 0) and ``(B,)`` lengths. An empty caption becomes
        a single PAD token of length 1 (the GRU needs ≥ 1 step; PAD embeds to zeros)."""
        indices = np.asarray(indices, dtype=np.int64)
        lengths = self.lengths[indices]
        starts = self.offsets[indices]
        width = max(1, int(lengths.max(initial=0)))
        out = np.full((len(indices), width), PAD_ID, dtype=np.int64)
        total = int(lengths.sum())
        if total:
            rows = np.repeat(np.arange(len(indices)), lengths)
            first = np.repeat(np.cumsum(lengths) - lengths, lengths)
            cols = np.arange(total) - first
            out[rows, cols] = self.ids[np.repeat(starts, lengths) + cols]
        return torch.from_numpy(out), torch.from_numpy(np.maximum(lengths, 1))


@dataclass
class C2IBatch:
    features: torch.Tensor      # (B, image_dim) float32
    tokens: torch.Tensor        # (B, T) int64
    lengths: torch.Tensor       # (B,) int64, on the CPU (pack_padded_sequence wants them there)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "C2IBatch":
        return C2IBatch(self.features.to(device, non_blocking=non_blocking),
                        self.tokens.to(device, non_blocking=non_blocking), self.lengths)


@dataclass
class C2CBatch:
    tokens_a: torch.Tensor
    lengths_a: torch.Tensor
    tokens_b: torch.Tensor
    lengths_b: torch.Tensor

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "C2CBatch":
        return C2CBatch(self.tokens_a.to(device, non_blocking=non_blocking), self.lengths_a,
                        self.tokens_b.to(device, non_blocking=non_blocking), self.lengths_b)


# --------------------------------------------------------------------------------------------
# Caption sets and data sets


@dataclass
class CaptionSet:
    """One language of a caption table, tokenised, captions tied to rows of a features array."""

    name: str
    lang: str
    image_ids: np.ndarray          # (N,) str: image of each caption
    caption_idx: np.ndarray        # (N,) int
    texts: list[str]
    tokens: TokenTable
    feature_rows: np.ndarray | None = None   # (N,) int64 row of each caption's image
    features: np.ndarray | None = None       # (n_images, image_dim), as stored (float16/32)
    feature_ids: list[str] | None = None     # ids of the feature rows

    def __len__(self) -> int:
        return len(self.texts)


def _features_key(path) -> str:
    return os.path.abspath(os.fspath(path))


def load_caption_set(*, name: str, captions, lang: str, vocab: Vocabulary, features=None,
                     feature_cache: dict | None = None) -> CaptionSet:
    """Read one language of a prepared caption table (and the features file of its images).

    Captions whose ``image_id`` is not in the features file are dropped (logged with their count)
    when the feature step listed the image as skipped; any other missing image is an error.
    ``feature_cache`` (path → (ids, array)) lets several caption sets share one loaded file.
    """
    frame = read_captions(captions)
    if "text" not in frame.columns:
        raise ValueError(f"{captions}: caption table has no prepared 'text' column")
    frame = frame[frame["lang"] == lang].reset_index(drop=True)
    if frame.empty:
        raise ValueError(f"{captions}: no captions in language {lang!r} (data set {name})")
    image_ids = frame["image_id"].astype(str).to_numpy()
    feature_rows = feats = feature_ids = None
    if features is not None:
        key = _features_key(features)
        if feature_cache is not None and key in feature_cache:
            feature_ids, feats = feature_cache[key]
        else:
            feature_ids, feats = load_features(features)
            if feature_cache is not None:
                feature_cache[key] = (feature_ids, feats)
        row_of = {img: i for i, img in enumerate(feature_ids)}
        if len(row_of) != len(feature_ids):
            raise ValueError(f"{features}: duplicate image ids in the features file")
        rows = np.fromiter((row_of.get(img, -1) for img in image_ids), dtype=np.int64,
                           count=len(image_ids))
        keep = rows >= 0
        dropped = int((~keep).sum())
        if dropped:
            missing = set(image_ids[~keep].tolist())
            check_missing_images(features, missing, captions=captions)
            log.warning("%s: dropped %d of %d %s captions of %d images skipped by the feature step",
                        name, dropped, len(rows), lang, len(missing))
            frame = frame[keep].reset_index(drop=True)
            image_ids = image_ids[keep]
            rows = rows[keep]
        if len(rows) == 0:
            raise ValueError(f"{captions}: no {lang!r} caption has an image in {features}")
        feature_rows = rows
    texts = frame["text"].astype(str).tolist()
    check_caption_texts(texts, source=str(captions), what=f"{lang} captions (data set {name})")
    return CaptionSet(name=name, lang=lang, image_ids=image_ids,
                      caption_idx=frame["caption_idx"].to_numpy(dtype=np.int64), texts=texts,
                      tokens=TokenTable.encode(language_view(vocab, lang), texts),
                      feature_rows=feature_rows,
                      features=feats, feature_ids=feature_ids)


def c2c_pairs(*, a_image_ids: Sequence[str], b_image_ids: Sequence[str]) -> np.ndarray:
    """All cross-set pairs of captions of the same image: an ``(n_pairs, 2)`` int64 array of
    (index into a, index into b), ordered by a's index then b's index. Images present on one side
    only give no pairs. 5 a-captions × 5 b-captions of an image → 25 pairs."""
    a = pd.DataFrame({"image": np.asarray(a_image_ids, dtype=str),
                      "a": np.arange(len(a_image_ids), dtype=np.int64)})
    b = pd.DataFrame({"image": np.asarray(b_image_ids, dtype=str),
                      "b": np.arange(len(b_image_ids), dtype=np.int64)})
    pairs = a.merge(b, on="image", how="inner")[["a", "b"]].to_numpy(dtype=np.int64)
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    return pairs[order].reshape(-1, 2)


class C2IData:
    """Image–caption pairs of one caption set: item k = caption k and its image."""

    task = "c2i"

    def __init__(self, captions: CaptionSet) -> None:
        if captions.features is None or captions.feature_rows is None:
            raise ValueError(f"data set {captions.name}: c2i needs image features")
        self.name = captions.name
        self.captions = captions

    def __len__(self) -> int:
        return len(self.captions)

    @property
    def image_dim(self) -> int:
        return int(self.captions.features.shape[1])

    def batch(self, indices: np.ndarray) -> C2IBatch:
        rows = self.captions.feature_rows[indices]
        features = torch.from_numpy(np.asarray(self.captions.features[rows], dtype=np.float32))
        tokens, lengths = self.captions.tokens.batch(indices)
        return C2IBatch(features, tokens, lengths)


class C2CData:
    """Caption–caption pairs of the same image in two caption sets (c2c)."""

    task = "c2c"

    def __init__(self, name: str, a: CaptionSet, b: CaptionSet) -> None:
        self.name = name
        self.a, self.b = a, b
        self.pairs = c2c_pairs(a_image_ids=a.image_ids, b_image_ids=b.image_ids)
        if len(self.pairs) == 0:
            raise ValueError(f"c2c data set {name}: {a.name} and {b.name} share no image")
        log.info("c2c %s: %d pairs over %d images", name, len(self.pairs),
                 len(set(a.image_ids[self.pairs[:, 0]].tolist())))

    def __len__(self) -> int:
        return len(self.pairs)

    def batch(self, indices: np.ndarray) -> C2CBatch:
        pairs = self.pairs[indices]
        tokens_a, lengths_a = self.a.tokens.batch(pairs[:, 0])
        tokens_b, lengths_b = self.b.tokens.batch(pairs[:, 1])
        return C2CBatch(tokens_a, lengths_a, tokens_b, lengths_b)


class PooledC2CData:
    """All caption pairs of several c2c data sets as ONE data set (paper 004 §3: "all possible
    <ca, cb> pairs across all languages are treated as a single data set"): item k is pair k of
    the concatenated pair lists, so a batch mixes language pairs and a language pair's share of
    the batches is its share of the pairs (004 Table 7: En–De 25 of an image's 46 pairs).
    ``name`` is the members' names joined by ``+``."""

    task = "c2c"

    def __init__(self, parts: Sequence[C2CData]) -> None:
        if len(parts) < 2:
            raise ValueError("PooledC2CData: a pool needs at least two c2c data sets")
        self.parts = list(parts)
        self.name = "+".join(p.name for p in self.parts)
        self.starts = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def part_of(self, indices: np.ndarray) -> np.ndarray:
        """The member each item belongs to (its position in ``parts``)."""
        return np.searchsorted(self.starts, np.asarray(indices, dtype=np.int64), side="right") - 1

    def batch(self, indices: np.ndarray) -> C2CBatch:
        indices = np.asarray(indices, dtype=np.int64)
        part = self.part_of(indices)
        sides = []
        for side in ("a", "b"):
            pieces = []
            for k in np.unique(part):
                rows = np.flatnonzero(part == k)
                member = self.parts[int(k)]
                captions = member.a if side == "a" else member.b
                pairs = member.pairs[indices[rows] - self.starts[k]]
                pieces.append((rows, *captions.tokens.batch(pairs[:, 0 if side == "a" else 1])))
            width = max(t.shape[1] for _, t, _ in pieces)
            tokens = torch.full((len(indices), width), PAD_ID, dtype=torch.int64)
            lengths = torch.ones(len(indices), dtype=torch.int64)
            for rows, tok, length in pieces:
                at = torch.from_numpy(rows)
                tokens[at, :tok.shape[1]] = tok
                lengths[at] = length
            sides.append((tokens, lengths))
        (tokens_a, lengths_a), (tokens_b, lengths_b) = sides
        return C2CBatch(tokens_a, lengths_a, tokens_b, lengths_b)


class PooledC2IData:
    """All image–caption pairs of several c2i data sets (of one language) as ONE data set: item k
    is pair k of the concatenated data sets, so a batch mixes them in proportion to their sizes.
    Paper 004 §3: "In the c2i case, a language is sampled at random followed by sampling a random
    batch" of it (``training.c2i_sampling: language``). ``name`` is the members' names joined by
    ``+``."""

    task = "c2i"

    def __init__(self, parts: Sequence[C2IData]) -> None:
        if len(parts) < 2:
            raise ValueError("PooledC2IData: a pool needs at least two c2i data sets")
        dims = {p.image_dim for p in parts}
        if len(dims) != 1:
            raise ValueError(f"PooledC2IData: {[p.name for p in parts]} have image features of "
                             f"different sizes {sorted(dims)}")
        self.parts = list(parts)
        self.name = "+".join(p.name for p in self.parts)
        self.starts = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self) -> int:
        return int(self.starts[-1])

    @property
    def image_dim(self) -> int:
        return self.parts[0].image_dim

    def part_of(self, indices: np.ndarray) -> np.ndarray:
        """The member each item belongs to (its position in ``parts``)."""
        return np.searchsorted(self.starts, np.asarray(indices, dtype=np.int64), side="right") - 1

    def batch(self, indices: np.ndarray) -> C2IBatch:
        indices = np.asarray(indices, dtype=np.int64)
        part = self.part_of(indices)
        pieces = [(np.flatnonzero(part == k), self.parts[int(k)].batch(
                   indices[part == k] - self.starts[k])) for k in np.unique(part)]
        width = max(b.tokens.shape[1] for _, b in pieces)
        features = torch.empty((len(indices), self.image_dim), dtype=torch.float32)
        tokens = torch.full((len(indices), width), PAD_ID, dtype=torch.int64)
        lengths = torch.ones(len(indices), dtype=torch.int64)
        for rows, b in pieces:
            at = torch.from_numpy(rows)
            features[at] = b.features
            tokens[at, :b.tokens.shape[1]] = b.tokens
            lengths[at] = b.lengths
        return C2IBatch(features, tokens, lengths)


def c2i_draws(c2i: Sequence[C2IData], *, sampling: str = "dataset") -> list[C2IData | PooledC2IData]:
    """The c2i data an update draws from, uniformly: every data set (``dataset``: paper 000's
    code, one data set uniformly) or, with ``language``, one per language in first-seen order —
    a language with several data sets as their :class:`PooledC2IData` (paper 004 §3: each
    language 1/L of the c2i updates, its data sets in proportion to their sizes). With one data
    set per language both give the same list."""
    if sampling == "dataset":
        return list(c2i)
    if sampling != "language":
        raise ValueError(f"c2i sampling must be 'dataset' or 'language', got {sampling!r}")
    groups: dict[str, list[C2IData]] = {}
    for dataset in c2i:
        groups.setdefault(dataset.captions.lang, []).append(dataset)
    return [members[0] if len(members) == 1 else PooledC2IData(members) for members in groups.values()]


# --------------------------------------------------------------------------------------------
# Sampling


def stream_rng(seed: int, key: str) -> np.random.Generator:
    """A generator for one stream, from the run seed and the stream's name (order-independent)."""
    return np.random.default_rng([int(seed), zlib.crc32(key.encode("utf-8"))])


def _rng_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


def _set_rng_state(rng: np.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state


class BatchStream:
    """Shuffle ``n_items``, walk them in batches of ``batch_size``, reshuffle when exhausted.

    The last partial batch of a pass is dropped (see the module docstring); with fewer items than
    ``batch_size`` every batch is all items in a fresh order.
    """

    def __init__(self, n_items: int, batch_size: int, *, rng: np.random.Generator) -> None:
        if n_items < 1 or batch_size < 1:
            raise ValueError(f"BatchStream: need n_items ≥ 1 and batch_size ≥ 1, got "
                             f"{n_items}, {batch_size}")
        self.n_items = int(n_items)
        self.batch_size = int(batch_size)
        self.rng = rng
        self.epoch = 0
        self.position = 0
        self.permutation = self.rng.permutation(self.n_items)

    @property
    def effective_batch_size(self) -> int:
        return min(self.batch_size, self.n_items)

    def next(self) -> np.ndarray:
        size = self.effective_batch_size
        if self.position + size > self.n_items:
            self.permutation = self.rng.permutation(self.n_items)
            self.position = 0
            self.epoch += 1
        batch = self.permutation[self.position:self.position + size]
        self.position += size
        return batch

    def state_dict(self) -> dict:
        return {"n_items": self.n_items, "batch_size": self.batch_size, "epoch": self.epoch,
                "position": self.position, "permutation": torch.from_numpy(self.permutation.copy()),
                "rng": _rng_state(self.rng)}

    def load_state_dict(self, state: dict) -> None:
        if (state["n_items"], state["batch_size"]) != (self.n_items, self.batch_size):
            raise ValueError(f"BatchStream state is for {state['n_items']} items in batches of "
                             f"{state['batch_size']}, not {self.n_items} / {self.batch_size}")
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self.permutation = np.asarray(state["permutation"], dtype=np.int64).copy()
        _set_rng_state(self.rng, state["rng"])


class TaskSampler:
    """Each update: c2c with probability ``c2c_probability`` if there are c2c data sets, else c2i;
    then one data set of the chosen task uniformly. Returns ``(task, data set name)``."""

    def __init__(self, *, c2i: Sequence[str], c2c: Sequence[str], c2c_probability: float,
                 rng: np.random.Generator) -> None:
        if not c2i:
            raise ValueError("TaskSampler: an experiment needs at least one c2i data set")
        if not 0.0 <= c2c_probability <= 1.0:
            raise ValueError(f"c2c_probability must be in [0, 1], got {c2c_probability}")
        self.c2i = list(c2i)
        self.c2c = list(c2c)
        self.c2c_probability = float(c2c_probability)
        self.rng = rng

    def draw(self, *, c2c_enabled: bool = True) -> tuple[str, str]:
        """The next update's (task, data set); ``c2c_enabled=False`` (during a c2c warm-up) draws
        c2i without consuming the c2c coin."""
        if self.c2c and c2c_enabled and self.rng.random() < self.c2c_probability:
            return "c2c", self.c2c[int(self.rng.integers(len(self.c2c)))]
        return "c2i", self.c2i[int(self.rng.integers(len(self.c2i)))]

    def state_dict(self) -> dict:
        return {"rng": _rng_state(self.rng)}

    def load_state_dict(self, state: dict) -> None:
        _set_rng_state(self.rng, state["rng"])

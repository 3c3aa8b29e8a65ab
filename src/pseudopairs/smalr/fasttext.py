"""FastText word vectors for HEM (paper 002 §3.1 uses monolingual FastText vectors, 300-d).

- :func:`train_fasttext` trains FastText (Bojanowski et al.) on one language's tokenised
  sentences with gensim — an optional dependency (``pip install 'pseudopairs[smalr]'``) —
  seeded, one worker thread (gensim is deterministic then, whatever ``PYTHONHASHSEED``), and
  writes the vectors of its vocabulary (or of the ``words`` asked for: FastText builds a vector
  for an unseen word from its character n-grams) as a ``.vec`` file, atomically;
- :func:`read_vec` reads a ``.vec`` text file — the format fastText publishes (``cc.LANG.300.vec``,
  optionally gzipped): a header line ``COUNT DIM``, then one line per word, the word and DIM
  numbers separated by single spaces; every malformed line is an error naming the file and the
  line; ``words`` keeps only those words (the fast path for a 2M-word published file);
- :func:`write_vec` writes one (atomically; 7 significant digits).
"""

from __future__ import annotations

import gzip
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable, Sequence

import numpy as np

from pseudopairs.core.io import atomic_path

INSTALL_HINT = "pip install 'pseudopairs[smalr]' (gensim)"


class VecFormatError(ValueError):
    """A ``.vec`` file that does not follow the format; the message names the file and line."""


@dataclass(frozen=True)
class WordVectors:
    words: list[str]
    vectors: np.ndarray          # (len(words), dim) float32

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def index(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.words)}


def _open(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def _header(path: Path, raw: bytes) -> tuple[int, int]:
    parts = raw.decode("utf-8", errors="replace").split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts) or int(parts[1]) < 1:
        shown = raw[:60].decode("utf-8", errors="replace").rstrip()
        raise VecFormatError(f"{path}:1: expected the header 'COUNT DIM' (two whole numbers, DIM "
                             f"≥ 1), got {shown!r}")
    return int(parts[0]), int(parts[1])


def _parse_line(path: Path, number: int, raw: bytes, dim: int, keep) -> tuple[str, list | None]:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise VecFormatError(f"{path}:{number}: not UTF-8 text ({err.reason} at byte "
                             f"{err.start})") from None
    parts = line.rstrip("\r\n").rstrip(" ").split(" ")
    word = parts[0]
    if not word:
        raise VecFormatError(f"{path}:{number}: the line does not start with a word")
    if len(parts) != dim + 1:
        raise VecFormatError(f"{path}:{number}: expected the word and {dim} numbers, got "
                             f"{len(parts) - 1} numbers after {word!r}")
    if keep is not None and word not in keep:
        return word, None
    values = []
    for token in parts[1:]:
        try:
            value = float(token)
        except ValueError:
            raise VecFormatError(f"{path}:{number}: {token!r} (a value of {word!r}) is not a "
                                 "number") from None
        if not math.isfinite(value):
            raise VecFormatError(f"{path}:{number}: {word!r} has a non-finite value {token!r}")
        values.append(value)
    return word, values


def read_vec(path: str | os.PathLike, *, words: Iterable[str] | None = None,
             dim: int | None = None) -> WordVectors:
    """Read a ``.vec`` (or ``.vec.gz``) file; ``words``: keep only these (in file order);
    ``dim``: the dimension the file must have. A malformed file raises :class:`VecFormatError`
    naming it and the line; a missing one :class:`FileNotFoundError` naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: word-vector file (.vec) not found")
    keep = None if words is None else set(words)
    found: list[str] = []
    rows: list[list[float]] = []
    first_line: dict[str, int] = {}
    with _open(path) as handle:
        try:
            count, width = _header(path, handle.readline())
            if dim is not None and width != int(dim):
                raise VecFormatError(f"{path}:1: the vectors are {width}-dimensional, expected "
                                     f"{dim}")
            number = 1
            for number, raw in enumerate(handle, start=2):
                if number - 1 > count:
                    raise VecFormatError(f"{path}:{number}: more vectors than the header's "
                                         f"{count}")
                word, values = _parse_line(path, number, raw, width, keep)
                if word in first_line:
                    raise VecFormatError(f"{path}:{number}: {word!r} repeats line "
                                         f"{first_line[word]}")
                first_line[word] = number
                if values is not None:
                    found.append(word)
                    rows.append(values)
        except (OSError, EOFError, gzip.BadGzipFile) as err:
            raise VecFormatError(f"{path}: cannot read it ({type(err).__name__}: {err})") from err
    if number - 1 != count:
        raise VecFormatError(f"{path}:{number}: the file ends after {number - 1} vectors, the "
                             f"header says {count}")
    vectors = np.asarray(rows, dtype=np.float32).reshape(len(rows), width)
    return WordVectors(words=found, vectors=vectors)


def write_vec(path: str | os.PathLike, words: Sequence[str], vectors) -> None:
    """Write ``words`` and their ``vectors`` (N, dim) as a ``.vec`` text file, atomically."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(words) or vectors.shape[1] < 1:
        raise ValueError(f"write_vec: {len(words)} words and vectors {vectors.shape}")
    if len(set(words)) != len(words):
        raise ValueError("write_vec: a word is listed twice")
    for word in words:
        if not word or any(c in word for c in " \n\r"):
            raise ValueError(f"write_vec: {word!r} cannot be written (empty, or holds a space "
                             "or a line break)")
    if not np.isfinite(vectors).all():
        raise ValueError("write_vec: the vectors hold non-finite values")
    with atomic_path(path, suffix=".vec") as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as out:
            out.write(f"{len(words)} {vectors.shape[1]}\n")
            for word, row in zip(words, vectors):
                out.write(word + " " + " ".join(f"{float(v):.7g}" for v in row) + "\n")


def train_fasttext(sentences: Sequence[Sequence[str]], path: str | os.PathLike, *, dim: int,
                   seed: int, epochs: int = 5, min_count: int = 1, window: int = 5,
                   min_n: int = 3, max_n: int = 6, words: Sequence[str] | None = None
                   ) -> WordVectors:
    """Train FastText (CBOW, gensim's default) on ``sentences`` (each a list of
    tokens) with one worker and ``seed``; write the vectors of the model's vocabulary (most
    frequent first), or of ``words`` in that order, to ``path`` (a ``.vec`` file); return them."""
    try:
        from gensim.models import FastText
    except ImportError as err:
        raise ImportError(f"training FastText vectors needs gensim: {INSTALL_HINT}") from err
    sentences = [list(s) for s in sentences]
    if not any(sentences):
        raise ValueError("train_fasttext: no tokens to train on")
    for key, value in (("dim", dim), ("epochs", epochs), ("min_count", min_count),
                       ("window", window), ("min_n", min_n)):
        if int(value) < 1:
            raise ValueError(f"train_fasttext: {key} must be ≥ 1, got {value}")
    model = FastText(vector_size=int(dim), window=int(window), min_count=int(min_count),
                     min_n=int(min_n), max_n=int(max_n), seed=int(seed), workers=1)
    model.build_vocab(corpus_iterable=sentences)
    model.train(corpus_iterable=sentences, total_examples=len(sentences), epochs=int(epochs))
    chosen = list(model.wv.index_to_key) if words is None else list(words)
    vectors = np.stack([model.wv[w] for w in chosen]) if chosen else np.zeros((0, int(dim)))
    write_vec(path, chosen, vectors)
    return WordVectors(words=chosen, vectors=np.asarray(vectors, dtype=np.float32))

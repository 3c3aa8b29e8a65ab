"""``pseudopairs search``: query a search index (:mod:`pseudopairs.search.index`) with sentences in
any of the model's languages, or with an image (image -> captions), by exact search.

Exact search is the project's blocked engine (:mod:`pseudopairs.similarity`, as mining uses it):
the index rows are prepared once (:class:`ExactSearch`: unit rows, and the bf16 or float32 copy
the candidate GEMM reads), then a batch of queries is **one pass** over the index — one GEMM per
block, a :class:`~pseudopairs.similarity.WindowTopK` keeping every row within the proven error
window of each query's k-th best score — and the candidates are rescored in float64
(:func:`~pseudopairs.similarity.cosine64_pairs`) and cut to the top k
(:func:`pseudopairs.mining.search.exact_topk`; ties to the lower row). So the ranking and the
scores are those of the exact float64 cosine, whatever the batch, and many queries (the
service's concurrent requests) cost one pass.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from pseudopairs import commands
from pseudopairs.search.index import CAPTIONS, FORMAT, MANIFEST, SearchError, read_vectors

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 500
MAX_K = 100
MAX_IMAGE_BYTES = 20 << 20


# --------------------------------------------------------------------------------------------
# The exact engine over a prepared index
# --------------------------------------------------------------------------------------------


class ExactSearch:
    """Exact top-k cosine search over ``vectors`` (m × d), prepared once.

    ``path``: ``"auto"`` (the bf16 candidate GEMM where the CPU has a bfloat16 unit:
    :func:`pseudopairs.similarity.bf16_enabled`), ``"bf16"`` or ``"float32"``. Memory: the rows
    themselves (kept, for the float64 rescoring) plus their bf16 (2 bytes a value) or float32 copy.
    """

    def __init__(self, vectors: np.ndarray, *, path: str = "auto", name: str = "index"):
        from pseudopairs.similarity import (bf16_enabled, cpu_threads, database32, database_bf16,
                                            unit_rows)

        if path not in ("auto", "bf16", "float32"):
            raise ValueError(f"path must be auto, bf16 or float32, got {path!r}")
        self.threads = cpu_threads()
        self.d = unit_rows(vectors, name=name, threads=self.threads)
        self.bf16 = bf16_enabled("cpu") if path == "auto" else path == "bf16"
        self.fast = database_bf16(self.d, "cpu") if self.bf16 else database32(self.d, "cpu")

    @property
    def size(self) -> int:
        return self.d.n

    @property
    def dim(self) -> int:
        return self.d.dim

    def _window(self, source) -> float:
        from pseudopairs.similarity import (accumulation_unit, bf16_cosine_error_bound, cosine_error_bound,
                                            matmul_input_unit, max_rounding_error, output_unit)

        if self.bf16:
            q_err = max_rounding_error(source.n, source.block)
            e = bf16_cosine_error_bound(self.dim, q_err, self.fast.err_max, unit=accumulation_unit("cpu"),
                                        out_unit=output_unit("cpu"))
        else:
            e = cosine_error_bound(self.dim, matmul_unit=matmul_input_unit("cpu"))
        return 2.0 * e * (1.0 + 2.0**-20)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` index rows of largest exact cosine with each query row, best first (ties to
        the lower row): (rows int64 (n × k), scores float32 (n × k)); ``k`` is capped at the
        index size."""
        from pseudopairs.mining.search import exact_topk
        from pseudopairs.similarity import (DEFAULT_BLOCK_ELEMENTS, UnitRowSource, WindowTopK, block_shape,
                                            cosine64_pairs, run_pass, unit_rows)

        queries = np.asarray(queries)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries: expected rows of {self.dim} dimensions, got shape {queries.shape}")
        k = min(int(k), self.size)
        q = unit_rows(queries, name="queries", threads=self.threads)
        source = UnitRowSource(q, "cpu")
        rows, cols = block_shape(q.n, self.size, budget=DEFAULT_BLOCK_ELEMENTS)

        def exact_of(lines, others):
            return cosine64_pairs(q, self.d, a_rows=lines, b_rows=others, threads=self.threads)

        top = WindowTopK(axis="rows", n_lines=q.n, k=k, window=self._window(source), exact_of=exact_of)
        run_pass(source, self.fast, [top], rows=rows, cols=cols)
        cand = top.result()
        best = exact_topk(cand, exact_of(cand.line, cand.other), k, q.n)
        scores = exact_of(np.repeat(np.arange(q.n), k), best.ravel()).reshape(q.n, k)
        return best.astype(np.int64), scores.astype(np.float32)


# --------------------------------------------------------------------------------------------
# An index on disk
# --------------------------------------------------------------------------------------------


@dataclass
class SearchIndex:
    """An index folder read back: the manifest, the images (ids, sources, vectors) and, when
    indexed, the captions (image_id, lang, caption) with their vectors."""

    folder: Path
    manifest: dict
    ids: list[str]
    sources: list[str]
    offset: np.ndarray
    size: np.ndarray
    vectors: np.ndarray
    captions: pd.DataFrame | None = None
    caption_vectors: np.ndarray | None = None
    _engines: dict = field(default_factory=dict, repr=False)

    @property
    def root(self) -> Path:
        return Path(self.manifest["root"])

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    def images(self, path: str = "auto") -> ExactSearch:
        """The exact engine over the images (prepared on first use)."""
        if "images" not in self._engines:
            self._engines["images"] = ExactSearch(self.vectors, path=path, name=f"{self.folder}: image vectors")
        return self._engines["images"]

    def caption_engine(self, path: str = "auto") -> ExactSearch:
        if self.captions is None:
            raise SearchError(f"image: the index {self.folder} has no captions (build it with "
                              "pseudopairs index --captions FILE for image -> caption search)")
        if "captions" not in self._engines:
            self._engines["captions"] = ExactSearch(self.caption_vectors, path=path,
                                                    name=f"{self.folder}: caption vectors")
        return self._engines["captions"]

    def row_of(self, image_id: str) -> int:
        if not hasattr(self, "_rows"):
            self._rows = {i: r for r, i in enumerate(self.ids)}
        if image_id not in self._rows:
            raise SearchError(f"id: {image_id!r} is not an image of the index")
        return self._rows[image_id]


def open_index(folder: str | os.PathLike) -> SearchIndex:
    """Read a finished index folder (``manifest.json`` present); one line naming what is wrong."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise SearchError(f"--index {folder}: no {MANIFEST}, not a finished index (run or rerun "
                          "pseudopairs index into it)")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise SearchError(f"{manifest_path}: not valid JSON ({err})") from None
    if manifest.get("format") != FORMAT:
        raise SearchError(f"{manifest_path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    ids, sources, offsets, sizes, parts = [], [], [], [], []
    for part in manifest["parts"]:
        table = pq.read_table(folder / part["file"])
        if table.num_rows != part["rows"]:
            raise SearchError(f"{folder / part['file']}: {table.num_rows} rows, the manifest says {part['rows']}")
        ids += table.column("id").to_pylist()
        sources += table.column("source").to_pylist()
        offsets.append(table.column("offset").to_numpy())
        sizes.append(table.column("size").to_numpy())
        parts.append(read_vectors(table))
        del table
    vectors = np.concatenate(parts) if len(parts) > 1 else parts[0]
    del parts
    if vectors.shape[1] != manifest["dim"]:
        raise SearchError(f"{folder}: vectors of {vectors.shape[1]} dimensions, the manifest says {manifest['dim']}")
    index = SearchIndex(folder, manifest, ids, sources, np.concatenate(offsets), np.concatenate(sizes), vectors)
    if manifest.get("captions"):
        table = pq.read_table(folder / CAPTIONS)
        index.captions = table.select(["image_id", "lang", "caption"]).to_pandas()
        index.caption_vectors = read_vectors(table)
    return index


def check_model(index: SearchIndex, model) -> None:
    """Refuse a model that did not build the index (dimension or model hash), in one line."""
    m = index.manifest
    if int(model.dim) != int(m["dim"]):
        raise SearchError(f"--model {model.folder}: embeds in {model.dim} dimensions, but the index "
                          f"{index.folder} was built with {m['dim']} (by model {m['model_hash'][:12]}); "
                          "rebuild the index with this model")
    if model.model_hash != m["model_hash"]:
        raise SearchError(f"--model {model.folder}: model hash {model.model_hash[:12]} differs from the "
                          f"index's {m['model_hash'][:12]} ({index.folder} was built by {m['model']}); "
                          "rebuild the index with this model")


def load_model_for(index: SearchIndex, model_folder: str | os.PathLike | None = None, *, device: str = "cpu"):
    """The model the index records (or ``model_folder``), checked against the index."""
    from pseudopairs.search.model import load

    folder = model_folder or index.manifest["model"]
    if not Path(folder).is_dir():
        raise SearchError(f"--model {folder}: not found (the index records its model's folder; "
                          "give another copy with --model)")
    model = load(folder, device=device)
    check_model(index, model)
    return model


# --------------------------------------------------------------------------------------------
# Checks of a query, shared with the service
# --------------------------------------------------------------------------------------------


def check_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise SearchError("q: the query is empty")
    if len(text) > MAX_QUERY_CHARS:
        raise SearchError(f"q: the query has {len(text)} characters, more than {MAX_QUERY_CHARS}")
    return text


def check_lang(lang: Any, languages: Sequence[str]) -> str:
    if lang not in languages:
        raise SearchError(f"lang: {lang!r} is not one of the model's languages ({', '.join(languages)})")
    return lang


def check_k(k: Any) -> int:
    try:
        value = int(k)
    except (TypeError, ValueError):
        raise SearchError(f"k: {k!r} is not a whole number") from None
    if str(k).strip() != str(value) and not isinstance(k, int):
        raise SearchError(f"k: {k!r} is not a whole number")
    if not 1 <= value <= MAX_K:
        raise SearchError(f"k: {value} is out of range (1 to {MAX_K})")
    return value


def check_image(data: bytes, *, name: str = "image") -> bytes:
    """``data`` if it decodes as an image, else one line naming ``name``."""
    from PIL import Image

    if not data:
        raise SearchError(f"{name}: empty, not an image")
    if len(data) > MAX_IMAGE_BYTES:
        raise SearchError(f"{name}: {len(data):,} bytes, more than {MAX_IMAGE_BYTES:,}")
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.convert("RGB")
    except Exception:  # noqa: BLE001 - anything PIL cannot decode is not an image
        raise SearchError(f"{name}: not an image (cannot be decoded)") from None
    return data


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


def image_results(index: SearchIndex, rows: np.ndarray, scores: np.ndarray) -> list[dict]:
    return [{"id": index.ids[r], "path": index.sources[r], "score": round(float(s), 6)}
            for r, s in zip(rows.tolist(), scores.tolist())]


def caption_results(index: SearchIndex, rows: np.ndarray, scores: np.ndarray) -> list[dict]:
    cap = index.captions
    return [{"image_id": cap["image_id"].iat[r], "lang": cap["lang"].iat[r], "caption": cap["caption"].iat[r],
             "score": round(float(s), 6)} for r, s in zip(rows.tolist(), scores.tolist())]


def search_texts(index: SearchIndex, model, texts: Sequence[str], *, lang: str, k: int) -> list[list[dict]]:
    """Each text's top-k images (one GEMM pass for all of them)."""
    texts = [check_text(t) for t in texts]
    lang = check_lang(lang, model.languages)
    k = check_k(k)
    rows, scores = index.images().search(model.encode_texts(list(texts), lang=lang), k)
    return [image_results(index, r, s) for r, s in zip(rows, scores)]


def search_image(index: SearchIndex, model, image: bytes | str | os.PathLike, *, k: int) -> list[dict]:
    """The top-k captions of an image (a file or its bytes)."""
    k = check_k(k)
    engine = index.caption_engine()
    if not isinstance(image, bytes):
        path = Path(image)
        if not path.is_file():
            raise SearchError(f"--image {path}: not found")
        image = check_image(path.read_bytes(), name=f"--image {path}")
    else:
        image = check_image(image)
    rows, scores = engine.search(model.encode_images([image]), k)
    return caption_results(index, rows[0], scores[0])


def _table(results: list[dict], columns: Sequence[str]) -> str:
    rows = [["rank", *columns]] + [[str(i + 1), *(f"{r[c]:.4f}" if c == "score" else str(r[c]) for c in columns)]
                                   for i, r in enumerate(results)]
    widths = [max(len(row[j]) for row in rows) for j in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows)


def _cmd_search(args: argparse.Namespace) -> int:
    if bool(args.query) == bool(args.image):
        raise SearchError("give a query sentence (with --lang) or --image PATH, not both or neither")
    index = open_index(args.index)
    model = load_model_for(index, args.model)
    if args.image:
        results: Any = search_image(index, model, args.image, k=args.k)
        out = json.dumps({"results": results}, ensure_ascii=False) if args.json else \
            _table(results, ["score", "image_id", "lang", "caption"])
    else:
        if args.lang is None:
            raise SearchError(f"--lang: the query's language is needed (one of {', '.join(model.languages)})")
        found = search_texts(index, model, args.query, lang=args.lang, k=args.k)
        if args.json:
            out = json.dumps({"results": found[0]} if len(found) == 1 else
                             {"queries": [{"q": q, "results": r} for q, r in zip(args.query, found)]},
                             ensure_ascii=False)
        else:
            out = "\n\n".join((f"{q}\n" if len(found) > 1 else "") + _table(r, ["score", "id", "path"])
                              for q, r in zip(args.query, found))
    sys.stdout.write(out + "\n")
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "search", _cmd_search, description=__doc__.split("\n\n")[0])
    p.add_argument("--index", required=True, help="an index folder (pseudopairs index)")
    p.add_argument("--model", default=None, help="the model folder (default: the one the index records)")
    p.add_argument("--lang", default=None, help="the query's language (one of the model's)")
    p.add_argument("--image", default=None, help="an image: search the index's captions (image -> caption)")
    p.add_argument("-k", type=int, default=10, help=f"how many results (1 to {MAX_K})")
    p.add_argument("--json", action="store_true", help='print {"results": [{"id", "path", "score"}, …]}')
    p.add_argument("query", nargs="*", help="sentences to search for (several: one GEMM pass for all)")

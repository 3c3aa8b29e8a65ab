"""``pseudopairs serve``: a search service and page over an index (FastAPI on uvicorn, bound to
127.0.0.1 unless ``--host`` says otherwise).

- ``GET /search?q=…&lang=fr&k=10`` -> ``{"results": [{"id", "path", "score"}, …]}``: images by a
  sentence in any of the model's languages;
- ``GET /captions?id=IMAGE_ID&k=5`` -> ``{"results": [{"image_id", "lang", "caption", "score"}, …]}``:
  the captions nearest an indexed image (image -> caption search; the page's click);
  ``POST /captions?k=5`` with an image as the body: the same for an image of one's own;
- ``GET /image/{path}`` -> a JPEG thumbnail of an image **of the index's collection** (a path the
  index lists; anything else, ``../`` included, is refused);
- ``GET /`` -> the page (query box, the model's languages, the top images with their scores;
  click an image for its captions); ``GET /api/info``, ``GET /stats``.

Concurrent queries are batched (:class:`Batcher`): one worker thread takes every request waiting,
encodes the sentences of each language in one call and searches them all in **one pass** over
the index (:class:`pseudopairs.search.query.ExactSearch`: one GEMM per block for the whole
batch). Bad input is a 4xx with one line naming the field (``{"error": "k: 0 is out of range (1 to
100)"}``) and the service keeps serving; an index built by another model is refused at start.
"""


import argparse
import asyncio
import io
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import PurePosixPath
from typing import Any

import numpy as np

from pseudopairs import commands
from pseudopairs.search.index import SearchError
from pseudopairs.search.query import (MAX_K, SearchIndex, caption_results, check_image, check_k, check_lang,
                                      check_text, image_results, load_model_for, open_index)

log = logging.getLogger(__name__)

MAX_BATCH = 64
#: how long the batcher waits, after the first query of a batch, for more (seconds): clients
#: answered by the previous batch send their next queries within it, and join this one
MAX_WAIT = 0.005
THUMBNAIL = 320


# --------------------------------------------------------------------------------------------
# The dynamic batcher
# --------------------------------------------------------------------------------------------


@dataclass
class Job:
    """One request: ``kind`` "text" (``text``, ``lang``) -> images, "image" (``image`` bytes) or
    "indexed" (``row`` of an indexed image) -> captions; top ``k``."""

    kind: str
    k: int
    text: str = ""
    lang: str = ""
    image: bytes = b""
    row: int = -1
    future: Future = field(default_factory=Future)


class Batcher:
    """Runs every job waiting as one batch on one worker thread: the texts of a language in one
    ``encode_texts`` call, the uploaded images in one ``encode_images`` call, then one exact
    search of all text queries over the images and one of all image queries over the captions."""

    def __init__(self, index: SearchIndex, model, *, max_batch: int = MAX_BATCH, max_wait: float = MAX_WAIT):
        self.index, self.model, self.max_batch, self.max_wait = index, model, int(max_batch), float(max_wait)
        self._queue: queue.Queue = queue.Queue()
        self.batches = 0
        self.queries = 0
        self.largest = 0
        self._thread = threading.Thread(target=self._run, name="search-batcher", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> Future:
        self._queue.put(job)
        return job.future

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _take(self) -> list[Job] | None:
        first = self._queue.get()
        if first is None:
            return None
        jobs = [first]
        deadline = time.monotonic() + self.max_wait
        while len(jobs) < self.max_batch:
            try:
                job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is None:
                self._queue.put(None)
                break
            jobs.append(job)
        return jobs

    def _run(self) -> None:
        while (jobs := self._take()) is not None:
            self.batches += 1
            self.queries += len(jobs)
            self.largest = max(self.largest, len(jobs))
            try:
                self.run_batch(jobs)
            except Exception as err:  # noqa: BLE001 - a failed batch fails its requests, not the service
                log.exception("search batch failed")
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(err)

    def run_batch(self, jobs: list[Job]) -> None:
        texts = [j for j in jobs if j.kind == "text"]
        images = [j for j in jobs if j.kind != "text"]
        if texts:
            vectors = np.empty((len(texts), self.model.dim), np.float32)
            by_lang: dict[str, list[int]] = {}
            for i, job in enumerate(texts):
                by_lang.setdefault(job.lang, []).append(i)
            for lang, rows in by_lang.items():
                vectors[rows] = self.model.encode_texts([texts[i].text for i in rows], lang=lang)
            self._answer(texts, vectors, self.index.images(), image_results)
        if images:
            uploads = [j for j in images if j.kind == "image"]
            vectors = np.empty((len(images), self.model.dim), np.float32)
            if uploads:
                encoded = self.model.encode_images([j.image for j in uploads])
                vectors[[i for i, j in enumerate(images) if j.kind == "image"]] = encoded
            for i, job in enumerate(images):
                if job.kind == "indexed":
                    vectors[i] = self.index.vectors[job.row]
            self._answer(images, vectors, self.index.caption_engine(), caption_results)

    def _answer(self, jobs: list[Job], vectors: np.ndarray, engine, format_results) -> None:
        k = max(j.k for j in jobs)
        rows, scores = engine.search(vectors, k)
        for job, r, s in zip(jobs, rows, scores):
            job.future.set_result(format_results(self.index, r[: job.k], s[: job.k]))


# --------------------------------------------------------------------------------------------
# Thumbnails: only images the index lists
# --------------------------------------------------------------------------------------------


def collection_row(index: SearchIndex, path: str) -> int:
    """The row of the indexed image whose source is ``path``; one line when ``path`` leaves the
    collection or is not an image of it."""
    parts = PurePosixPath(path).parts
    if path.startswith("/") or "\\" in path or ".." in parts or not parts:
        raise SearchError(f"path: {path!r} is outside the collection")
    if not hasattr(index, "_by_source"):
        index._by_source = {s: r for r, s in enumerate(index.sources)}
    row = index._by_source.get(path)
    if row is None:
        raise LookupError(f"path: {path!r} is not an image of the collection")
    return row


def thumbnail(index: SearchIndex, row: int, *, size: int = THUMBNAIL) -> bytes:
    """A JPEG of at most ``size`` pixels a side of the indexed image ``row``."""
    from PIL import Image

    from pseudopairs.features.network import image_bytes

    source = index.sources[row]
    offset = int(index.offset[row])
    if offset >= 0:
        data = image_bytes(index.root / source.split("[", 1)[0], (offset, int(index.size[row])))
    else:
        data = image_bytes(index.root / source)
    with Image.open(io.BytesIO(data)) as img:
        img = img.convert("RGB")
        img.thumbnail((size, size))
        out = io.BytesIO()
        img.save(out, format="JPEG", quality=85)
    return out.getvalue()


# --------------------------------------------------------------------------------------------
# The application
# --------------------------------------------------------------------------------------------


def page_html() -> str:
    return resources.files("pseudopairs.search").joinpath("page.html").read_text(encoding="utf-8")


def create_app(index: SearchIndex, model, *, max_batch: int = MAX_BATCH):
    """The FastAPI application over ``index`` and its ``model`` (checked by the caller)."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse, Response
    from starlette.exceptions import HTTPException as StarletteHTTPException

    index.images()  # the engines are prepared before the first query
    if index.captions is not None:
        index.caption_engine()
    batcher = Batcher(index, model, max_batch=max_batch)
    thumbs = lru_cache(maxsize=2048)(lambda row: thumbnail(index, row))
    app = FastAPI(title="pseudopairs search", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.batcher = batcher

    @app.exception_handler(SearchError)
    async def bad_input(request: Request, err: SearchError):
        return JSONResponse({"error": str(err)}, status_code=400)

    @app.exception_handler(LookupError)
    async def not_found(request: Request, err: LookupError):
        return JSONResponse({"error": str(err.args[0])}, status_code=404)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException):
        what = "not found" if err.status_code == 404 else str(err.detail).lower()
        return JSONResponse({"error": f"{request.url.path}: {what}"}, status_code=err.status_code)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError):
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "request"
        return JSONResponse({"error": f"{where}: {first.get('msg', 'invalid')}"}, status_code=400)

    async def answer(job: Job) -> Any:
        return await asyncio.wrap_future(batcher.submit(job))

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse(page_html())

    @app.get("/api/info")
    async def info():
        m = index.manifest
        return {"languages": list(model.languages), "images": len(index.ids), "dim": m["dim"],
                "captions": index.captions is not None, "model_hash": m["model_hash"],
                "max_k": MAX_K}

    @app.get("/stats")
    async def stats():
        return {"batches": batcher.batches, "queries": batcher.queries, "largest_batch": batcher.largest}

    @app.get("/search")
    async def search(q: str | None = None, lang: str | None = None, k: str = "10"):
        job = Job("text", check_k(k), text=check_text(q), lang=check_lang(lang, model.languages))
        return {"results": await answer(job)}

    @app.get("/captions")
    async def captions_of_indexed(id: str | None = None, k: str = "5"):
        k_ = check_k(k)
        index.caption_engine()  # no captions: one line, before queueing
        if not id:
            raise SearchError("id: no image id given")
        return {"results": await answer(Job("indexed", k_, row=index.row_of(id)))}

    @app.post("/captions")
    async def captions_of_upload(request: Request, k: str = "5"):
        k_ = check_k(k)
        index.caption_engine()
        data = check_image(await request.body(), name="image")
        return {"results": await answer(Job("image", k_, image=data))}

    @app.get("/image/{path:path}")
    async def image(path: str):
        row = collection_row(index, path)
        data = await asyncio.get_running_loop().run_in_executor(None, thumbs, row)
        return Response(data, media_type="image/jpeg", headers={"Cache-Control": "max-age=3600"})

    return app


def prepare(index_dir, model_folder=None, *, device: str = "cpu"):
    """The index and its checked model."""
    index = open_index(index_dir)
    return index, load_model_for(index, model_folder, device=device)


def serve(index_dir, *, port: int, host: str = "127.0.0.1", model_folder=None, max_batch: int = MAX_BATCH) -> None:
    import uvicorn

    started = time.perf_counter()
    index, model = prepare(index_dir, model_folder)
    app = create_app(index, model, max_batch=max_batch)
    log.info("serving %d images (%s) on http://%s:%d/ (ready in %.1f s)", len(index.ids),
             ", ".join(model.languages), host, port, time.perf_counter() - started)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        app.state.batcher.close()


def _cmd_serve(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise SearchError(f"--port: {args.port} is not a port number")
    serve(args.index, port=args.port, host=args.host, model_folder=args.model, max_batch=args.max_batch)
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "serve", _cmd_serve, description=__doc__.split("\n\n")[0])
    p.add_argument("--index", required=True, help="an index folder (pseudopairs index)")
    p.add_argument("--model", default=None, help="the model folder (default: the one the index records)")
    p.add_argument("--port", type=int, default=8000, help="the port (default 8000)")
    p.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--max-batch", type=int, default=MAX_BATCH, help="most queries searched in one pass")

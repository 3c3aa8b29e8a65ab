"""``pseudopairs serve``: the service through a real uvicorn server on 127.0.0.1 (answers, the
dynamic batcher, each bad input's 4xx line, thumbnails only from the collection), refusing another
model's index at start, and the page in headless Chromium (screenshot: docs/search-screenshot.png)."""

from __future__ import annotations

import io
import json
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from search_fixture import (COLOURS, ColourModel, colour_captions, colour_folder, expected_ranking,
                            png_bytes, pseudopairs_cli, text_vector)
from test_search_export import tiny_export, tiny_run  # noqa: F401  (session fixtures: the tiny demo's model)
from pseudopairs.search.index import build_index
from pseudopairs.search.query import open_index
from pseudopairs.search.service import create_app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(app):
    """``app`` on a real uvicorn server on 127.0.0.1 (a thread); yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        app.state.batcher.close()


@pytest.fixture
def colour_service(tmp_path):
    model = ColourModel(tmp_path / "model", delay=0.05)  # slow enough that concurrent queries queue up
    colour_folder(tmp_path / "images")
    build_index(model=model, images=tmp_path / "images", out=tmp_path / "index",
                captions=colour_captions(tmp_path / "captions.csv"), progress=False)
    with running(create_app(open_index(tmp_path / "index"), model)) as url:
        yield url, model


def test_search_answers_the_exact_ranking_and_concurrent_queries_share_a_pass(colour_service):
    url, model = colour_service
    r = httpx.get(f"{url}/search", params={"q": "rouge", "lang": "fr", "k": 3})
    assert r.status_code == 200
    assert [x["id"] for x in r.json()["results"]] == expected_ranking(text_vector("rouge", "fr"), 3)
    assert set(r.json()["results"][0]) == {"id", "path", "score"}
    queries = [("red", "en"), ("bleu", "fr"), ("green blue", "en"), ("vert", "fr")] * 8  # 32 clients
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda q: httpx.get(f"{url}/search", params={"q": q[0], "lang": q[1], "k": 4},
                                                    timeout=30), queries))
    for (q, lang), a in zip(queries, answers):
        assert a.status_code == 200
        assert [x["id"] for x in a.json()["results"]] == expected_ranking(text_vector(q, lang), 4)
    stats = httpx.get(f"{url}/stats").json()
    assert stats["queries"] == 33 and stats["largest_batch"] > 1 and stats["batches"] < 33
    assert model.text_calls < 33 + 1  # texts encoded a batch (of one language) at a time


def test_an_image_click_gives_its_captions_and_an_upload_too(colour_service):
    url, _ = colour_service
    r = httpx.get(f"{url}/captions", params={"id": "a/red", "k": 2})
    assert [c["caption"] for c in r.json()["results"]] == ["a red square", "un carré rouge"]
    r = httpx.post(f"{url}/captions", params={"k": 1}, content=png_bytes((0, 200, 0)))
    assert r.json()["results"][0] == {"image_id": "b/green", "lang": "en", "caption": "green grass",
                                      "score": r.json()["results"][0]["score"]}


@pytest.mark.parametrize("request_, status, line", [
    (("GET", "/search", {"q": "red", "lang": "de"}), 400, "lang: 'de' is not one of the model's languages (en, fr)"),
    (("GET", "/search", {"q": "", "lang": "en"}), 400, "q: the query is empty"),
    (("GET", "/search", {"lang": "en"}), 400, "q: the query is empty"),
    (("GET", "/search", {"q": "r" * 501, "lang": "en"}), 400, "q: the query has 501 characters, more than 500"),
    (("GET", "/search", {"q": "red", "lang": "en", "k": 0}), 400, "k: 0 is out of range (1 to 100)"),
    (("GET", "/search", {"q": "red", "lang": "en", "k": 101}), 400, "k: 101 is out of range (1 to 100)"),
    (("GET", "/search", {"q": "red", "lang": "en", "k": "ten"}), 400, "k: 'ten' is not a whole number"),
    (("POST", "/captions", b"GIF89a not really"), 400, "image: not an image (cannot be decoded)"),
    (("GET", "/captions", {"id": "nowhere"}), 400, "id: 'nowhere' is not an image of the index"),
    (("GET", "/image/a/%2E%2E/%2E%2E/captions.csv", None), 400, "path: 'a/../../captions.csv' is outside the collection"),
    (("GET", "/image/..%2F..%2Fetc%2Fpasswd", None), 400, "path: '../../etc/passwd' is outside the collection"),
    (("GET", "/image/notes.txt", None), 404, "path: 'notes.txt' is not an image of the collection"),
    (("GET", "/nowhere", None), 404, "/nowhere: not found"),
])
def test_each_bad_input_is_a_4xx_line_naming_the_field_and_the_service_keeps_serving(colour_service, request_,
                                                                                       status, line):
    url, _ = colour_service
    method, path, payload = request_
    with httpx.Client() as client:
        if method == "GET":
            r = client.send(client.build_request("GET", f"{url}{path}", params=payload))
        else:
            r = client.post(f"{url}{path}", content=payload)
    assert (r.status_code, r.json()) == (status, {"error": line})
    ok = httpx.get(f"{url}/search", params={"q": "blue", "lang": "en", "k": 1})
    assert ok.json()["results"][0]["id"] == "blue"


def test_thumbnails_come_from_the_collection(colour_service):
    url, _ = colour_service
    r = httpx.get(f"{url}/image/b/deep/olive.png")
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
    with Image.open(io.BytesIO(r.content)) as img:
        pixel = np.asarray(img.convert("RGB"))[3, 3].astype(int)
    assert np.abs(pixel - np.array(COLOURS["b/deep/olive"])).max() <= 8  # JPEG of the solid colour
    page = httpx.get(f"{url}/")
    assert page.status_code == 200 and "<select id=\"lang\"" in page.text
    assert httpx.get(f"{url}/api/info").json()["languages"] == ["en", "fr"]


# --------------------------------------------------------------------------------------------
# With the tiny demo run's exported model: refused at start, and the page in Chromium


@pytest.fixture(scope="session")
def tiny_index(tiny_run, tiny_export):  # noqa: F811
    work, model_dir = tiny_run, tiny_export
    index_dir = work / "serve_index"
    result = pseudopairs_cli("index", "--model", str(model_dir), "--images", "results/images/m30k/test.parquet",
                             "--captions", "results/captions/raw/m30k/test.parquet", str(index_dir), cwd=work)
    assert result.returncode == 0, result.stderr
    return work, model_dir, index_dir


@pytest.mark.slow
def test_serve_refuses_an_index_built_by_another_model_at_start(tiny_index, tmp_path):
    work, model_dir, index_dir = tiny_index
    other = tmp_path / "other"
    colour_folder(tmp_path / "images")
    build_index(model=ColourModel(tmp_path / "m"), images=tmp_path / "images", out=other, progress=False)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["model"] = str(model_dir)
    (other / "manifest.json").write_text(json.dumps(manifest))
    result = pseudopairs_cli("serve", "--index", str(other), "--port", str(free_port()), timeout=120)
    assert result.returncode == 1
    import pseudopairs

    dim = pseudopairs.load(model_dir).dim
    assert result.stderr.strip().splitlines()[-1] == (
        f"pseudopairs serve: error: --model {model_dir}: embeds in {dim} dimensions, but the index {other} "
        f"was built with 4 (by model c0ffeec0ffee); rebuild the index with this model")


@pytest.mark.slow
def test_the_page_in_headless_chromium(tiny_index, tmp_path):
    from pseudopairs.report.browser import Chromium, find_chromium, non_blank
    from pseudopairs.search.service import prepare

    if find_chromium() is None:
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium)")
    work, model_dir, index_dir = tiny_index
    index, model = prepare(index_dir)
    import pandas as pd

    captions = pd.read_parquet(work / "results/captions/raw/m30k/test.parquet")
    lang = "de" if "de" in model.languages else model.languages[0]
    query = captions[captions["lang"] == lang]["raw"].iloc[0]
    with running(create_app(index, model)) as url, Chromium(width=1280, height=860) as browser:
        browser.open(f"{url}/")
        assert browser.wait_for("document.querySelectorAll('#lang option').length", "the language picker") \
            == len(model.languages)
        options = browser.evaluate("[...document.querySelectorAll('#lang option')].map(o => o.value)")
        assert options == list(model.languages)
        browser.evaluate(f"document.getElementById('q').value = {json.dumps(query)}; "
                         f"document.getElementById('lang').value = {json.dumps(lang)}; "
                         "document.getElementById('k').value = '10'; "
                         "document.querySelector('button').click(); true")
        browser.wait_for("document.querySelectorAll('#results figure').length === 10", "ten results")
        browser.wait_for("[...document.querySelectorAll('#results img')].every(i => i.complete && "
                         "i.naturalWidth > 0)", "the thumbnails")
        shown = browser.evaluate("[...document.querySelectorAll('#results figure')].map(f => f.dataset.id)")
        expected = httpx.get(f"{url}/search", params={"q": query, "lang": lang, "k": 10}).json()["results"]
        assert shown == [r["id"] for r in expected]
        browser.evaluate("document.querySelector('#results figure').click(); true")
        browser.wait_for("document.querySelectorAll('#detail-captions li').length === 8", "the captions")
        assert not browser.evaluate("document.getElementById('detail').hidden")
        shot = Path(os.environ.get("PSEUDOPAIRS_SEARCH_SCREENSHOT") or tmp_path / "search.png")
        browser.screenshot(shot)  # docs/search-screenshot.png: PSEUDOPAIRS_SEARCH_SCREENSHOT=docs/search-screenshot.png
    assert non_blank(shot)

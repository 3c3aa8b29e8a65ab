"""fetch/extract against a real HTTP server on 127.0.0.1 (no external network)."""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pseudopairs import cli
from pseudopairs.data import download
from pseudopairs.data.download import ChecksumError, DownloadError, extract, fetch

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
CONTENT = bytes((i * 7 + i // 251) % 256 for i in range(50_000))
SHA = hashlib.sha256(CONTENT).hexdigest()


class _State:
    def __init__(self):
        self.files: dict[str, bytes] = {"/data.bin": CONTENT}
        self.requests: list[dict] = []
        self.cuts: list[int | None] = []  # per request: close the connection after N body bytes
        self.statuses: list[int] = []  # per request: answer with this error status first
        self.delays: list[float] = []  # per request: hold the answer this long (or until released)
        self.release = threading.Event()  # set when the test ends: held answers go out
        self.ignore_range = False
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_GET(self):
        state: _State = self.server.state
        with state.lock:
            state.requests.append({"path": self.path, "range": self.headers.get("Range")})
            status = state.statuses.pop(0) if state.statuses else None
            cut = state.cuts.pop(0) if state.cuts else None
            delay = state.delays.pop(0) if state.delays else 0.0
        if delay:
            state.release.wait(delay)
        if status is not None:
            self.send_error(status)
            return
        data = state.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        start, code = 0, 200
        header = self.headers.get("Range")
        if header and not state.ignore_range:
            start = int(re.fullmatch(r"bytes=(\d+)-", header).group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            code = 206
        body = data[start:]
        self.send_response(code)
        if code == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body if cut is None else body[:cut])
        self.wfile.flush()


def serve():
    """An HTTP server on 127.0.0.1 (no external network) for the download tests: (base URL, its
    state); the ``server`` fixture here and in other test modules."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.state = _State()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield base, httpd.state
    httpd.state.release.set()
    httpd.shutdown()
    httpd.server_close()


server = pytest.fixture(serve, name="server")


def main(argv):
    """The real ``pseudopairs`` entry point (it imports only the module of the command)."""
    return cli.main(argv)


def _fetch(url, dest, **kw):
    kw.setdefault("backoff", 0.0)
    kw.setdefault("timeout", 5)
    kw.setdefault("progress", False)
    return fetch(url, dest, **kw)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_full_download_with_checksum(server, tmp_path):
    base, state = server
    dest = tmp_path / "sub" / "data.bin"
    assert _fetch(f"{base}/data.bin", dest, sha256=SHA, size=len(CONTENT)) == dest
    assert dest.read_bytes() == CONTENT
    assert _leftovers(dest.parent) == ["data.bin"]
    assert [r["range"] for r in state.requests] == [None]


def test_checksum_mismatch_leaves_nothing(server, tmp_path):
    base, state = server
    state.files["/data.bin"] = CONTENT[:-1] + b"\x00"  # corrupted last byte
    dest = tmp_path / "data.bin"
    with pytest.raises(ChecksumError) as err:
        _fetch(f"{base}/data.bin", dest, sha256=SHA)
    message = str(err.value)
    assert message.startswith(f"{base}/data.bin -> {dest}: SHA-256 mismatch")
    assert SHA in message and hashlib.sha256(state.files["/data.bin"]).hexdigest() in message
    assert _leftovers(tmp_path) == []


def test_interrupted_transfer_resumes_with_range(server, tmp_path):
    base, state = server
    state.cuts = [12_345]
    dest = tmp_path / "data.bin"
    _fetch(f"{base}/data.bin", dest, sha256=SHA)
    assert dest.read_bytes() == CONTENT
    assert [r["range"] for r in state.requests] == [None, "bytes=12345-"]
    assert _leftovers(tmp_path) == ["data.bin"]


def test_server_ignoring_range_restarts_from_zero(server, tmp_path):
    base, state = server
    state.ignore_range = True
    state.cuts = [20_000]
    dest = tmp_path / "data.bin"
    _fetch(f"{base}/data.bin", dest, sha256=SHA)
    assert dest.read_bytes() == CONTENT  # not the first 20,000 bytes twice
    assert [r["range"] for r in state.requests] == [None, "bytes=20000-"]


def test_partial_file_from_earlier_run_is_resumed(server, tmp_path):
    base, state = server
    dest = tmp_path / "data.bin"
    Path(str(dest) + ".part").write_bytes(CONTENT[:4096])
    _fetch(f"{base}/data.bin", dest, sha256=SHA)
    assert dest.read_bytes() == CONTENT
    assert [r["range"] for r in state.requests] == ["bytes=4096-"]


def test_stale_partial_file_with_other_bytes_is_redownloaded(server, tmp_path):
    base, state = server
    dest = tmp_path / "data.bin"
    Path(str(dest) + ".part").write_bytes(b"\xff" * 4096)  # not a prefix of CONTENT
    _fetch(f"{base}/data.bin", dest, sha256=SHA)
    assert dest.read_bytes() == CONTENT
    assert [r["range"] for r in state.requests] == ["bytes=4096-", None]


def test_complete_partial_file_answered_416(server, tmp_path):
    base, state = server
    dest = tmp_path / "data.bin"
    Path(str(dest) + ".part").write_bytes(CONTENT)
    _fetch(f"{base}/data.bin", dest, sha256=SHA)
    assert dest.read_bytes() == CONTENT
    assert [r["range"] for r in state.requests] == [f"bytes={len(CONTENT)}-"]


def test_404_is_a_clear_error_and_leaves_nothing(server, tmp_path):
    base, state = server
    dest = tmp_path / "missing.bin"
    Path(str(dest) + ".part").write_bytes(b"old")
    with pytest.raises(DownloadError, match=r"missing\.bin: HTTP 404"):
        _fetch(f"{base}/missing.bin", dest, retries=3)
    assert len(state.requests) == 1  # a 404 is not retried
    assert _leftovers(tmp_path) == []


def test_retries_exhausted(server, tmp_path, monkeypatch):
    base, state = server
    state.statuses = [503] * 10
    sleeps = []
    monkeypatch.setattr(download.time, "sleep", sleeps.append)
    dest = tmp_path / "data.bin"
    with pytest.raises(DownloadError, match="giving up after 3 attempts; last error: HTTP 503"):
        fetch(f"{base}/data.bin", dest, retries=2, backoff=0.5, timeout=5, progress=False)
    assert len(state.requests) == 3
    assert sleeps == [0.5, 1.0]  # exponential backoff
    assert not dest.exists()


def test_transient_5xx_then_success(server, tmp_path):
    base, state = server
    state.statuses = [500, 502]
    dest = tmp_path / "data.bin"
    _fetch(f"{base}/data.bin", dest, sha256=SHA, retries=2)
    assert dest.read_bytes() == CONTENT
    assert len(state.requests) == 3


def test_timeout_is_retried(server, tmp_path):
    # the first answer is held until the test ends (at most 60 s): that attempt can only end by
    # the client's timeout, however loaded the machine; the retry has 2 s for a local 50 kB answer
    base, state = server
    state.delays = [60.0]
    dest = tmp_path / "data.bin"
    _fetch(f"{base}/data.bin", dest, sha256=SHA, timeout=2.0, retries=1)
    assert dest.read_bytes() == CONTENT
    assert len(state.requests) == 2


def test_size_mismatch(server, tmp_path):
    base, state = server
    dest = tmp_path / "data.bin"
    with pytest.raises(ChecksumError, match=f"expected {len(CONTENT) - 1} bytes, got {len(CONTENT)}"):
        _fetch(f"{base}/data.bin", dest, size=len(CONTENT) - 1)
    assert _leftovers(tmp_path) == []
    # too short: retried (resuming), then reported with the partial file kept for later
    with pytest.raises(DownloadError, match=f"giving up after 2 attempts; last error: got {len(CONTENT)} "
                                            f"of the expected {len(CONTENT) + 1} bytes"):
        _fetch(f"{base}/data.bin", dest, size=len(CONTENT) + 1, retries=1)
    assert [r["range"] for r in state.requests] == [None, None, f"bytes={len(CONTENT)}-"]


def test_existing_destination_with_right_checksum_is_kept(server, tmp_path):
    base, state = server
    dest = tmp_path / "data.bin"
    dest.write_bytes(CONTENT)
    _fetch(f"{base}/data.bin", dest, sha256=SHA)
    assert state.requests == []
    dest.write_bytes(b"wrong")  # wrong checksum: downloaded again
    _fetch(f"{base}/data.bin", dest, sha256=SHA)
    assert dest.read_bytes() == CONTENT and len(state.requests) == 1


def test_local_path_and_file_url(tmp_path):
    source = tmp_path / "mirror" / "a.bin"
    source.parent.mkdir()
    source.write_bytes(CONTENT)
    out = tmp_path / "out"
    _fetch(str(source), out / "a.bin", sha256=SHA)
    _fetch(source.as_uri(), out / "b.bin", sha256=SHA)
    assert (out / "a.bin").read_bytes() == CONTENT == (out / "b.bin").read_bytes()
    with pytest.raises(FileNotFoundError, match="nope.bin"):
        _fetch(str(tmp_path / "nope.bin"), out / "c.bin")
    with pytest.raises(ChecksumError):
        _fetch(str(source), out / "d.bin", sha256="0" * 64)
    assert _leftovers(out) == ["a.bin", "b.bin"]


def test_bad_sha256_argument(tmp_path):
    with pytest.raises(ValueError, match="not a 64-digit hex"):
        _fetch("http://127.0.0.1:9/x", tmp_path / "x", sha256="abc")


def test_cli_download(server, tmp_path, capsys):
    base, _ = server
    dest = tmp_path / "cli.bin"
    args = ["download", "--url", f"{base}/data.bin", "--output", str(dest), "--retries", "1",
            "--backoff", "0"]
    assert main(args + ["--sha256", "1" * 64]) == 1
    assert "SHA-256 mismatch" in capsys.readouterr().err
    assert _leftovers(tmp_path) == []
    assert main(args + ["--sha256", SHA]) == 0
    assert dest.read_bytes() == CONTENT


# --- extract -------------------------------------------------------------------------------


def _make_zip(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _make_tar(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tf.addfile(info)


@pytest.mark.parametrize("suffix", [".zip", ".tar.gz", ".tgz"])
def test_extract_roundtrip(tmp_path, suffix):
    members = {"caption_datasets/dataset_coco.json": b'{"images": []}', "readme.txt": b"hi"}
    archive = tmp_path / f"a{suffix}"
    (_make_zip if suffix == ".zip" else _make_tar)(archive, members)
    out = extract(archive, tmp_path / "out", progress=False)
    assert (out / "caption_datasets" / "dataset_coco.json").read_bytes() == b'{"images": []}'
    assert (out / "readme.txt").read_bytes() == b"hi"
    assert _leftovers(tmp_path) == [f"a{suffix}", "out"]
    with pytest.raises(RuntimeError, match="already exists"):
        extract(archive, tmp_path / "out", progress=False)


@pytest.mark.parametrize("suffix,name", [(".zip", "../evil.txt"), (".tar.gz", "../evil.txt"),
                                         (".zip", "/abs/evil.txt"), (".tgz", "a/../../evil.txt")])
def test_extract_refuses_escaping_paths(tmp_path, suffix, name):
    archive = tmp_path / f"bad{suffix}"
    (_make_zip if suffix == ".zip" else _make_tar)(archive, {"ok.txt": b"1", name: b"2"})
    with pytest.raises(ValueError, match="outside the destination") as err:
        extract(archive, tmp_path / "out", progress=False)
    assert str(archive) in str(err.value)
    assert _leftovers(tmp_path) == [f"bad{suffix}"]  # no destination, no temporary directory
    assert not (tmp_path.parent / "evil.txt").exists()


def test_extract_refuses_symlink_out(tmp_path):
    archive = tmp_path / "link.tar.gz"
    _make_tar(archive, {"ok.txt": b"1"}, links={"sub/link": "../../etc/passwd"})
    with pytest.raises(ValueError, match="outside the destination"):
        extract(archive, tmp_path / "out", progress=False)
    assert _leftovers(tmp_path) == ["link.tar.gz"]


def test_extract_cli_and_bad_archive(tmp_path, capsys):
    archive = tmp_path / "a.zip"
    _make_zip(archive, {"x.txt": b"x"})
    assert main(["extract", "--archive", str(archive), "--output", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "x.txt").read_bytes() == b"x"
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"not a zip")
    assert main(["extract", "--archive", str(broken), "--output", str(tmp_path / "o2")]) == 1
    assert "broken.zip: not a valid zip file" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()


# --- upstream facts ------------------------------------------------------------------------


def test_upstream_urls_and_known_checksums():
    url = download.multi30k_url("task2/raw/test_2016.1.en.gz")
    assert url == ("https://raw.githubusercontent.com/multi30k/dataset/"
                   "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task2/raw/test_2016.1.en.gz")
    assert download.known_checksum(url)["sha256"] == download.multi30k_sha256("task2/raw/test_2016.1.en.gz")
    assert download.multi30k_url("task1/raw/val.de.gz", base="/m") == os.path.join("/m", "task1/raw/val.de.gz")
    with pytest.raises(ValueError):
        download.multi30k_url("../x")
    sources = download.paper_sources()
    assert len(sources["multi30k"]["files"]) == 62
    assert sources["multi30k"]["images"]["task2"] == {"train": 29000, "val": 1014, "test_2016": 1000,
                                                      "test_2017": 1071}
    assert sources["karpathy"]["url"].endswith("caption_datasets.zip")
    assert set(sources["coco_images"]) == {"train2014", "val2014"}
    for item in [sources["karpathy"], *sources["coco_images"].values()]:
        assert re.fullmatch(r"[0-9a-f]{64}", item["sha256"]) and item["size"] > 0


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"real Multi30K mirror not found at {MIRROR}")
def test_recorded_checksums_match_local_mirror(tmp_path):
    table = download.load_checksum_table()["multi30k"]["files"]
    on_disk = sorted(p.relative_to(MIRROR).as_posix() for p in MIRROR.glob("task*/**/*") if p.is_file())
    assert sorted(table) == on_disk
    for rel, entry in table.items():
        data = (MIRROR / rel).read_bytes()
        assert len(data) == entry["size"] and hashlib.sha256(data).hexdigest() == entry["sha256"], rel
    # fetching from the mirror directory verifies against the table
    rel = "task2/image_splits/test_2016_images.txt"
    dest = _fetch(download.multi30k_url(rel, base=MIRROR), tmp_path / rel,
                  sha256=download.multi30k_sha256(rel))
    assert dest.read_bytes() == (MIRROR / rel).read_bytes()

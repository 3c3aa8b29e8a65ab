"""Fetching the real data: resumable, verified downloads and safe archive extraction.

``fetch`` takes an HTTP(S) URL, a ``file://`` URL or a local path (e.g. a file in a local mirror
of the upstream repository), streams it to ``dest + ".part"``, resumes a partial ``.part`` with an
HTTP ``Range`` request, retries transient failures with exponential backoff, verifies SHA-256 and
only then renames the file onto ``dest``. A checksum mismatch or a permanent HTTP error leaves
nothing behind; a transfer that runs out of retries keeps its ``.part`` so the next call resumes.

``extract`` unpacks ``.zip`` / ``.tar.gz`` / ``.tgz`` / ``.tar`` archives into a temporary sibling
directory and renames it onto the destination, refusing members that would land outside it.

The upstream locations and recorded checksums of the paper's data live in ``checksums.json``
beside this module; :func:`paper_sources` describes them.

Downloads use the standard library (urllib) and tqdm.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import logging
import os
import re
import socket
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from tqdm import tqdm

from pseudopairs import commands
from pseudopairs.core.io import atomic_directory

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# Upstream locations (facts used by config/paper.yaml)
# --------------------------------------------------------------------------------------------

MULTI30K_REPO = "https://github.com/multi30k/dataset"
MULTI30K_COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
#: Raw-file base of the Multi30K repository at the pinned commit. Append a path relative to the
#: repository's ``data/`` folder, e.g. ``task2/raw/train.1.en.gz`` or ``task1/image_splits/val.txt``.
MULTI30K_REPO_URL = f"https://raw.githubusercontent.com/multi30k/dataset/{MULTI30K_COMMIT}/data"
KARPATHY_SPLITS_URL = "https://cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip"
KARPATHY_COCO_MEMBER = "dataset_coco.json"
COCO_IMAGES_URLS = {
    "train2014": "http://images.cocodataset.org/zips/train2014.zip",
    "val2014": "http://images.cocodataset.org/zips/val2014.zip",
}

CHUNK_SIZE = 1 << 16
USER_AGENT = "pseudopairs-download/0.1 (+urllib)"


class DownloadError(RuntimeError):
    """A download failed for good (permanent HTTP error, checksum mismatch, retries exhausted)."""


class ChecksumError(DownloadError):
    """The downloaded bytes do not have the expected SHA-256."""


class _Transient(Exception):
    """Internal: a failure worth retrying (connection cut, timeout, 5xx, short body)."""


# --------------------------------------------------------------------------------------------
# Checksum table
# --------------------------------------------------------------------------------------------


def load_checksum_table() -> dict[str, Any]:
    """The recorded checksums (``checksums.json`` shipped with the package)."""
    text = resources.files("pseudopairs.data").joinpath("checksums.json").read_text(encoding="utf-8")
    return json.loads(text)


def multi30k_url(relpath: str, *, base: str | os.PathLike = MULTI30K_REPO_URL) -> str:
    """Location of a Multi30K file given its path relative to the repository's ``data/`` folder.

    ``base`` is the raw-file URL of the pinned commit (default) or a local mirror directory with
    the same layout (``task1/raw/...``); for a directory the result is a local path.
    """
    relpath = str(PurePosixPath(relpath))
    if relpath.startswith("/") or ".." in PurePosixPath(relpath).parts:
        raise ValueError(f"Multi30K path must be relative to data/: {relpath!r}")
    base_str = os.fspath(base)
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", base_str):
        return base_str.rstrip("/") + "/" + relpath
    return str(Path(base_str) / relpath)


def multi30k_sha256(relpath: str) -> str | None:
    """Recorded SHA-256 of a Multi30K file at the pinned commit, or None if not recorded."""
    entry = load_checksum_table()["multi30k"]["files"].get(str(PurePosixPath(relpath)))
    return None if entry is None else entry["sha256"]


def known_checksum(url: str) -> dict[str, Any] | None:
    """The recorded ``{"sha256", "size", ...}`` for an upstream URL, or None.

    Knows the Multi30K files under :data:`MULTI30K_REPO_URL`, the Karpathy splits zip and the COCO
    2014 image zips (whose ``sha256`` may be null when no trustworthy value was found).
    """
    table = load_checksum_table()
    entry = table["urls"].get(url)
    if entry is not None:
        return entry
    prefix = table["multi30k"]["base_url"].rstrip("/") + "/"
    if url.startswith(prefix):
        return table["multi30k"]["files"].get(url[len(prefix):])
    return None


def paper_sources(*, multi30k_base: str | os.PathLike = MULTI30K_REPO_URL) -> dict[str, Any]:
    """Upstream URLs and recorded facts for the real (paper) data.

    Returns ``{"multi30k": {...}, "karpathy": {...}, "coco_images": {...}}``; every downloadable
    item has ``url``, ``sha256`` (None where no trustworthy value is known) and ``size`` (bytes or
    None). ``multi30k["files"]`` maps each path relative to ``data/`` to its item, with ``url``
    built from ``multi30k_base`` (a URL or a local mirror directory).
    """
    table = load_checksum_table()
    m30k = table["multi30k"]
    files = {
        rel: {"url": multi30k_url(rel, base=multi30k_base), "sha256": e["sha256"], "size": e["size"]}
        for rel, e in sorted(m30k["files"].items())
    }
    karpathy = dict(table["urls"][KARPATHY_SPLITS_URL], url=KARPATHY_SPLITS_URL,
                    member=KARPATHY_COCO_MEMBER)
    coco = {name: dict(table["urls"][url], url=url) for name, url in COCO_IMAGES_URLS.items()}
    return {
        "multi30k": {
            "repository": MULTI30K_REPO,
            "commit": MULTI30K_COMMIT,
            "base": os.fspath(multi30k_base),
            "files": files,
            # images per split (line counts of the image lists), checked by the readers
            "images": m30k["images"],
        },
        "karpathy": karpathy,
        "coco_images": coco,
    }


# --------------------------------------------------------------------------------------------
# fetch
# --------------------------------------------------------------------------------------------


def sha256_file(path: str | os.PathLike, *, progress: bool = False) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    path = Path(path)
    digest = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as handle, tqdm(
        total=size, unit="B", unit_scale=True, desc=f"sha256 {path.name}", disable=not progress,
        leave=False,
    ) as bar:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def _local_source(url: str) -> Path | None:
    """The local path for ``file://`` URLs and plain paths; None for network URLs."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"{url}: file:// URLs must name a local file")
        return Path(urllib.request.url2pathname(parsed.path))
    if parsed.scheme in ("http", "https"):
        return None
    if parsed.scheme and len(parsed.scheme) > 1 and "://" in url:
        raise ValueError(f"{url}: unsupported URL scheme {parsed.scheme!r} (use http, https, file or a path)")
    return Path(url)


def _remove(*paths: Path) -> None:
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _content_range_start(value: str | None) -> int | None:
    match = re.match(r"^\s*bytes\s+(\d+)-\d+/(\d+|\*)\s*$", value or "")
    return int(match.group(1)) if match else None


def _copy_local(source: Path, part: Path, *, progress: bool) -> None:
    if not source.is_file():
        raise FileNotFoundError(f"{source}: no such file to fetch")
    size = source.stat().st_size
    with open(source, "rb") as src, open(part, "wb") as out, tqdm(
        total=size, unit="B", unit_scale=True, desc=source.name, disable=not progress
    ) as bar:
        for chunk in iter(lambda: src.read(CHUNK_SIZE), b""):
            out.write(chunk)
            bar.update(len(chunk))


def _http_attempt(url: str, part: Path, *, timeout: float, progress: bool, state: dict) -> None:
    """One HTTP transfer into ``part``, resuming from its current size when possible.

    Raises :class:`_Transient` for failures worth retrying and :class:`DownloadError` for
    permanent ones; returns normally once the body is complete (as far as the server said).
    Sets ``state["restarted"] = True`` whenever ``part`` is rewritten from byte zero.
    """
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if offset > 0:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        err.close()
        if err.code == 416 and offset > 0:
            # Range not satisfiable: the .part is already complete (or longer than the file).
            total = (err.headers.get("Content-Range") or "").rpartition("/")[2]
            if total.isdigit() and int(total) == offset:
                return
            _remove(part)
            state["restarted"] = True
            raise _Transient(f"HTTP 416 for a resume at byte {offset}; restarting from zero") from err
        if err.code >= 500 or err.code in (408, 429):
            raise _Transient(f"HTTP {err.code} {err.reason}") from err
        raise DownloadError(f"{url}: HTTP {err.code} {err.reason}") from err
    except urllib.error.URLError as err:
        if isinstance(err.reason, (OSError, socket.timeout)):
            raise _Transient(f"connection failed: {err.reason}") from err
        raise DownloadError(f"{url}: {err.reason}") from err
    except (OSError, http.client.HTTPException) as err:
        raise _Transient(f"connection failed: {err!r}") from err

    with response:
        status = response.status
        length = response.headers.get("Content-Length")
        length = int(length) if length and length.isdigit() else None
        if offset > 0 and status == 206:
            start = _content_range_start(response.headers.get("Content-Range"))
            if start != offset:
                _remove(part)
                state["restarted"] = True
                raise _Transient(
                    f"server answered a resume at byte {offset} with Content-Range "
                    f"{response.headers.get('Content-Range')!r}; restarting from zero"
                )
            mode = "ab"
        elif status == 200:
            if offset > 0:
                log.info("%s: server ignored the Range request; restarting from zero", url)
            offset = 0
            mode = "wb"
            state["restarted"] = True
        else:
            raise DownloadError(f"{url}: unexpected HTTP status {status}")

        total = None if length is None else offset + length
        received = 0
        with open(part, mode) as out, tqdm(
            total=total, initial=offset, unit="B", unit_scale=True,
            desc=Path(urllib.parse.urlparse(url).path).name or url, disable=not progress,
        ) as bar:
            while True:
                try:
                    chunk = response.read(CHUNK_SIZE)
                except (OSError, http.client.HTTPException) as err:
                    raise _Transient(
                        f"transfer interrupted after {offset + received} bytes: {err!r}"
                    ) from err
                if not chunk:
                    break
                out.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
        if length is not None and received < length:
            raise _Transient(f"connection closed after {offset + received} of {total} bytes")


def fetch(
    url: str,
    dest: str | os.PathLike,
    *,
    sha256: str | None = None,
    size: int | None = None,
    retries: int = 3,
    timeout: float = 60,
    backoff: float = 1.0,
    progress: bool = True,
) -> Path:
    """Download ``url`` to ``dest`` atomically and return ``dest``.

    ``url``: ``http(s)://...``, ``file://...`` or a local path. Data goes to ``dest + ".part"``
    first; an existing ``.part`` is resumed with an HTTP ``Range`` request (a server that answers
    200 instead of 206 restarts the file from zero). Connection errors, timeouts, short bodies and
    HTTP 5xx/408/429 are retried up to ``retries`` times, sleeping ``backoff * 2**k`` seconds
    between attempts. If ``sha256`` (hex) and/or ``size`` (bytes) are given they are checked
    before the rename; on a mismatch neither ``.part`` nor ``dest`` is kept and
    :class:`ChecksumError` names the URL, the file and both digests. An existing ``dest`` that
    already has the expected checksum is kept without downloading; one that does not is removed.
    """
    dest = Path(dest)
    part = Path(os.fspath(dest) + ".part")
    expected = sha256.strip().lower() if sha256 else None
    if expected is not None and not re.fullmatch(r"[0-9a-f]{64}", expected):
        raise ValueError(f"--sha256 for {url}: {sha256!r} is not a 64-digit hex SHA-256")
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")

    if dest.exists():
        if expected is None:
            log.info("%s exists and no checksum was given; keeping it", dest)
            return dest
        if sha256_file(dest, progress=progress) == expected:
            log.info("%s exists with the expected SHA-256; nothing to download", dest)
            return dest
        log.warning("%s exists but its SHA-256 differs from the expected one; removing it", dest)
        _remove(dest)

    dest.parent.mkdir(parents=True, exist_ok=True)
    local = _local_source(url)
    # does .part hold bytes from an earlier call (which might belong to other content)?
    state = {"restarted": not (part.exists() and local is None)}
    last_error: str | None = None
    attempts = retries + 1
    for attempt in range(1, attempts + 1):
        try:
            if local is not None:
                _copy_local(local, part, progress=progress)
            else:
                _http_attempt(url, part, timeout=timeout, progress=progress, state=state)
            if size is not None and part.exists() and part.stat().st_size < size:
                raise _Transient(f"got {part.stat().st_size} of the expected {size} bytes")
        except _Transient as err:
            last_error = str(err)
            if attempt < attempts:
                delay = backoff * (2 ** (attempt - 1))
                log.warning("%s: attempt %d/%d failed (%s); retrying in %.1fs",
                            url, attempt, attempts, err, delay)
                time.sleep(delay)
                continue
            raise DownloadError(
                f"{url}: giving up after {attempts} attempts; last error: {last_error}"
                + (f" (partial data kept in {part} for a later resume)" if part.exists() else "")
            ) from err
        except (DownloadError, OSError, ValueError):
            # permanent failure (404, bad scheme, missing local file): leave nothing behind
            _remove(part)
            raise

        problem = _verify(part, url=url, dest=dest, sha256=expected, size=size, progress=progress)
        if problem is None:
            os.replace(part, dest)
            return dest
        _remove(part)
        if not state["restarted"]:
            # The .part from an earlier run may have held other bytes: one clean retry from zero.
            log.warning("%s: %s after resuming an old partial file; downloading again from zero",
                        url, problem)
            return fetch(url, dest, sha256=sha256, size=size, retries=retries, timeout=timeout,
                         backoff=backoff, progress=progress)
        raise ChecksumError(problem)
    raise AssertionError("unreachable")  # pragma: no cover


def _verify(part: Path, *, url: str, dest: Path, sha256: str | None, size: int | None,
            progress: bool) -> str | None:
    """None if ``part`` has the expected size and digest, else a message naming both values."""
    actual_size = part.stat().st_size
    if size is not None and actual_size != size:
        return (f"{url} -> {dest}: size mismatch: expected {size} bytes, got {actual_size} "
                "(nothing kept)")
    if sha256 is not None:
        actual = sha256_file(part, progress=progress)
        if actual != sha256:
            return f"{url} -> {dest}: SHA-256 mismatch: expected {sha256}, got {actual} (nothing kept)"
    return None


# --------------------------------------------------------------------------------------------
# extract
# --------------------------------------------------------------------------------------------

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")


def _archive_kind(archive: Path) -> str:
    name = archive.name.lower()
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix):
            return "zip" if suffix == ".zip" else "tar"
    raise ValueError(f"{archive}: unsupported archive type (expected one of {', '.join(ARCHIVE_SUFFIXES)})")


def _check_member(archive: Path, name: str) -> None:
    """Refuse a member name that is absolute or climbs out of the destination."""
    posix = name.replace("\\", "/")
    pure = PurePosixPath(posix)
    if pure.is_absolute() or re.match(r"^[a-zA-Z]:", posix) or ".." in pure.parts:
        raise ValueError(f"{archive}: member {name!r} would be extracted outside the destination")


def extract(archive: str | os.PathLike, dest_dir: str | os.PathLike, *, overwrite: bool = False,
            progress: bool = True) -> Path:
    """Unpack ``archive`` (.zip, .tar.gz, .tgz, .tar) into ``dest_dir`` atomically.

    Members are extracted into a temporary directory beside ``dest_dir`` which is renamed onto it
    only when everything succeeded. Absolute member paths, ``..`` components and tar links
    pointing outside the destination are refused with :class:`ValueError` (nothing is created).
    An existing ``dest_dir`` is an error unless ``overwrite`` (then it is replaced).
    """
    archive = Path(archive)
    dest_dir = Path(dest_dir)
    if not archive.is_file():
        raise FileNotFoundError(f"{archive}: no such archive")
    kind = _archive_kind(archive)
    if dest_dir.exists() and not overwrite:
        raise RuntimeError(f"{dest_dir}: already exists (remove it or pass overwrite)")
    with atomic_directory(dest_dir) as tmp:
        if kind == "zip":
            try:
                with zipfile.ZipFile(archive) as zf:
                    members = zf.infolist()
                    for info in members:
                        _check_member(archive, info.filename)
                    for info in tqdm(members, desc=f"extract {archive.name}", unit="file",
                                     disable=not progress):
                        zf.extract(info, tmp)
            except zipfile.BadZipFile as err:
                raise ValueError(f"{archive}: not a valid zip file ({err})") from err
        else:
            try:
                with tarfile.open(archive, "r:*") as tf:
                    members = tf.getmembers()
                    for member in members:
                        _check_member(archive, member.name)
                        if member.issym() or member.islnk():
                            target = PurePosixPath(member.name).parent / member.linkname \
                                if member.issym() else PurePosixPath(member.linkname)
                            _check_member(archive, str(target))
                        elif not (member.isfile() or member.isdir()):
                            raise ValueError(f"{archive}: member {member.name!r} is not a regular "
                                             "file or directory")
                    for member in tqdm(members, desc=f"extract {archive.name}", unit="file",
                                       disable=not progress):
                        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4
                            tf.extract(member, tmp, filter="data")
                        else:  # members were checked above
                            tf.extract(member, tmp)
            except tarfile.TarError as err:
                raise ValueError(f"{archive}: not a valid tar archive ({err})") from err
    return dest_dir


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def _cmd_download(args) -> int:
    sha = args.sha256
    size = args.size
    if sha is None and not args.no_verify:
        known = known_checksum(args.url)
        if known is not None:
            sha = known.get("sha256")
            size = size if size is not None else known.get("size")
            log.info("verifying %s against the recorded checksum %s", args.url, sha)
    fetch(args.url, args.output, sha256=sha, size=size, retries=args.retries, timeout=args.timeout,
          backoff=args.backoff)
    return 0


def _cmd_extract(args) -> int:
    extract(args.archive, args.output, overwrite=args.overwrite)
    return 0


def register_cli(subparsers) -> None:
    p = commands.add_command(subparsers, "download", _cmd_download,
    )
    p.add_argument("--url", required=True, help="http(s) URL, file:// URL or local path")
    p.add_argument("--output", required=True, help="destination file")
    p.add_argument("--sha256", default=None,
                   help="expected SHA-256 (hex); default: the recorded one for known upstream URLs")
    p.add_argument("--size", type=int, default=None, help="expected size in bytes")
    p.add_argument("--no-verify", action="store_true",
                   help="do not look up a recorded checksum when --sha256 is not given")
    p.add_argument("--retries", type=int, default=3, help="retries after the first attempt (default 3)")
    p.add_argument("--timeout", type=float, default=60.0, help="socket timeout in seconds (default 60)")
    p.add_argument("--backoff", type=float, default=1.0,
                   help="first retry delay in seconds, doubled each retry (default 1)")

    p = commands.add_command(subparsers, "extract", _cmd_extract)
    p.add_argument("--archive", required=True)
    p.add_argument("--output", required=True, help="destination directory (must not exist)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing destination directory")

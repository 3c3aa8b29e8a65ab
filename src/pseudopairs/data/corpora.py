"""Corpora as config data: the registry of corpus kinds (:data:`CORPUS_KINDS`) and the config's
``corpora`` section, which declares each corpus with a ``kind`` and that kind's keys.

A data set names its corpus (``datasets.NAME.corpus``); the corpus' declaration says how its
caption tables and image lists are made. The kinds, declared once here and read by the config
checks, the schema, the docs (``docs/architecture.md``, "How to add a corpus") and the tests:

- ``imagefolder`` -- the Hugging Face ImageFolder convention: a folder of images and a
  ``metadata.csv``, ``.jsonl`` or ``.parquet`` with ``file_name`` and a caption column, one row per
  caption (:mod:`pseudopairs.data.generic`);
- ``webdataset`` -- tar shards as img2dataset writes them (``{key}.jpg|png|webp``, ``{key}.txt``,
  ``{key}.json``), named by a brace pattern or a folder (:mod:`pseudopairs.data.generic`);
- ``world`` -- a corpus of the generated demo world (rule ``world``);
- ``multi30k_task2``, ``multi30k_task1``, ``coco_karpathy`` -- the paper's corpora, read from the
  downloads of ``paper_data`` (:mod:`pseudopairs.data.readers`).

Images a user keeps outside the workflow (an ``imagefolder`` or ``webdataset`` folder, the
Flickr30K images of ``multi30k_task2``) are *external*: their image lists hold paths relative to
the corpus' image folder (:func:`image_root`), and the files enter the DAG through manifests keyed
by content (:mod:`pseudopairs.data.manifest`), never through the folder's path -- so the same
files through another path (a symlink, a copy on scratch) rerun nothing.

This module imports nothing heavy: the workflow reads it when it parses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pseudopairs.core import layout
from pseudopairs.core.registry import Registry
from pseudopairs.core.settings import Settings, SettingsError, setting

SPLITS = ("train", "val", "test")
LANG = {"type": "string", "pattern": "^[a-z]{2}$"}
SPLIT_SIZES = {"additionalProperties": False, "required": ["val", "test"],
               "properties": {s: {"type": "integer", "minimum": 1} for s in ("val", "test")}}
#: The corpora of the demo world (pseudopairs.world.generate writes their tables)
WORLD_CORPORA = {"m30k": True, "m30k_task1": False, "coco": True}   # name -> has images of its own
#: The demo world exported in users' formats (rule export_world_corpus, pseudopairs.world.export):
#: format -> the corpus whose captions (in ``lang``) and the corpus whose images
WORLD_EXPORTS = {
    "imagefolder": {"captions": "coco", "images": "coco", "lang": "en"},      # the large English set
    "webdataset": {"captions": "m30k_task1", "images": "m30k", "lang": "fr"},  # a small French set
}
#: ... and its parallel text in the languages of the two (rule export_world_parallel): a user's
#: own parallel text for a translation model of their own
WORLD_EXPORT_PARALLEL = ("en", "fr")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
METADATA_NAMES = ("metadata.csv", "metadata.jsonl", "metadata.parquet")


# --------------------------------------------------------------------------------------------
# The kinds' keys
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltinCorpus(Settings):
    """A corpus the workflow makes itself (the demo world's) or reads from ``paper_data``'s
    downloads: no keys besides ``kind``."""

    SECTION = "corpora"


@dataclass(frozen=True, kw_only=True)
class SplitSettings(Settings):
    """Keys shared by the generic kinds: language and split."""

    SECTION = "corpora"

    lang: str | None = setting(None, kind=str, optional=True, shape={"pattern": "^[a-z]{2}$"},
                               doc="the captions' language (ISO 639-1), when no lang column/field gives it")
    split_sizes: dict | None = setting(None, kind=dict, optional=True, shape=SPLIT_SIZES,
                                       doc="images of val and test in a seeded split (the rest: train), "
                                           "used when the metadata has no split column/field")
    seed: int = setting(0, kind=int, low=0, doc="seed of that split")

    def check(self) -> None:
        for key in ("val", "test"):
            if self.split_sizes is not None and not (isinstance(self.split_sizes.get(key), int)
                                                     and self.split_sizes[key] >= 1):
                raise self.bad("split_sizes", "must give val and test as integers >= 1")


@dataclass(frozen=True, kw_only=True)
class ImageFolderCorpus(SplitSettings):
    """An ``imagefolder`` corpus: ``root`` holds the images (any sub-folders) and one
    ``metadata.csv``, ``metadata.jsonl`` or ``metadata.parquet``; its ``file_name`` column is an
    image's path relative to ``root``; one row per caption."""

    root: str = setting(kind=str, doc="the folder")
    metadata: str | None = setting(None, kind=str, optional=True,
                                   doc="the metadata file's name in root (default: the one metadata.csv|jsonl|parquet there)")
    caption_column: str = setting("text", kind=str, doc="the caption column")
    lang_column: str | None = setting(None, kind=str, optional=True,
                                      doc="a column giving each caption's language (instead of lang)")
    split_column: str = setting("split", kind=str,
                                doc="the split column (train/val/test), used when the metadata has it")

    def check(self) -> None:
        super().check()
        if (self.lang is None) == (self.lang_column is None):
            raise self.bad("lang", "give exactly one of lang (every caption's language) and lang_column")
        if self.metadata is not None and self.metadata not in METADATA_NAMES:
            raise self.bad("metadata", f"must be one of {list(METADATA_NAMES)}")


@dataclass(frozen=True, kw_only=True)
class WebDatasetCorpus(SplitSettings):
    """A ``webdataset`` corpus: tar shards as img2dataset writes them, each sample ``{key}.jpg``
    (or ``.png``/``.webp``), ``{key}.txt`` (the caption) and ``{key}.json``; one caption per
    image."""

    shards: str = setting(kind=str,
                          doc="the shards: a brace pattern (/data/cc/{00000..00331}.tar) or a folder of .tar files")
    lang_field: str | None = setting(None, kind=str, optional=True,
                                     doc="a key of {key}.json giving the caption's language (instead of lang)")
    split_field: str = setting("split", kind=str,
                               doc="a key of {key}.json giving the split, used when the samples have it")

    def check(self) -> None:
        super().check()
        if (self.lang is None) == (self.lang_field is None):
            raise self.bad("lang", "give exactly one of lang (every caption's language) and lang_field")
        if "{" in shard_folder(self.shards) or "}" in shard_folder(self.shards):
            raise self.bad("shards", "only the file name may hold a brace pattern, not the folder")


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusKind:
    """A kind of corpus. ``settings``: its declaration's keys besides ``kind``; ``has_images``:
    whether it has images of its own (Multi30K's translation portion describes the comparable
    portion's); ``external``: its images live in a folder kept outside the workflow (manifests,
    :func:`image_root`); ``source``: the ``data.source`` it needs (None: any); ``rule``: the rule
    that writes its caption tables and image lists."""

    name: str
    summary: str
    settings: type[Settings]
    rule: str
    has_images: bool = True
    external: bool = False
    source: str | None = None

    @property
    def generic(self) -> bool:
        """Read by rule read_corpus from a declared folder (:mod:`pseudopairs.data.generic`)."""
        return self.rule == "read_corpus"


CORPUS_KINDS: Registry[CorpusKind] = Registry("corpus kind")
for _kind in (
    CorpusKind("imagefolder", "a folder of images + metadata.csv, .jsonl or .parquet (file_name, caption), "
               "one row per caption (Hugging Face ImageFolder)", ImageFolderCorpus, "read_corpus",
               external=True),
    CorpusKind("webdataset", "tar shards of {key}.jpg/.png/.webp, {key}.txt, {key}.json (img2dataset's WebDataset)",
               WebDatasetCorpus, "read_corpus", external=True),
    CorpusKind("world", "a corpus of the generated demo world (m30k, m30k_task1, coco)",
               BuiltinCorpus, "world", source="world"),
    CorpusKind("multi30k_task2", "Multi30K's comparable captions (paper_data.multi30k) of the "
               "Flickr30K images (paper_data.flickr30k_images)", BuiltinCorpus, "read_multi30k_task2",
               external=True, source="paper"),
    CorpusKind("multi30k_task1", "Multi30K's translation portion (paper_data.multi30k; the images "
               "are the comparable portion's)", BuiltinCorpus, "read_multi30k_task1", has_images=False,
               source="paper"),
    CorpusKind("coco_karpathy", "COCO 2014 with Karpathy's splits (paper_data.coco; images downloaded)",
               BuiltinCorpus, "read_coco", source="paper"),
):
    CORPUS_KINDS.register(_kind.name, _kind)


class CorporaSection:
    """The ``corpora`` section for the config schema (``x-settings``): each corpus an object with
    a registered ``kind`` and that kind's keys (one ``if``/``then`` per kind)."""

    @staticmethod
    def settings_classes() -> list[type[Settings]]:
        """The settings classes this section generates (one per kind)."""
        return list(dict.fromkeys(CORPUS_KINDS.get(name).settings for name in CORPUS_KINDS.names()))

    @staticmethod
    def json_schema(*, partial: bool = False, fill: Any = False) -> dict:
        branches = []
        for name in CORPUS_KINDS.names():
            kind = CORPUS_KINDS.get(name)
            keys = kind.settings.json_schema()
            keys["properties"] = {"kind": {"const": name}, **keys["properties"]}
            branches.append({"if": {"properties": {"kind": {"const": name}}, "required": ["kind"]},
                             "then": keys})
        entry = {"type": "object", "required": ["kind"],
                 "properties": {"kind": {"enum": CORPUS_KINDS.names(),
                                         "description": "; ".join(f"{n}: {CORPUS_KINDS.get(n).summary}"
                                                                  for n in CORPUS_KINDS.names())}},
                 "allOf": branches}
        return {"type": "object", "default": {},
                "description": "the corpora data sets name: each with its kind and that kind's keys "
                               "(pseudopairs.data.corpora)",
                "propertyNames": {"pattern": "^[A-Za-z0-9_]+$"}, "additionalProperties": entry}


# --------------------------------------------------------------------------------------------
# Declarations
# --------------------------------------------------------------------------------------------


def declaration(config: dict, name: str) -> dict[str, Any]:
    """The ``corpora`` entry of corpus ``name``; an undeclared corpus is an error naming the key."""
    corpora = config.get("corpora") or {}
    if name not in corpora:
        raise ValueError(f"config key 'corpora': corpus {name!r} is not declared (declared: "
                         f"{', '.join(sorted(corpora)) or 'none'})")
    return corpora[name]


def corpus_kind(config: dict, name: str) -> CorpusKind:
    return CORPUS_KINDS.get(declaration(config, name)["kind"])


def corpus_settings(config: dict, name: str) -> Settings:
    """The declaration of corpus ``name`` as its kind's settings; errors name ``corpora.NAME.key``."""
    entry = {k: v for k, v in declaration(config, name).items() if k != "kind"}
    kind = corpus_kind(config, name)
    try:
        return kind.settings.from_dict(entry)
    except SettingsError as err:
        raise SettingsError(re.sub(r"\bcorpora(?=[.:])", f"corpora.{name}", str(err))) from None


def has_images(config: dict, name: str) -> bool:
    """Whether corpus ``name`` has images of its own (a world corpus: as the world makes it)."""
    kind = corpus_kind(config, name)
    return kind.has_images and (kind.name != "world" or WORLD_CORPORA.get(name, False))


def corpora_of(config: dict, *, rule: str | None = None, external: bool | None = None) -> list[str]:
    """The declared corpora read by ``rule`` and/or with (or without) external images."""
    names = []
    for name in config.get("corpora") or {}:
        kind = corpus_kind(config, name)
        if (rule is None or kind.rule == rule) and (external is None or (kind.external and kind.has_images) == external):
            names.append(name)
    return names


def external_corpora(config: dict) -> list[str]:
    """Corpora whose images live in a folder the user keeps outside the workflow: their features
    depend on a manifest of the files each split needs, not on the folder."""
    return corpora_of(config, external=True)


def generic_corpora(config: dict) -> list[str]:
    return corpora_of(config, rule="read_corpus")


def shard_folder(pattern: str) -> str:
    """The folder of a webdataset ``shards`` value (a brace pattern's directory, or the folder)."""
    path = PurePosixPath(pattern)
    return str(path.parent) if path.suffix == ".tar" or "{" in path.name else str(path)


def image_root(config: dict, name: str) -> str | None:
    """The folder the image list of an external corpus is relative to (None: the paths are the
    workflow's own). The Flickr30K folder is checked here, so a wrong path fails while the DAG is
    built (naming the config key) instead of inside a GPU job."""
    kind = corpus_kind(config, name)
    if not (kind.external and kind.has_images):
        return None
    if kind.name == "multi30k_task2":
        return flickr30k_images(config)
    settings = corpus_settings(config, name)
    root = settings.root if kind.name == "imagefolder" else shard_folder(settings.shards)
    return str(root)


def expand_braces(pattern: str) -> list[str]:
    """Every name of a brace pattern: ``{a..b}`` (integers, zero-padded to the width of ``a``) and
    ``{x,y,z}`` (alternatives), in order; several braces multiply. No brace: ``[pattern]``."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, body, tail = pattern[:match.start()], match.group(1), pattern[match.end():]
    numeric = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if numeric:
        first, last = numeric.groups()
        width = len(first) if first.startswith("0") else 0
        lo, hi = int(first), int(last)
        step = 1 if hi >= lo else -1
        items = [str(i).zfill(width) for i in range(lo, hi + step, step)]
    elif "," in body:
        items = body.split(",")
    else:
        raise ValueError(f"brace pattern {pattern!r}: {{{body}}} is neither {{a..b}} nor {{x,y}}")
    return [name for item in items for name in expand_braces(head + item + tail)]


def source_files(config: dict, name: str) -> list[str]:
    """The source files of a generic corpus, relative to its :func:`image_root`: the metadata
    file (imagefolder) or the shards (webdataset). Lists a folder, reads nothing; a folder or
    file that is not there is an error naming the config key."""
    kind, settings = corpus_kind(config, name), corpus_settings(config, name)
    root = Path(image_root(config, name))
    where = f"config key 'corpora.{name}"
    if not root.is_dir():
        key = "root" if kind.name == "imagefolder" else "shards"
        raise ValueError(f"{where}.{key}': {root} is not a directory")
    if kind.name == "imagefolder":
        if settings.metadata is not None:
            names = [settings.metadata] if (root / settings.metadata).is_file() else []
        else:
            names = [n for n in METADATA_NAMES if (root / n).is_file()]
        if len(names) != 1:
            found = f"found {', '.join(names)}" if names else "found none"
            raise ValueError(f"{where}.root': {root} must hold one of {', '.join(METADATA_NAMES)} "
                             f"({found}{'; set corpora.' + name + '.metadata' if names else ''})")
        return names
    pattern = PurePosixPath(settings.shards)
    if pattern.suffix == ".tar" or "{" in pattern.name:
        names = expand_braces(pattern.name)
        missing = [n for n in names if not (root / n).is_file()]
        if missing:
            raise ValueError(f"{where}.shards': {len(missing)} of {len(names)} shards are not in "
                             f"{root} (first: {', '.join(missing[:3])})")
    else:
        names = sorted(p.name for p in root.iterdir() if p.suffix == ".tar" and p.is_file())
        if not names:
            raise ValueError(f"{where}.shards': no .tar shards in {root}")
    return names


def check(config: dict) -> list[str]:
    """The ``corpora`` section and the data sets' corpora: every corpus a data set or the
    evaluation names is declared, each declaration fits its kind, a world corpus is one of the
    world's (with ``data.source: world``), a paper corpus comes with ``data.source: paper``."""
    messages = []
    corpora = config.get("corpora") or {}
    source = (config.get("data") or {}).get("source")
    named = [(f"datasets.{ds}.{key}", spec[key]) for ds, spec in (config.get("datasets") or {}).items()
             for key in ("corpus", "images") if key in spec]
    evaluation = config.get("evaluation") or {}
    named += [(f"evaluation.{key}", evaluation[key]) for key in ("corpus", "translation_corpus")
              if evaluation.get(key)]
    named += [(f"evaluation.lang_corpora.{lang}", name) for lang, name in (evaluation.get("lang_corpora") or {}).items()]
    used = {name for _, name in named}
    for name, entry in corpora.items():
        kind = CORPUS_KINDS.get(entry["kind"]) if entry.get("kind") in CORPUS_KINDS else None
        if kind is None:
            continue   # the schema names it
        try:
            corpus_settings(config, name)
        except SettingsError as err:
            key, _, why = str(err).partition(": ")
            messages.append(f"config key '{key}': {why}")
        # a corpus nothing names is read by nothing (config/config.yaml's world corpora under a
        # configuration of your own data)
        if kind.source is not None and source != kind.source and name in used:
            messages.append(f"config key 'corpora.{name}.kind': a {kind.name} corpus needs data.source "
                            f"{kind.source}, not {source!r}")
        if kind.name == "world" and name not in WORLD_CORPORA:
            messages.append(f"config key 'corpora.{name}': the demo world makes the corpora "
                            f"{', '.join(WORLD_CORPORA)}, not {name!r}")
    for key, name in named:
        if name not in corpora:
            messages.append(f"config key '{key}': corpus {name!r} is not declared under corpora "
                            f"(declared: {', '.join(sorted(corpora)) or 'none'})")
        elif key.endswith(".images") and corpora[name].get("kind") in CORPUS_KINDS and not has_images(config, name):
            messages.append(f"config key '{key}': corpus {name!r} has no images of its own")
    return messages


# --------------------------------------------------------------------------------------------
# The paper's corpora: downloads and folders (paper_data)
# --------------------------------------------------------------------------------------------


def paper_data(config: dict) -> dict[str, Any]:
    return config.get("paper_data") or {}


def multi30k_files(config: dict, task: str, split: str) -> list[str]:
    """Upstream files (relative to the Multi30K data root) behind one canonical split."""
    m30k = paper_data(config)["multi30k"]
    if task == "task2":
        upstream = m30k["task2_splits"][split]
        files = [f"task2/raw/{upstream}.{n}.{lang}.gz" for n in range(1, 6) for lang in ("en", "de")]
        return files + [f"task2/image_splits/{upstream}_images.txt"]
    upstream = m30k["task1_splits"][split]
    files = [f"task1/raw/{upstream}.{lang}.gz" for lang in m30k["task1_langs"]]
    return files + [f"task1/image_splits/{upstream}.txt"]


def multi30k_downloads(config: dict, task: str, split: str) -> list[str]:
    return [f"{layout.downloads()}/multi30k/{f}" for f in multi30k_files(config, task, split)]


def multi30k_url(config: dict, path: str) -> str:
    return f"{paper_data(config)['multi30k']['base'].rstrip('/')}/{path}"


def coco_image_dirs(config: dict) -> list[str]:
    return [f"{layout.downloads()}/coco/images/{part}" for part in paper_data(config)["coco"]["images"]]


def flickr30k_images(config: dict) -> str:
    """The Flickr30K image folder (distributed on request), checked when a job needs it, so a
    placeholder path fails at the start of the run instead of inside a GPU job."""
    path = Path(paper_data(config)["flickr30k_images"])
    if not path.is_dir():
        raise ValueError(
            f"config key 'paper_data.flickr30k_images': {path} is not a directory. Set it to the "
            "folder of Flickr30K images ({image_id}.jpg; distributed on request, see "
            "docs/cluster.md).")
    return str(path)


# --------------------------------------------------------------------------------------------
# The workflow's view: inputs and params of the jobs that read corpora, parse-time refresh
# --------------------------------------------------------------------------------------------


def reading_settings(config: dict, name: str) -> dict[str, Any]:
    """What a generic corpus' tables depend on besides its files: its declaration without the
    folder (the shards' file-name pattern stays), so moving the folder changes nothing."""
    entry = dict(declaration(config, name))
    entry.pop("root", None)
    if "shards" in entry:
        pattern = PurePosixPath(entry["shards"])
        entry["shards"] = pattern.name if pattern.suffix == ".tar" or "{" in pattern.name else ""
    return entry


def produced_by(config: dict, name: str) -> list[str]:
    """The workflow output a generic corpus' folder is (the demo world exported as a corpus:
    rule export_world_corpus), so reading it waits for it; none for a folder of the user's."""
    root = Path(image_root(config, name))
    for fmt in WORLD_EXPORTS:
        exported = Path(layout.exported_corpus(fmt))
        if root == exported:
            return [str(exported)]
    return []


def manifest_problem(config: dict, name: str, split: str) -> str | None:
    """Why the features of ``name``/``split`` cannot be made, known before any job runs: its
    manifest (when it exists and is newer than the features, which then must be made again)
    names files that are missing -- how many, and the first ones."""
    from pseudopairs.data.manifest import read_manifest

    if (name, split) in INCOMPLETE:   # every split the refresh found incomplete, in one line
        return "; ".join(_incomplete_message(config, n, s, m) for (n, s), m in INCOMPLETE.items())
    path = Path(layout.image_manifest(name, split))
    if not path.is_file():
        return None
    features = Path(layout.features(name, split, config["features"]["format"]))
    if features.is_file() and features.stat().st_mtime >= path.stat().st_mtime:
        return None
    manifest = read_manifest(path)
    if manifest is None:
        return None
    return _incomplete_message(config, name, split, manifest)


def feature_image_inputs(config: dict, name: str, split: str) -> dict[str, Any]:
    """The features job's inputs: the image list, plus the downloaded COCO image folders it
    points into (coco_karpathy), or the manifest of an external corpus' files (checked: a split
    with missing files fails here, while the DAG is built, naming how many and the first)."""
    inputs: dict[str, Any] = {"images": layout.images(name, split)}
    kind = corpus_kind(config, name)
    if kind.name == "coco_karpathy":
        inputs["folders"] = coco_image_dirs(config)
    elif kind.external and kind.has_images:
        image_root(config, name)   # a wrong Flickr30K path fails here, naming the config key
        problem = manifest_problem(config, name, split)
        if problem:
            raise ValueError(problem)
        inputs["manifest"] = layout.image_manifest(name, split)
    return inputs


def image_root_args(config: dict, name: str) -> list[str]:
    """``--image-root FOLDER`` for an external corpus' features job (as a list), else nothing."""
    root = image_root(config, name)
    return ["--image-root", root] if root is not None else []


def refresh_manifests(config: dict, *, after_source=None) -> list[str]:
    """Bring every existing manifest of the external corpora up to date with their files, before
    the DAG is built: rewritten only when a file's content changed (then what was made from it is
    older and reruns), untouched otherwise. A folder that is not there is skipped (the jobs that
    need it say so). ``after_source(config, name)``: run for a generic corpus once its source
    manifest is refreshed, before its image manifests (the image lists' refresh,
    :func:`pseudopairs.data.generic.refresh_image_lists`). Returns the files rewritten."""
    from pseudopairs.data.manifest import refresh_manifest, refresh_source

    rewritten = []
    INCOMPLETE.clear()
    for name in external_corpora(config):
        try:
            root = image_root(config, name)
        except ValueError:
            continue
        if not Path(root).is_dir():
            continue
        if corpus_kind(config, name).generic:
            source = layout.corpus_source(name)
            try:
                names = source_files(config, name) if Path(source).is_file() else []
            except ValueError:
                names = None
            if names and refresh_source(names, source, root):
                rewritten.append(source)
            if after_source is not None:
                rewritten += after_source(config, name) or []
        for split in SPLITS:
            manifest = layout.image_manifest(name, split)
            refreshed = refresh_manifest(layout.images(name, split), manifest, root)
            if isinstance(refreshed, dict):
                INCOMPLETE[(name, split)] = refreshed   # refused by manifest_problem, not written
            elif refreshed:
                rewritten.append(manifest)
    return rewritten


#: The splits whose files the last refresh (:func:`refresh_manifests`) found missing, and their
#: unwritten manifests: a features job of any of them is refused while the DAG is built, naming
#: them all.
INCOMPLETE: dict[tuple[str, str], dict[str, Any]] = {}


def _incomplete_message(config: dict, name: str, split: str, manifest: dict[str, Any]) -> str:
    from pseudopairs.data.manifest import missing_message

    key = "paper_data.flickr30k_images" if corpus_kind(config, name).name == "multi30k_task2" else f"corpora.{name}"
    return missing_message(manifest, what=f"config key '{key}': split {split} of corpus {name!r}",
                           root=image_root(config, name))


def docs_table() -> str:
    """The corpus kinds as a Markdown table (kind, keys besides ``kind``, what it reads, the rule)."""
    from dataclasses import fields

    lines = ["| kind | keys (default) | what | rule |", "|---|---|---|---|"]
    for name in CORPUS_KINDS.names():
        kind = CORPUS_KINDS.get(name)
        keys = []
        defaults = kind.settings.defaults()
        for f in sorted(fields(kind.settings), key=lambda f: f.name in defaults):
            default = defaults.get(f.name, "required")
            keys.append(f"`{f.name}`" + ("" if default is None else f" = {json_text(default)}"))
        lines.append(f"| `{name}` | {', '.join(keys) or '—'} | {kind.summary} | `{kind.rule}` |")
    return "\n".join(lines)


def json_text(value: Any) -> str:
    import json

    return value if value == "required" else json.dumps(value)

"""Pseudopair precision (beyond the paper; the demo world only): the share of mined captions that
truly describe the scene of the query's image.

The demo world knows what each caption says (:mod:`pseudopairs.world.meaning`: details
``(mention, attribute, value)``, a head detail ``kind`` or ``background`` per mention) and every
scene (``results/world/manifest.json``). A pair (query image, mined caption) is judged detail by
detail against the query image's scene:

* a mention's **head** holds when the scene has a subject with it (an object group of that kind;
  the scene's background);
* any other detail of the mention (colour, size, texture, count, background colour …) is judged
  only when its head holds, against the subjects the head names: it holds when one of them has
  that value (:func:`pseudopairs.world.meaning.holds`: ``"2+"`` = at least two);
* the caption **holds** when every mention has one subject with all of its details.

Statistics of one pair set (pairs without a match, index −1, are left out):
``precision`` = share of pairs whose caption holds; ``precision_{attribute}`` = among the pairs
whose caption has a judged detail of that attribute, the share in which every such detail holds
(so ``precision_colour`` is the colour's precision given the object's kind is right; NaN when no
caption says that attribute). The real data have no meanings: these statistics are then absent.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from pseudopairs.core.io import reading
from pseudopairs.world.meaning import ATTRIBUTES, HEADS, MEANING_COLUMNS, holds, scene_subjects

OVERALL = "precision"
PRECISION_STATISTICS = (OVERALL, *(f"precision_{a}" for a in ATTRIBUTES))
# the columns of a pairs table precision reads (beside the statistics' own)
PRECISION_PAIR_COLUMNS = ["query_image_id", "match_row", "match_image_id", "match_lang", "match_caption_idx"]
_HEADS = set(HEADS.values())

Details = Sequence[tuple[int, str, str]]


def judge_caption(details: Details, subjects: Mapping[tuple[str, str], list]) -> tuple[bool, dict[str, bool]]:
    """One caption against one scene (``subjects``: :func:`~pseudopairs.world.meaning.scene_subjects`):
    whether it holds, and per judged attribute whether every judged detail of it holds."""
    mentions: dict[int, list[tuple[str, str]]] = {}
    for mention, attribute, value in details:
        mentions.setdefault(mention, []).append((attribute, value))
    verdict: dict[str, bool] = {}
    overall = True
    for mention, said in mentions.items():
        heads = [(a, v) for a, v in said if a in _HEADS]
        if len(heads) != 1:
            raise ValueError(f"caption meaning: mention {mention} has {len(heads)} head details "
                             f"({sorted(_HEADS)}), expected one")
        head = heads[0]
        candidates = subjects.get(head, [])
        verdict[head[0]] = verdict.get(head[0], True) and bool(candidates)
        if not candidates:
            overall = False
            continue
        rest = [(a, v) for a, v in said if a not in _HEADS]
        for attribute, value in rest:
            found = any(holds(value, subject.get(attribute)) for subject in candidates)
            verdict[attribute] = verdict.get(attribute, True) and found
        overall = overall and any(all(holds(v, subject.get(a)) for a, v in rest) for subject in candidates)
    return overall, verdict


def pseudopair_precision(pairs, *, meanings: Mapping[tuple, Details],
                         scenes: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """:data:`PRECISION_STATISTICS` of one pair set (the module docstring). ``pairs``: a frame with
    :data:`PRECISION_PAIR_COLUMNS`; ``meanings``: ``(image_id, lang, caption_idx)`` of a database
    caption → its details; ``scenes``: image id → its manifest record."""
    missing = [c for c in PRECISION_PAIR_COLUMNS if c not in pairs.columns]
    if missing:
        raise ValueError(f"pseudopair precision: the pairs lack columns {missing}")
    matched = pairs[pairs["match_row"].to_numpy() >= 0]
    judged = {a: 0 for a in ATTRIBUTES}
    held = {a: 0 for a in ATTRIBUTES}
    n_held = 0
    subjects: dict[str, dict] = {}
    for image, match_image, lang, idx in zip(matched["query_image_id"], matched["match_image_id"],
                                             matched["match_lang"], matched["match_caption_idx"]):
        key = (str(match_image), str(lang), int(idx))
        if key not in meanings:
            raise ValueError(f"pseudopair precision: no meaning for the mined caption {key} "
                             "(image id, language, caption index)")
        if image not in subjects:
            if image not in scenes:
                raise ValueError(f"pseudopair precision: no scene for the query image {image!r}")
            subjects[image] = scene_subjects(scenes[image])
        overall, verdict = judge_caption(meanings[key], subjects[image])
        n_held += overall
        for attribute, ok in verdict.items():
            judged[attribute] = judged.get(attribute, 0) + 1
            held[attribute] = held.get(attribute, 0) + ok
    n = len(matched)
    out = {OVERALL: n_held / n if n else math.nan}
    out.update({f"precision_{a}": held[a] / judged[a] if judged[a] else math.nan for a in ATTRIBUTES})
    return out


def load_meanings(path: str | Path, *, corpora: set[str]) -> dict[str, dict[tuple, list]]:
    """``results/world/caption_meanings.parquet`` → corpus → ``(image_id, lang, caption_idx)`` →
    its details, for the captions of ``corpora``."""
    import pandas as pd

    with reading(path, "the demo world's caption meanings (Parquet)", fix="delete it and rerun the world step"):
        frame = pd.read_parquet(path, columns=MEANING_COLUMNS)
    out: dict[str, dict[tuple, list]] = {c: {} for c in corpora}
    frame = frame[frame["corpus"].astype(str).isin(corpora)]
    for corpus, image, lang, idx, mention, attribute, value in zip(
            frame["corpus"].astype(str), frame["image_id"], frame["lang"].astype(str),
            frame["caption_idx"], frame["mention"], frame["attribute"].astype(str),
            frame["value"].astype(str)):
        out[corpus].setdefault((image, lang, int(idx)), []).append((int(mention), attribute, value))
    return out


def load_scenes(path: str | Path) -> dict[str, dict]:
    """The demo world's manifest → image id → its scene record (every corpus and split)."""
    with reading(path, "the demo world's manifest (JSON)", fix="delete it and rerun the world step"):
        manifest = json.loads(Path(path).read_text(encoding="utf-8"))
        return {record["image_id"]: record for splits in manifest["scenes"].values()
                for records in splits.values() for record in records}


class Judge:
    """The meanings and scenes a statistics run reads once (spec ``meanings``: ``captions``,
    ``scenes`` and each set's ``database_corpus``), and the precision of each pair set."""

    def __init__(self, meanings: Mapping[str, Any]):
        self.corpus = dict(meanings["database_corpus"])
        self.meanings = load_meanings(meanings["captions"], corpora=set(self.corpus.values()))
        self.scenes = load_scenes(meanings["scenes"])

    def __call__(self, name: str, pairs) -> dict[str, float]:
        if name not in self.corpus:
            raise ValueError(f"pseudopair precision: no database corpus for the set {name!r}")
        return pseudopair_precision(pairs, meanings=self.meanings[self.corpus[name]], scenes=self.scenes)

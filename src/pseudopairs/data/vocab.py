"""Vocabulary: one table for all languages (same word form = same row), built from training
captions only; words seen fewer than ``min_count`` times map to UNK (paper §3.1).

JSON layout: ``{"min_count": 4, "pad": "<pad>", "unk": "<unk>", "words": [...], "counts": {...}}``;
a word's id is its position in ``words`` (PAD = 0, UNK = 1).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable


PAD = "<pad>"
UNK = "<unk>"
PAD_ID = 0
UNK_ID = 1


@dataclass(frozen=True)
class Vocabulary:
    words: list[str]
    min_count: int
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {w: i for i, w in enumerate(self.words)})

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        """Token ids of a prepared (space-joined) caption; unknown words → UNK."""
        index = self._index  # type: ignore[attr-defined]
        return [index.get(tok, UNK_ID) for tok in text.split()]

    def to_json(self) -> dict:
        return {"min_count": self.min_count, "pad": PAD, "unk": UNK, "words": self.words,
                "counts": self.counts}

    @classmethod
    def load(cls, path: str | Path) -> "Vocabulary":
        """Read a vocabulary JSON written by the ``vocab`` step; a malformed file is an error
        naming it."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        if (not isinstance(data, dict) or not isinstance(data.get("words"), list)
                or not isinstance(data.get("min_count"), int)):
            raise ValueError(f"{path}: not a vocabulary file (needs a 'words' list and an integer "
                             "'min_count')")
        words = data["words"]
        if words[:2] != [PAD, UNK]:
            raise ValueError(f"{path}: 'words' must start with {PAD!r}, {UNK!r} "
                             f"(ids {PAD_ID}, {UNK_ID})")
        seen: set[str] = set()
        for word in words:
            if not isinstance(word, str) or not word:
                raise ValueError(f"{path}: every word must be a non-empty string, got {word!r}")
            if word in seen:
                raise ValueError(f"{path}: word {word!r} is listed twice (one row per word form)")
            seen.add(word)
        return cls(words=list(words), min_count=data["min_count"],
                   counts=dict(data.get("counts", {})))


def build_vocabulary(texts: Iterable[str], *, min_count: int) -> Vocabulary:
    """Count whitespace tokens; keep words with count ≥ ``min_count``, most frequent first, ties
    broken alphabetically so the table is deterministic."""
    if min_count < 1:
        raise ValueError(f"vocab.min_count must be ≥ 1, got {min_count}")
    counts = Counter(tok for text in texts for tok in text.split())
    kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    kept = [w for w in kept if w not in (PAD, UNK)]
    return Vocabulary(words=[PAD, UNK, *kept], min_count=min_count,
                      counts={w: counts[w] for w in kept})

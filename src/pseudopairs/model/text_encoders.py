"""Text encoders: what turns a caption's token ids into the vectors the GRU reads. One registry
entry each (config key ``model.text_encoder``; an experiment may choose its own under
``experiments.NAME.model``).

``gru`` (papers 000, 001, 003, 004): one word-embedding table shared by all languages (the same
word form in two languages is one row; PAD = 0), ids from :class:`pseudopairs.data.vocab.Vocabulary`.

``hem`` (paper 002, §3.1, SMALR's Hybrid Embedding Model): each language's frequent words keep a
row of their own; every other word reads the row of the latent token it was hard-assigned to in
HEM's pretraining (the assignment is a frozen buffer, ``row_of_id``); the rows (``row_dim`` wide:
002's PCA-reduced FastText space) pass through 002's fully connected layer to
``model.embedding_dim`` (002: 50 → 512), and then through the same GRU as ``gru``. Ids come from
a :class:`pseudopairs.smalr.hem.HybridVocabulary` (keyed by language and word), so encoding a
caption needs its language (:func:`language_view`). The vocabulary and the initial rows are
written by the ``pretrain-hem`` step (:func:`read_hem_init`).

Both kinds of vocabulary are one JSON file per run (``vocab.json``); :func:`load_vocabulary`
reads either, and training, validation, evaluation and mining encode through
:func:`language_view`, so every step sees a caption as the model it was trained with did.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from pseudopairs.core.registry import Registry
from pseudopairs.smalr.settings import HEM_INIT_FORMAT  # noqa: F401  (read_hem_init's format)



@dataclass(frozen=True)
class TextEncoder:
    name: str
    summary: str
    # "module:function" (vocab_size, embedding_dim, options) → nn.Module mapping (B, T) ids to
    # (B, T, embedding_dim), zeros at PAD; imported when a model uses it (no torch here).
    embedding: str
    # the vocabulary kind its ids come from: "shared" (data.vocab.Vocabulary) or "hybrid"
    # (smalr.hem.HybridVocabulary)
    vocabulary: str

    def embedding_function(self) -> Callable:
        module, function = self.embedding.split(":")
        return getattr(importlib.import_module(module), function)


TEXT_ENCODERS: Registry[TextEncoder] = Registry("text encoder",
                                                modules=("pseudopairs.model.text_encoders",))

TEXT_ENCODERS.register("gru", TextEncoder(
    name="gru", embedding="pseudopairs.model.text_encoders:shared_embedding", vocabulary="shared",
    summary="one word-embedding table shared by all languages, then the GRU (papers 000, 001, "
            "003, 004)"))

TEXT_ENCODERS.register("hem", TextEncoder(
    name="hem", embedding="pseudopairs.model.text_encoders:hybrid_embedding", vocabulary="hybrid",
    summary="SMALR's Hybrid Embedding Model: per-language rows for each language's frequent "
            "words, a frozen hard assignment to a shared latent vocabulary for the rest, a fully "
            "connected layer to embedding_dim, then the GRU (paper 002 §3.1)"))


def shared_embedding(vocab_size: int, embedding_dim: int, options: dict):
    from torch import nn

    from pseudopairs.data.vocab import PAD_ID
    if options:
        raise ValueError(f"text encoder gru takes no options, got {sorted(options)}")
    return nn.Embedding(vocab_size, embedding_dim, padding_idx=PAD_ID)


def hybrid_embedding(vocab_size: int, embedding_dim: int, options: dict):
    """A :class:`~pseudopairs.smalr.hem.HybridEmbedding` of ``options = {"rows": R, "row_dim": d}``
    with every id on the UNK row until the real assignment is loaded (:func:`read_hem_init` or a
    checkpoint's ``row_of_id``). ``options`` may also record ``pretraining_parameters`` (what HEM's
    pretraining trained and the model does not keep; counted by :func:`parameter_counts`)."""
    import torch

    from pseudopairs.smalr.hem import UNK_ID, HybridEmbedding
    if not {"rows", "row_dim"} <= set(options) <= {"rows", "row_dim", "pretraining_parameters"}:
        raise ValueError(f"text encoder hem needs the options rows and row_dim (and may record "
                         f"pretraining_parameters), got {sorted(options)}")
    rows, row_dim = int(options["rows"]), int(options["row_dim"])
    if rows < 2 or row_dim < 1:
        raise ValueError(f"text encoder hem: rows must be ≥ 2 (PAD, UNK) and row_dim ≥ 1, got "
                         f"{rows}, {row_dim}")
    row_of_id = torch.full((vocab_size,), UNK_ID, dtype=torch.int64)
    row_of_id[0] = 0
    return HybridEmbedding(row_of_id, torch.zeros(rows, row_dim), output_dim=embedding_dim)


# --------------------------------------------------------------------------------------------
# Vocabularies: either kind, read and used per language
# --------------------------------------------------------------------------------------------


class Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class _LanguageOf:
    vocab: object
    lang: str

    def encode(self, text: str) -> list[int]:
        return self.vocab.encode(self.lang, text)  # type: ignore[attr-defined]


def vocabulary_kind(vocab) -> str:
    from pseudopairs.smalr.hem import HybridVocabulary
    return "hybrid" if isinstance(vocab, HybridVocabulary) else "shared"


def language_view(vocab, lang: str | None) -> Encoder:
    """What encodes captions of ``lang``: the shared vocabulary itself, or a hybrid vocabulary's
    view of that language (which needs it)."""
    if vocabulary_kind(vocab) == "shared":
        return vocab
    if not lang:
        raise ValueError("a HEM (hybrid) vocabulary encodes a caption only with its language")
    return _LanguageOf(vocab, lang)


def load_vocabulary(path):
    """A run's ``vocab.json``: a shared :class:`~pseudopairs.data.vocab.Vocabulary` or, when the
    file has ``latent_size``, a :class:`~pseudopairs.smalr.hem.HybridVocabulary`. A malformed
    file is an error naming it."""
    from pseudopairs.data.vocab import Vocabulary
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: vocabulary not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not (isinstance(data, dict) and "latent_size" in data):
        return Vocabulary.load(path)
    from pseudopairs.smalr.hem import HybridVocabulary
    try:
        return HybridVocabulary.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{path}: not a HEM vocabulary (needs latent_size, specific: "
                         f"{{lang: [words]}}, latent: {{lang: {{word: token}}}}): {err}") from None


def check_vocabulary(vocab, text_encoder: str, *, where: str) -> None:
    """The encoder's ids come from one kind of vocabulary; say which file is wrong otherwise."""
    wanted = TEXT_ENCODERS.get(text_encoder).vocabulary
    if vocabulary_kind(vocab) != wanted:
        raise ValueError(f"{where}: model.text_encoder {text_encoder} needs a {wanted} vocabulary, "
                         f"got a {vocabulary_kind(vocab)} one")


def read_hem_init(path, vocab) -> dict:
    """The initial HEM rows the ``pretrain-hem`` step wrote (``{"format", "weight": (R, d)}``),
    checked against the vocabulary (R = 2 + its specific words + its latent tokens). Returns
    ``{"weight", "row_of_id"}`` (the frozen assignment from the vocabulary) and
    ``pretraining_parameters`` (the pretraining's parameters the model does not keep)."""
    import torch

    from pseudopairs.core.io import reading
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no HEM initial state (the pretrain-hem step writes it)")
    with reading(path, "a HEM initial state", fix="delete it and rerun its pretrain_hem job"):
        data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or data.get("format") != HEM_INIT_FORMAT:
        raise ValueError(f"{path}: not a HEM initial state (format {HEM_INIT_FORMAT})")
    weight = data["weight"]
    rows = 2 + vocab.n_specific + vocab.latent_size
    if weight.ndim != 2 or weight.shape[0] != rows:
        raise ValueError(f"{path}: {tuple(weight.shape)} rows, the vocabulary needs {rows} "
                         f"(PAD, UNK, {vocab.n_specific} specific, {vocab.latent_size} latent)")
    pretraining = data.get("pretraining_parameters")
    if not isinstance(pretraining, int) or pretraining < 0:
        raise ValueError(f"{path}: no pretraining_parameters (a count >= 0): delete it and rerun "
                         "its pretrain_hem job")
    return {"weight": weight.float(), "row_of_id": vocab.rows(), "pretraining_parameters": pretraining}


def parameter_counts(model, *, objective_parameters: int = 0) -> dict:
    """Parameters of a model (``metrics.json``'s ``parameters``): ``trainable`` — the model's
    parameters with a gradient, all of them kept at test time — and ``total`` (buffers such as
    HEM's frozen assignment are not parameters); the text embedding's trainable share
    (``text_embedding``); ``training`` — the parameters trained: ``trainable`` plus the training
    objective's own modules that are dropped after training (``objective_parameters``, the
    checkpoint's record: SMALR's MCLM heads and language classifier) plus what HEM's pretraining
    trained and the model does not keep (``pretraining``: its assignment layer and dropped latent
    rows, recorded in the model's ``text_options``; 0 without HEM). Paper 002 §5 tells the two
    apart ("SMALR uses more parameters during training … far fewer test-time parameters")."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    pretraining = int(getattr(model, "text_options", {}).get("pretraining_parameters", 0))
    return {"trainable": trainable,
            "total": sum(p.numel() for p in model.parameters()),
            "text_embedding": sum(p.numel() for p in model.embedding.parameters() if p.requires_grad),
            "pretraining": pretraining,
            "training": trainable + int(objective_parameters) + pretraining}

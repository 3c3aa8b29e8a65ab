"""Settings of the translation steps (config section ``translation``) and where the paper
configuration's model comes from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pseudopairs.core.settings import Settings, device_setting, setting


#: The published OpenNMT-py English→German Transformer (archive: averaged-10-epoch.pt and
#: sentencepiece.model at its root). Its checksum lives in checksums.json (null: none published).
PAPER_MODEL_URL = "https://s3.amazonaws.com/opennmt-models/transformer-ende-wmt-pyOnmt.tar.gz"


PAPER_MODEL_CHECKPOINT = "averaged-10-epoch.pt"


PAPER_MODEL_TOKENIZER = "sentencepiece.model"


#: Weight types ``convert-mt --quantization`` accepts ("none" keeps the checkpoint's float32).
QUANTIZATIONS = ("none", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16", "float32")


COMPUTE_TYPES = ("auto", "default", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                 "int16", "float16", "bfloat16", "float32")


def paper_model_source() -> dict[str, Any]:
    """Where the paper configuration's translation model comes from.

    OpenNMT-py's pretrained WMT English→German Transformer (base: 6+6 layers, d=512, 8 heads,
    ff 2048; shared SentencePiece vocabulary; newstest2014 BLEU 26.89, newstest2017 28.09 as
    published on opennmt.net/Models-py). The archive holds ``averaged-10-epoch.pt`` (an OpenNMT-py
    2.x checkpoint whose vocabulary is pickled torchtext fields, read by :func:`load_checkpoint`)
    and ``sentencepiece.model``. No checksum is published; ``sha256`` is the value recorded in
    ``checksums.json`` (null until someone records the one of a verified download).
    """
    from pseudopairs.data.download import known_checksum

    entry = known_checksum(PAPER_MODEL_URL) or {}
    return {
        "url": PAPER_MODEL_URL,
        "sha256": entry.get("sha256"),
        "size": entry.get("size"),
        "checkpoint": PAPER_MODEL_CHECKPOINT,
        "tokenizer": PAPER_MODEL_TOKENIZER,
        "source_lang": "en",
        "target_lang": "de",
    }


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class TranslationTrainSettings(Settings):
    """``translation.train``: the demo model trained by ``train-mt`` (defaults: CPU, minutes).

    ``checkpoint_every`` does not change the result (a run resumed from a saved state ends with
    the same model as an uninterrupted one), so a rerun that differs only in it still resumes;
    every other setting, ``threads`` included, is part of what a saved state must match."""

    SECTION = "translation.train"
    #: Settings that do not change the trained model.
    RUN_NEUTRAL: ClassVar[tuple[str, ...]] = ("checkpoint_every",)

    seed: int = setting(0, kind=int, low=0)
    threads: int | None = setting(2, kind=int, low=1, optional=True, doc="torch threads (null: torch's default)")
    spm_vocab_size: int = setting(1000, kind=int, low=8, doc="upper bound; a small corpus may give fewer pieces")
    spm_model_type: str = setting("bpe", kind=str, choices=("bpe", "unigram", "char", "word"))
    spm_character_coverage: float = setting(1.0, kind=float, low=0.9, high=1.0)
    max_tokens: int = setting(100, kind=int, low=1, doc="training pairs longer than this (subword tokens) are dropped")
    enc_layers: int = setting(2, kind=int, low=1)
    dec_layers: int = setting(2, kind=int, low=1)
    d_model: int = setting(128, kind=int, low=2)
    heads: int = setting(4, kind=int, low=1)
    ff: int = setting(512, kind=int, low=1)
    dropout: float = setting(0.1, kind=float, low=0.0, high=1.0, high_open=True)
    attention_dropout: float = setting(0.0, kind=float, low=0.0, high=1.0, high_open=True,
                                       doc="dropout on attention weights is costly on CPU")
    label_smoothing: float = setting(0.1, kind=float, low=0.0, high=1.0, high_open=True)
    batch_tokens: int = setting(1024, kind=int, low=1, doc="padded tokens (longest side × pairs) per update")
    epochs: int = setting(3, kind=int, low=1)
    max_steps: int | None = setting(None, kind=int, low=1, optional=True, doc="stop earlier after this many updates")
    lr: float = setting(1e-3, kind=float, low=0.0, low_open=True, doc="peak learning rate (after warm-up)")
    warmup_steps: int = setting(300, kind=int, low=0)
    clip_norm: float = setting(1.0, kind=float, low=0.0, doc="0 disables clipping")
    max_decoding_length: int = setting(256, kind=int, low=1, doc="for the BLEU translations of the validation pairs")
    log_every: int = setting(50, kind=int, low=1)
    checkpoint_every: int | None = setting(
        500, kind=int, low=1, optional=True,
        doc="updates between saves of the resumable training state (OUTPUT_DIR.state.pt); null: never")

    def check(self) -> None:
        if self.d_model % 2:
            raise self.bad("d_model", "must be even (sinusoidal position encodings)")
        if self.d_model % self.heads:
            raise self.bad("heads", f"must divide translation.train.d_model ({self.d_model})")

    def warmup_problem(self) -> str | None:
        """Why a config's run would never reach its learning rate (``warmup_steps`` ≥
        ``max_steps``), naming the keys; the config check refuses it (a run whose epochs make
        fewer updates than the warm-up is warned about when it starts: :mod:`.fit`)."""
        if self.max_steps is None or self.warmup_steps < self.max_steps:
            return None
        return (f"{self.SECTION}.warmup_steps: must be below translation.train.max_steps ({self.max_steps}): "
                "the learning rate rises for warmup_steps updates, so the run would stop before it "
                f"reaches translation.train.lr; e.g. warmup_steps: {self.max_steps // 10} (got {self.warmup_steps})")


@dataclass(frozen=True)
class TranslateSettings(Settings):
    """``translation.translate``: how ``translate-captions`` runs CTranslate2."""

    SECTION = "translation.translate"

    beam_size: int = setting(5, kind=int, low=1)
    length_penalty: float = setting(1.0, kind=float, low=0.0)
    max_decoding_length: int = setting(256, kind=int, low=1, doc="target subword tokens")
    max_input_tokens: int = setting(256, kind=int, low=1, doc="source subword tokens; longer captions are truncated (logged)")
    max_batch_size: int = setting(1024, kind=int, low=1, doc='tokens per CTranslate2 batch (batch_type="tokens")')
    device: str = device_setting("CTranslate2's device")
    compute_type: str = setting("auto", kind=str, choices=COMPUTE_TYPES,
                                doc="auto = int8 on CPU, float16 on CUDA; or a CTranslate2 type")
    intra_threads: int = setting(0, kind=int, low=0, doc="OpenMP threads per translator (0: CTranslate2's default)")
    inter_threads: int = setting(1, kind=int, low=1, doc="parallel translators (batches in flight)")
    chunk_size: int = setting(5000, kind=int, low=1, doc="captions per resumable chunk")
    prepare_workers: int = setting(0, kind=int, low=0, doc="processes for the Moses preparation (0: in this process)")

    def check(self) -> None:
        if self.max_batch_size < self.max_input_tokens:
            raise self.bad("max_batch_size", "must be at least translation.translate.max_input_tokens "
                           f"({self.max_input_tokens}) so that the longest input fits in a batch")


@dataclass(frozen=True)
class TranslateSection(TranslateSettings):
    """The whole ``translation.translate`` section: :class:`TranslateSettings` (what the
    ``translate-captions`` step takes) and the keys of the job that runs it, :data:`JOB_KEYS`."""

    #: Keys of the job, not of the step: the workflow reads them, the step never sees them.
    JOB_KEYS: ClassVar[tuple[str, ...]] = ("threads",)

    threads: int = setting(1, kind=int, low=1, doc="CPU threads of the translate job (the rule's threads)")

    def step_settings(self) -> TranslateSettings:
        """What the step takes: the section without the job's keys."""
        values = {k: v for k, v in self.to_dict().items() if k not in self.JOB_KEYS}
        return TranslateSettings(**values)

"""Plain text, SentencePiece and BLEU for the translation steps."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any, Iterable, Sequence


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _library_versions() -> dict[str, str]:
    import ctranslate2
    import sacrebleu
    import sentencepiece

    return {"ctranslate2": ctranslate2.__version__, "sentencepiece": sentencepiece.__version__,
            "sacrebleu": sacrebleu.__version__}


#: Leading bytes of gzip, which the text readers decompress transparently.
GZIP_MAGIC = b"\x1f\x8b"


def _binary_format(data: bytes) -> str | None:
    """The name of a (non-gzip) binary format ``data`` is in, for the error message instead of
    "invalid UTF-8"; ``None`` for anything else."""
    import re

    if re.match(rb"BZh[1-9]1AY&SY", data):
        return "bzip2"
    if data.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if data.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    if data.startswith(b"PK\x03\x04"):
        return "zip"
    if data.startswith(b"PAR1") and data.endswith(b"PAR1"):
        return "Parquet"
    return None


def _read_text_bytes(path: str | os.PathLike) -> tuple[bytes, bool]:
    """The bytes of a text file and whether they were gunzipped: a gzip-compressed file
    (recognised by its magic bytes, whatever its name; several members are read one after the
    other) is decompressed. A truncated or corrupt gzip file, or another binary format (bzip2,
    xz, zip, Parquet …), is a ``ValueError`` naming the file."""
    import gzip
    import zlib

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"text file not found: {path}")
    data = path.read_bytes()
    if data.startswith(GZIP_MAGIC):
        try:
            return gzip.decompress(data), True
        except (OSError, EOFError, zlib.error) as err:
            raise ValueError(f"{path}: corrupt or truncated gzip file ({err}); "
                             "recompress it or give the plain text") from None
    other = _binary_format(data)
    if other is not None:
        raise ValueError(f"{path}: a {other} file, not text; give plain UTF-8 text, one "
                         "sentence per line (gzip-compressed or not)")
    return data, False


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """Lines of a UTF-8 text file without their line ends (``\\n`` only; a final newline is
    optional); a gzip-compressed file is read transparently (by its magic bytes). Invalid
    UTF-8 or a NUL byte raises a ``ValueError`` naming the file and line."""
    path = Path(path)
    data, gunzipped = _read_text_bytes(path)
    where = f"{path} (gunzipped)" if gunzipped else str(path)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for number, raw in enumerate(lines, 1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{where}: line {number}: invalid UTF-8 at byte {err.start}") from None
        if "\x00" in text:
            raise ValueError(f"{where}: line {number}: contains a NUL byte")
        out.append(text.rstrip("\r"))
    return out


def write_text_lines(path: str | os.PathLike, lines: Sequence[str]) -> None:
    """One line per string (a line break inside one becomes a space, so the lines stay aligned),
    atomically; gzip-compressed (reproducibly: no name or time in the header) when ``path`` ends
    in ``.gz``."""
    import gzip

    from pseudopairs.core.io import atomic_path

    path = Path(path)
    data = "".join(line.replace("\r", " ").replace("\n", " ") + "\n" for line in lines).encode("utf-8")
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def read_parallel(source: str | os.PathLike, target: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Two aligned plain-text files (one sentence per line); the line counts must agree."""
    src, tgt = read_text_lines(source), read_text_lines(target)
    if len(src) != len(tgt):
        raise ValueError(f"parallel files differ in length: {source} has {len(src)} lines, "
                         f"{target} has {len(tgt)}")
    return src, tgt


class SentencePieceTokenizer:
    """A SentencePiece model used as the translation model's tokeniser: text → pieces → text."""

    def __init__(self, path: str | os.PathLike, *, model_proto: bytes | None = None) -> None:
        """Load the model file ``path``, or the serialised model ``model_proto`` (then ``path``
        only names it in messages)."""
        import sentencepiece as spm

        self.path = Path(path)
        if model_proto is None and not self.path.is_file():
            raise FileNotFoundError(f"SentencePiece model not found: {self.path}")
        processor = spm.SentencePieceProcessor()
        try:
            if model_proto is None:
                processor.Load(str(self.path))
            else:
                processor.LoadFromSerializedProto(model_proto)
        except (OSError, RuntimeError) as err:
            raise ValueError(f"{self.path}: not a SentencePiece model ({err})") from err
        self.processor = processor

    def encode(self, texts: Sequence[str]) -> list[list[str]]:
        return self.processor.encode(list(texts), out_type=str)

    def decode(self, pieces: Sequence[Sequence[str]]) -> list[str]:
        return [self.processor.decode(list(p)) if p else "" for p in pieces]

    def pieces(self) -> list[str]:
        """Every piece except the unknown and control symbols, in id order."""
        sp = self.processor
        return [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                if not (sp.is_unknown(i) or sp.is_control(i))]


def train_sentencepiece(lines: Iterable[str], *, vocab_size: int, model_type: str,
                        character_coverage: float) -> bytes:
    """Train a SentencePiece model on ``lines`` (one thread, input order kept: deterministic) and
    return the serialised model. ``hard_vocab_limit`` is off, so a small corpus gets fewer pieces
    instead of an error; ``<unk>`` is id 0 and there are no BOS/EOS/PAD pieces (the translation
    model has its own)."""
    import sentencepiece as spm

    lines = [line for line in lines if line.strip()]
    if not lines:
        raise ValueError("no non-empty training text for the SentencePiece model")
    buffer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=buffer, vocab_size=vocab_size,
            model_type=model_type, character_coverage=character_coverage, hard_vocab_limit=False,
            unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1, num_threads=1,
            shuffle_input_sentence=False, input_sentence_size=0, minloglevel=2)
    except RuntimeError as err:
        raise ValueError(f"SentencePiece training failed: {err}") from err
    return buffer.getvalue()


def model_vocabulary(tokenizer: SentencePieceTokenizer) -> list[str]:
    """OpenNMT-py vocabulary for a SentencePiece model: the four specials, then every piece."""
    from pseudopairs.translation.transformer import SPECIALS

    seen = set(SPECIALS)
    vocab = list(SPECIALS)
    for piece in tokenizer.pieces():
        if piece not in seen:
            seen.add(piece)
            vocab.append(piece)
    return vocab


def compute_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """Corpus BLEU (sacreBLEU defaults: 13a tokenisation, exp smoothing) of detokenised
    hypotheses against one reference each."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return {
        "bleu": round(float(score.score), 4),
        "precisions": [round(float(p), 4) for p in score.precisions],
        "brevity_penalty": round(float(score.bp), 4),
        "sys_len": int(score.sys_len),
        "ref_len": int(score.ref_len),
        "sentences": len(hypotheses),
        "signature": str(metric.get_signature()),
    }

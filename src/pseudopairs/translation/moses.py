"""The Moses preparation of translations (``translate-captions``): the same
:func:`pseudopairs.data.text.prepare_captions` as every other caption, in this process or in a
pool of worker processes."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path


@contextlib.contextmanager
def preparer(*, workers: int, lang: str, case: str | None, truecase_model: Path | None,
             tokenizer: tuple[str, Path | None] | None = None):
    """A function ``raw translations -> prepared text`` (Moses preparation via
    :func:`pseudopairs.data.text.prepare_captions`, or ``tokenizer`` = (kind, model) of
    :mod:`pseudopairs.data.tokenizers` for a language Moses has no rules for), in this process or
    in a pool of ``workers``; with ``case`` None the raw translations themselves (no preparation)."""
    if case is None:
        yield list
        return
    if workers <= 0:
        truecasers = _load_truecasers(lang, case, truecase_model)
        tokenizers = _load_tokenizers(lang, tokenizer)

        def prepare(raws: list[str]) -> list[str]:
            return _prepare_texts(raws, lang=lang, case=case, truecasers=truecasers, tokenizers=tokenizers)

        yield prepare
        return
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        def prepare(raws: list[str]) -> list[str]:
            size = max(1, math.ceil(len(raws) / workers))
            parts = [raws[i:i + size] for i in range(0, len(raws), size)]
            jobs = [pool.submit(_prepare_in_worker, part, lang, case,
                                None if truecase_model is None else str(truecase_model), tokenizer)
                    for part in parts]
            return [text for job in jobs for text in job.result()]

        yield prepare


def _load_truecasers(lang: str, case: str, truecase_model: Path | None) -> dict:
    from pseudopairs.data.text import load_truecaser

    if case == "truecase":
        if truecase_model is None:
            raise ValueError(f"case=truecase needs a truecase model for {lang!r} (--truecase-model {lang}=PATH)")
        return {lang: load_truecaser(truecase_model)}
    return {}


def _load_tokenizers(lang: str, tokenizer: tuple[str, Path | None] | None) -> dict:
    from pseudopairs.data.tokenizers import load_tokenizers

    return {} if tokenizer is None else load_tokenizers({lang: tokenizer})


def _prepare_texts(raws: list[str], *, lang: str, case: str, truecasers: dict,
                   tokenizers: dict | None = None) -> list[str]:
    import pandas as pd

    from pseudopairs.data.text import prepare_captions

    frame = pd.DataFrame({"raw": raws, "lang": [lang] * len(raws)})
    return prepare_captions(frame, case=case, truecasers=truecasers, source="translations",
                            tokenizers=tokenizers)["text"].tolist()


_WORKER_TRUECASERS: dict = {}


def _prepare_in_worker(raws: list[str], lang: str, case: str, truecase_model: str | None,
                       tokenizer: tuple[str, Path | None] | None = None) -> list[str]:
    key = (lang, case, truecase_model, tokenizer)
    if key not in _WORKER_TRUECASERS:
        _WORKER_TRUECASERS[key] = (
            _load_truecasers(lang, case, None if truecase_model is None else Path(truecase_model)),
            _load_tokenizers(lang, tokenizer))
    truecasers, tokenizers = _WORKER_TRUECASERS[key]
    return _prepare_texts(raws, lang=lang, case=case, truecasers=truecasers, tokenizers=tokenizers)

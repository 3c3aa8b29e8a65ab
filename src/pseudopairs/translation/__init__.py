"""Machine translation of captions (paper §2.3, §6): train a demo model, convert it (or the
published OpenNMT-py model) with CTranslate2, translate every source-language caption.

Four step commands:

``train-mt``
    Trains a small Transformer (:mod:`pseudopairs.translation.transformer`) on any parallel plain-text files,
    with a shared SentencePiece model trained on the training text, and writes the checkpoint in
    OpenNMT-py's layout (``model.pt``), ``sentencepiece.model``, ``bleu.json`` (sacreBLEU of
    greedy translations of the held-out pairs), ``valid.hyp.txt``, ``train_log.csv`` and
    ``settings.json``. Seeded and deterministic on CPU for a given thread count. Every
    ``checkpoint_every`` updates the whole training state is saved to ``OUTPUT_DIR.state.pt``
    (:mod:`~.fit`); rerun after a kill, the step resumes from it and writes the same model.

``convert-mt``
    Converts an OpenNMT-py checkpoint with CTranslate2's own ``OpenNMTPyConverter`` (weights-only
    unpickling, ``argparse.Namespace`` allow-listed). Checkpoints of OpenNMT-py 1.x/2.x, whose
    vocabularies are pickled torchtext/onmt objects, are first re-saved in the 3.x layout by a
    restricted unpickler that never imports or calls those classes
    (:func:`pseudopairs.translation.checkpoint.load_checkpoint`); the
    re-saved file then goes through the very same converter call. The output directory gets the
    SentencePiece model(s) and ``pseudopairs_mt.json`` (model id, source checkpoint and its
    SHA-256, quantization, converter version), so translation needs nothing else.

``convert-mt --spec``
    Any declared model (config ``translation.models.NAME``, :mod:`~.models`): an already converted
    CTranslate2 directory, an OpenNMT-py checkpoint, a Marian / OPUS-MT release
    (``MarianConverter``) or a Hugging Face MarianMT / M2M100 / NLLB directory
    (``TransformersConverter``), with the SentencePiece model(s) that come with it, its family's
    special tokens (NLLB's and M2M100's language tokens, Marian's ``</s>``) and its declared
    languages checked against its vocabulary (:mod:`~.converters`). ``translate-captions`` puts
    those tokens around the pieces, forces the target language's token and drops the special
    tokens from the translation, so it needs neither transformers nor torch.

``translate-captions``
    Translates every source-language caption of a caption table with ``Translator.
    translate_iterable`` (token-based batches), detokenises with the model's SentencePiece model
    and applies the same Moses preparation as every other caption
    (:func:`pseudopairs.data.text.prepare_captions`). The output is a caption table aligned row for row
    with the source-language rows of the input, plus a JSON sidecar. Plain text (one sentence
    per line, optionally gzipped) is translated as well, into a text file aligned line for line.
    Work is done in chunks kept under ``OUT.chunks/`` with a fingerprint of everything that
    changes the output, so a killed job resumes; CTranslate2 batches never cross chunk
    boundaries, so a resumed run writes the same output as an uninterrupted one.

``score-mt``
    sacreBLEU of a converted model on a test set, translated with the ``translation.translate``
    settings and code of ``translate-captions`` (beam search, length penalty, truncation).

The real model (:data:`PAPER_MODEL_URL`) is OpenNMT-py's pretrained English→German Transformer:
see :func:`paper_model_source`.

Modules: :mod:`~.settings` (the ``translation`` config section), :mod:`~.models` (declared
models), :mod:`~.converters` (their formats), :mod:`~.contract` (the workflow's side), :mod:`~.text` (plain or
gzipped text, SentencePiece, BLEU), :mod:`~.transformer` (the demo model), :mod:`~.fit` (its
resumable training loop), :mod:`~.train`, :mod:`~.checkpoint` (reading OpenNMT-py checkpoints),
:mod:`~.convert`, :mod:`~.chunks`, :mod:`~.moses` (Moses preparation of translations),
:mod:`~.translate` and :mod:`~.score`. Nothing here imports torch at import time: the
``translate-captions`` job's environment has none (``score-mt`` needs none either).
"""

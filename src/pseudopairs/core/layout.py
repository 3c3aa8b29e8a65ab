"""Where every file between steps lives (docs/architecture.md, "Files between steps"). Rules and
package code both use these, so a path is spelled in exactly one place. All paths are relative to
the working directory."""

from __future__ import annotations

RESULTS = "results"


def raw_captions(corpus: str, split: str) -> str:
    return f"{RESULTS}/captions/raw/{corpus}/{split}.parquet"


def captions(corpus: str, split: str) -> str:
    return f"{RESULTS}/captions/{corpus}/{split}.parquet"


def selected_captions(dataset: str) -> str:
    """A selection data set's training captions (:mod:`pseudopairs.data.select`)."""
    return f"{RESULTS}/captions/selected/{dataset}/train.parquet"


def images(corpus: str, split: str) -> str:
    return f"{RESULTS}/images/{corpus}/{split}.parquet"


def image_manifest(corpus: str, split: str) -> str:
    """Names (relative to the corpus' image folder), sizes and content digests of the image files
    a split needs (:mod:`pseudopairs.data.manifest`)."""
    return f"{RESULTS}/images/{corpus}/{split}.manifest.json"


def corpus_source(corpus: str) -> str:
    """A declared corpus' source files (metadata file or shards), keyed by content
    (:mod:`pseudopairs.data.manifest`): rule read_corpus reads the corpus when it changes."""
    return f"{RESULTS}/corpora/{corpus}/source.json"


def corpus_images_key(corpus: str) -> str:
    """What a declared corpus' image lists were made from (its source manifest and reading
    settings, hashed: :func:`pseudopairs.data.generic.images_key`)."""
    return f"{RESULTS}/corpora/{corpus}/images.key"


def downloads() -> str:
    """Where the real data's downloads are kept (``fetch``)."""
    return f"{RESULTS}/downloads"


def exported_corpus(name: str) -> str:
    """The demo world exported as a corpus in a user's format (rule export_world_corpus)."""
    return f"{RESULTS}/exported/{name}"


def features(corpus: str, split: str, fmt: str) -> str:
    return f"{RESULTS}/features/{corpus}/{split}.{fmt}"


def pretrained_features(arch: str) -> str:
    """State dict of the demo world's pretrained feature extractor (rule pretrain_features)."""
    return f"{RESULTS}/features/pretrained/{arch}.pt"


def skipped_images(corpus: str, split: str) -> str:
    return f"{RESULTS}/features/{corpus}/{split}.skipped.tsv"


def truecase_model(lang: str) -> str:
    return f"{RESULTS}/text/truecase.{lang}.model"


def sentencepiece_model(lang: str) -> str:
    """A language's SentencePiece tokenizer trained on its training captions (text.tokenizers)."""
    return f"{RESULTS}/text/sentencepiece.{lang}.model"


def model_dir(experiment: str, seed: int | str) -> str:
    return f"{RESULTS}/models/{experiment}/seed{seed}"


def checkpoint(experiment: str, seed: int | str) -> str:
    return f"{model_dir(experiment, seed)}/checkpoint.pt"


def train_log(experiment: str, seed: int | str) -> str:
    return f"{model_dir(experiment, seed)}/train_log.csv"


def model_vocabulary(experiment: str, seed: int | str) -> str:
    """The vocabulary a model was trained with (built from its own training captions, or its
    fine-tuning source's)."""
    return f"{model_dir(experiment, seed)}/vocab.json"


def metrics(experiment: str, seed: int | str) -> str:
    return f"{model_dir(experiment, seed)}/metrics.json"


def exported_model(experiment: str, seed: int | str) -> str:
    """The self-contained model folder ``pseudopairs export`` writes of a run (docs/search.md)."""
    return f"{RESULTS}/exported/{experiment}/seed{seed}"


def search_index(experiment: str, seed: int | str, corpus: str, split: str) -> str:
    """The search index of a corpus split's images and captions by an exported model."""
    return f"{RESULTS}/search/{experiment}/seed{seed}/{corpus}_{split}"


def smalr_dir(experiment: str, seed: int | str) -> str:
    """Paper 002's inputs of a ``hem`` model's training (rules fasttext, pretrain_hem)."""
    return f"{RESULTS}/smalr/{experiment}/seed{seed}"


def fasttext_vectors(experiment: str, seed: int | str, lang: str) -> str:
    """FastText vectors trained on the run's own ``lang`` training text (a ``.vec`` file)."""
    return f"{smalr_dir(experiment, seed)}/fasttext.{lang}.vec"


def fasttext_download(lang: str, *, gzipped: bool = True) -> str:
    """The published FastText vectors of ``lang`` (``fasttext.source: download``), as fetched."""
    return f"{RESULTS}/downloads/fasttext/{lang}.vec{'.gz' if gzipped else ''}"


def hem_vocabulary(experiment: str, seed: int | str) -> str:
    """HEM's vocabulary: each language's specific words and the latent token of every other."""
    return f"{smalr_dir(experiment, seed)}/hem_vocab.json"


def hem_init(experiment: str, seed: int | str) -> str:
    """HEM's pretrained rows, which the model's text embedding starts from."""
    return f"{smalr_dir(experiment, seed)}/hem_init.pt"


def pseudopair_dir(pseudopairs: str, seed: int | str) -> str:
    return f"{RESULTS}/pseudopairs/{pseudopairs}/seed{seed}"


def pseudopair_pairs(pseudopairs: str, seed: int | str) -> str:
    return f"{pseudopair_dir(pseudopairs, seed)}/pairs.parquet"


def pseudopair_mining_stats(pseudopairs: str, seed: int | str) -> str:
    return f"{pseudopair_dir(pseudopairs, seed)}/stats.json"


def pseudopair_captions(pseudopairs: str, seed: int | str, min_percentile: int | str) -> str:
    """The pairs kept at or above the ``min_percentile``-th percentile, as a caption table."""
    return f"{pseudopair_dir(pseudopairs, seed)}/captions.p{min_percentile}.parquet"


def pseudopair_stats() -> str:
    return f"{RESULTS}/pseudopair_stats.csv"


def pseudopair_figure(ext: str = "png") -> str:
    return f"{RESULTS}/figures/pseudopair_examples.{ext}"


def caption_use_plot() -> str:
    return f"{RESULTS}/figures/caption_use.png"


def similarity_histogram() -> str:
    return f"{RESULTS}/figures/pseudopair_similarity.png"


def training_curves() -> str:
    return f"{RESULTS}/figures/training_curves.png"


def table_figure(table: str) -> str:
    """A table drawn as bars (tables with ``figure: true``, e.g. paper 004's Figure 3)."""
    return f"{RESULTS}/figures/{table}.png"


def parameters_figure(name: str, ext: str = "png") -> str:
    """Mean recall against trainable parameters (a table's ``parameters_figure``: paper 002's
    Figure 3), as a PNG and its points as a CSV (:mod:`pseudopairs.report.parameters`)."""
    return f"{RESULTS}/figures/{name}.{ext}"


def rounds_summary(chain: str) -> str:
    """Iterated bootstrapping: one row per round of chain ``chain`` (:mod:`pseudopairs.report.rounds_summary`)."""
    return f"{RESULTS}/rounds_{chain}.csv"


def rounds_figure(chain: str) -> str:
    """The chain's metric and top-150 share per round (:mod:`pseudopairs.report.rounds_summary`)."""
    return f"{RESULTS}/figures/rounds_{chain}.png"


def world_manifest() -> str:
    """The demo world's scenes (and its settings): written last by rule world."""
    return f"{RESULTS}/world/manifest.json"


def world_caption_meanings() -> str:
    """What each caption of the demo world says about its scene (:mod:`pseudopairs.world.meaning`)."""
    return f"{RESULTS}/world/caption_meanings.parquet"


def world_parallel_text(split: str, lang: str) -> str:
    """The demo world's parallel text (one raw sentence per line) for the demo MT model."""
    return f"{RESULTS}/world/parallel/{split}.{lang}"


def translation_trained_model() -> str:
    """``train-mt`` output: the En->De model trained on parallel text (OpenNMT-py checkpoint
    ``model.pt``, ``sentencepiece.model``, ``bleu.json`` …)."""
    return f"{RESULTS}/translation_model/trained"


def translation_downloaded_model() -> str:
    """The published model's archive, extracted (checkpoint + SentencePiece model)."""
    return f"{RESULTS}/downloads/translation_model/extracted"


def translation_model() -> str:
    """The CTranslate2 model directory every translation job loads (``convert-mt`` output)."""
    return f"{RESULTS}/translation_model/ctranslate2"


def translation_named_model(name: str) -> str:
    """The CTranslate2 model directory of ``translation.models.NAME`` (``convert-mt --spec`` output)."""
    return f"{RESULTS}/translation_models/{name}/ctranslate2"


def translation_model_source(name: str) -> str:
    """A declared local translation model's files keyed by content (names relative to its folder,
    sizes, SHA-256: :mod:`pseudopairs.data.manifest`), what its conversion depends on."""
    return f"{RESULTS}/translation_models/{name}/source.json"


def translation_named_archive(name: str, suffix: str) -> str:
    """The downloaded archive of ``translation.models.NAME`` (``suffix``: .tar.gz, .zip …)."""
    return f"{RESULTS}/downloads/translation_models/{name}/model{suffix}"


def translation_named_extracted(name: str) -> str:
    """That archive, extracted."""
    return f"{RESULTS}/downloads/translation_models/{name}/extracted"


def translated_captions(dataset: str) -> str:
    """Machine-translated captions of data set ``dataset``, aligned with its source's caption table."""
    return f"{RESULTS}/translations/{dataset}/train.parquet"


def translated_captions_sidecar(dataset: str) -> str:
    """The JSON sidecar of :func:`translated_captions` (model, settings, counts)."""
    return f"{RESULTS}/translations/{dataset}/train.json"


def clc_parallel_text(split: str, lang: str) -> str:
    """Parallel text (one raw sentence per line, line k of every language the same sentence) of
    the translation models behind Cross-Lingual Consistency (paper 002 §3.4)."""
    return f"{RESULTS}/clc/parallel/{split}.{lang}"


def clc_trained_model(direction: str) -> str:
    """``train-mt`` output of one CLC translation direction (e.g. ``fr2de``)."""
    return f"{RESULTS}/clc/mt/{direction}/trained"


def clc_model(direction: str) -> str:
    """The CTranslate2 model of one CLC translation direction (``convert-mt`` output)."""
    return f"{RESULTS}/clc/mt/{direction}/ctranslate2"


def clc_translations(direction: str, split: str) -> str:
    """The translation corpus' ``split`` captions of the direction's source language, translated
    (a caption table aligned with its source rows by image_id and caption_idx)."""
    return f"{RESULTS}/clc/translations/{direction}/{split}.parquet"


def clc_translations_sidecar(direction: str, split: str) -> str:
    return f"{RESULTS}/clc/translations/{direction}/{split}.json"


def augmented_captions(dataset: str) -> str:
    """An augmented data set (paper 002 §4: a language's human captions plus machine
    translations of other languages' captions, every image with at least a given number)."""
    return f"{RESULTS}/smalr/augment/{dataset}/train.parquet"


def augmented_captions_sidecar(dataset: str) -> str:
    """The JSON sidecar of :func:`augmented_captions` (captions per source, per image)."""
    return f"{RESULTS}/smalr/augment/{dataset}/train.json"


def augment_translation(dataset: str, source: str) -> str:
    """Data set ``source``'s training captions translated into ``dataset``'s language (a caption
    table aligned with its source rows), one part of the augmented data set ``dataset``."""
    return f"{RESULTS}/smalr/augment/{dataset}/mt/{source}.parquet"


def augment_translation_sidecar(dataset: str, source: str) -> str:
    return f"{RESULTS}/smalr/augment/{dataset}/mt/{source}.json"


def clc_metrics(experiment: str, seed: int | str) -> str:
    """Retrieval with Cross-Lingual Consistency (CLC-A, CLC-C) of one model, beside metrics.json."""
    return f"{model_dir(experiment, seed)}/metrics.clc.json"


def table(name: str) -> str:
    return f"{RESULTS}/{name}.csv"


def method_check() -> str:
    """The paper's effects in this run (:mod:`pseudopairs.report.method_check`)."""
    return f"{RESULTS}/method_check.csv"


def training_runs() -> str:
    """How every table's training runs ended (:mod:`pseudopairs.report.method_check`)."""
    return f"{RESULTS}/training_runs.csv"


def tables_markdown() -> str:
    return f"{RESULTS}/tables.md"


def log(rule: str, name: str) -> str:
    return f"{RESULTS}/logs/{rule}/{name}.log"


def benchmark(rule: str, name: str) -> str:
    return f"{RESULTS}/benchmarks/{rule}/{name}.tsv"

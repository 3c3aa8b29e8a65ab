"""Settings of SMALR's pipeline steps (paper 002 §3.1): the config's ``fasttext`` section (the
``fasttext`` rule: word vectors trained on a run's own training text) and ``hem`` section (the
``pretrain_hem`` rule: HEM's latent vocabulary and assignment); an experiment may override
``hem`` entries (``experiments.NAME.hem``: the Language-Agnostic model is
``specific_per_language: 0``). Checked without importing torch or gensim. Values 002's text
states are marked "002"; the ones its copy leaves blank are our choices (docs/smalr.md)."""

from __future__ import annotations

from dataclasses import dataclass

from pseudopairs.core.settings import Settings, SettingsError, setting

PRETRAIN_MODES = ("straight_through", "soft")

#: Where an experiment's FastText vectors come from: trained on the run's own training text, or
#: the published Common Crawl vectors (002 §3.1) downloaded once per language and filtered to the
#: run's words.
FASTTEXT_SOURCES = ("train", "download")

#: fastText's published 300-d Common Crawl + Wikipedia vectors (Grave et al. 2018), ``{lang}`` an
#: ISO 639-1 code; no checksum is published (checksums.json records none yet).
PUBLISHED_FASTTEXT_URL = "https://dl.fbaipublicfiles.com/fasttext/vectors-crawl/cc.{lang}.300.vec.gz"

#: The ``fasttext`` settings that change a trained model (the ``fasttext`` job's spec carries only
#: these: where the vectors come from is the rule's input, not its parameter).
FASTTEXT_TRAINING = ("dim", "epochs", "window", "min_count")

_SHA256 = {"type": "object", "propertyNames": {"pattern": "^[a-z]{2}$"},
           "additionalProperties": {"type": ["string", "null"], "pattern": "^[0-9a-fA-F]{64}$"}}


@dataclass(frozen=True)
class FastTextSettings(Settings):
    """The config's ``fasttext`` section (gensim FastText, CBOW, one worker, the run's seed)."""

    SECTION = "fasttext"

    dim: int = setting(300, kind=int, low=1, doc="vector size (002: 300, as the published vectors)")
    epochs: int = setting(5, kind=int, low=1, doc="passes over the run's training text")
    window: int = setting(5, kind=int, low=1, doc="context window")
    min_count: int = setting(1, kind=int, low=1, doc="words seen fewer times get no vector of their own")
    source: str = setting("train", kind=str, choices=FASTTEXT_SOURCES,
                          doc="train: FastText trained on each run's own training captions; "
                              "download: the published vectors (rule download_fasttext, url), "
                              "filtered to the words of the run's training captions (002)")
    url: str = setting(PUBLISHED_FASTTEXT_URL, kind=str,
                       doc="source download: where each language's .vec or .vec.gz is, "
                           "'{lang}' replaced by the language code")
    sha256: dict = setting({}, kind=dict, shape=_SHA256,
                           doc="source download: language -> the file's SHA-256; absent or null "
                               "uses the one recorded in src/pseudopairs/data/checksums.json for "
                               "the URL (none recorded yet for fastText's files: unverified)")

    def check(self) -> None:
        if "{lang}" not in self.url:
            raise self.bad("url", "must contain '{lang}' (replaced by each language code)")
        for lang, digest in self.sha256.items():
            if digest is not None and (not isinstance(digest, str) or len(digest) != 64
                                       or any(c not in "0123456789abcdefABCDEF" for c in digest)):
                raise SettingsError(f"{self.SECTION}.sha256.{lang}: must be a 64-digit hex "
                                    f"SHA-256 or null, got {digest!r}")

    def download_url(self, lang: str) -> str:
        return self.url.replace("{lang}", lang)


#: The format tag of the pretrain_hem step's output (a HEM text encoder's initial rows), which
#: the training step checks when it reads it (pseudopairs.model.text_encoders.read_hem_init).
#: /2: also ``pretraining_parameters`` (the pretraining's parameters the model does not keep).
HEM_INIT_FORMAT = "pseudopairs.hem-init/2"


@dataclass(frozen=True)
class HemSettings(Settings):
    """The config's ``hem`` section: HEM's pretraining (:mod:`pseudopairs.smalr.hem_build`)."""

    SECTION = "hem"

    specific_per_language: int = setting(1000, kind=int, low=0,
                                         doc="each language's most frequent words that keep their own "
                                             "row (002: blank in our copy); 0 = Language-Agnostic")
    latent_size: int = setting(40000, kind=int, low=1, doc="latent vocabulary before unused tokens "
                                                           "are dropped (002: 40K)")
    pca_dim: int = setting(50, kind=int, low=1, doc="FastText vectors reduced to this (002: 50)")
    whiten: bool = setting(True, kind=bool,
                           doc="reduced vectors with unit variance per component (not in 002: "
                               "without it the demo's assignment starts and stays on a few "
                               "latent tokens)")
    margin: float = setting(0.2, kind=float, low=0, doc="Eq. (1)'s margin (002: blank)")
    top_k: int = setting(10, kind=int, low=1, doc="most violated negatives per pair (002: blank)")
    explore_top: int = setting(5, kind=int, low=1, doc="exploration: draw among this many best "
                                                       "tokens (002: blank)")
    explore_probability: float = setting(0.1, kind=float, low=0, high=1,
                                         doc="exploration: probability of a draw (002: blank)")
    learning_rate: float = setting(1e-3, kind=float, low=0, low_open=True, doc="Adam (002: blank)")
    steps: int = setting(500, kind=int, low=1, doc="pretraining minibatches")
    batch_images: int = setting(32, kind=int, low=2, doc="images per minibatch")
    sentences_per_image: int = setting(2, kind=int, low=2, doc="sentences of each image per minibatch")
    mode: str = setting("straight_through", kind=str, choices=PRETRAIN_MODES,
                        doc="how the hard assignment gets a gradient (docs/smalr.md)")



#: Where the parallel text of the CLC translation models comes from: the demo world's parallel
#: sentences realised in every CLC language, or the translation corpus' own train / val captions
#: (Multi30K task 1: 29K sentences per language, line k of every language the same image).
CLC_PARALLEL_SOURCES = ("world", "corpus")

#: How a table row aggregates the (language, query, image) scores of Cross-Lingual Consistency
#: (``tables.T.rows[i].clc``): the mean over languages (CLC-A) or 002's small MLP (CLC-C). Each
#: is a key of metrics.clc.json.
CLC_AGGREGATES = ("clc_a", "clc_c")


@dataclass(frozen=True)
class CLCSettings(Settings):
    """The config's ``clc`` section: Cross-Lingual Consistency at test time (002 §3.4). Its
    languages are those of the tables with CLC rows; every ordered pair of them is a translation
    direction, trained with ``translation.train`` (the one of ``translation.model`` reused)."""

    SECTION = "clc"

    parallel: str = setting("world", kind=str, choices=CLC_PARALLEL_SOURCES,
                            doc="parallel text of the translation models: world (demo) or corpus "
                                "(the translation corpus' train / val captions: Multi30K task 1)")
    parallel_train: int = setting(10000, kind=int, low=1,
                                  doc="parallel world: sentences per language for training")
    parallel_val: int = setting(500, kind=int, low=1,
                                doc="parallel world: sentences per language for validation (BLEU)")
    hidden: int = setting(32, kind=int, low=1, doc="CLC-C's hidden units (002: 32)")
    iterations: int = setting(30, kind=int, low=1, doc="CLC-C's full-batch steps (002: 30)")
    learning_rate: float = setting(1e-2, kind=float, low=0, low_open=True,
                                   doc="CLC-C's Adam (002: not given)")
    margin: float = setting(0.2, kind=float, low=0, doc="Eq. (3)'s margin (002: blank)")
    top_k: int = setting(10, kind=int, low=1, doc="most violated negatives (002: blank)")
    init: str = setting("uniform", kind=str, choices=("uniform", "constant"),
                        doc="CLC-C's initial weights (docs/smalr.md)")
    seed: int = setting(0, kind=int, low=0, doc="CLC-C's initialisation (+ the model's seed)")

"""Where every file between steps lives (DESIGN §4). Rules and package code both use these, so a
path is spelled in exactly one place. All paths are relative to the working directory."""

from __future__ import annotations

RESULTS = "results"


def raw_captions(corpus: str, split: str) -> str:
    return f"{RESULTS}/captions/raw/{corpus}/{split}.parquet"


def captions(corpus: str, split: str) -> str:
    return f"{RESULTS}/captions/{corpus}/{split}.parquet"


def images(corpus: str, split: str) -> str:
    return f"{RESULTS}/images/{corpus}/{split}.parquet"


def features(corpus: str, split: str, fmt: str) -> str:
    return f"{RESULTS}/features/{corpus}/{split}.{fmt}"


def skipped_images(corpus: str, split: str) -> str:
    return f"{RESULTS}/features/{corpus}/{split}.skipped.tsv"


def truecase_model(lang: str) -> str:
    return f"{RESULTS}/text/truecase.{lang}.model"


def vocabulary() -> str:
    return f"{RESULTS}/vocab.json"


def model_dir(experiment: str, seed: int | str) -> str:
    return f"{RESULTS}/models/{experiment}/seed{seed}"


def checkpoint(experiment: str, seed: int | str) -> str:
    return f"{model_dir(experiment, seed)}/checkpoint.pt"


def train_log(experiment: str, seed: int | str) -> str:
    return f"{model_dir(experiment, seed)}/train_log.csv"


def metrics(experiment: str, seed: int | str) -> str:
    return f"{model_dir(experiment, seed)}/metrics.json"


def table(name: str) -> str:
    return f"{RESULTS}/{name}.csv"


def tables_markdown() -> str:
    return f"{RESULTS}/tables.md"


def log(rule: str, name: str) -> str:
    return f"{RESULTS}/logs/{rule}/{name}.log"


def benchmark(rule: str, name: str) -> str:
    return f"{RESULTS}/benchmarks/{rule}/{name}.tsv"

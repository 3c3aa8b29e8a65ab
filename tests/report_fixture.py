"""Synthetic but realistic results for report tests and the report screenshot: a metrics.json
per experiment and seed of the shipped configuration's tables, in the layout the workflow writes
(results/models/<experiment>/seed<s>/metrics.json), so the report's steps run on them as on a
real run. Values: recalls that grow with the model's training data (c2i data sets, c2c pairs,
pseudopairs, fine-tuning) plus a fixed per-experiment offset and per-seed noise (seeded)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
LANGS = ("en", "de", "fr", "cs")


def shipped_config() -> dict:
    """config/experiments.yaml + config/config.yaml, checked (defaults filled, rounds expanded)."""
    from pseudopairs.workflow.config import check_config, load_config

    return check_config(load_config(REPO / "config" / "experiments.yaml", REPO / "config" / "config.yaml"))


def _stable(text: str) -> float:
    """A number in [-1, 1) fixed by ``text``."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 2**31 - 1.0


def _quality(config: dict, name: str) -> float:
    """How good a model of the synthetic world is (R@1 points over a base): corpus data helps
    most, c2c and translations some, pseudopairs and fine-tuning a little."""
    exp = config["experiments"][name]
    kinds = [("pseudo" if "pseudopairs" in config["datasets"].get(ds, {}) else
              "mt" if "translation" in config["datasets"].get(ds, {}) else "corpus") for ds in exp["c2i"]]
    pairs = exp.get("c2c", [])
    pseudo_pairs = sum(any("pseudopairs" in config["datasets"].get(d, {}) for d in pair) for pair in pairs)
    return (2.0 * kinds.count("corpus") + 1.2 * kinds.count("mt") + 0.5 * kinds.count("pseudo")
            + 1.4 * (len(pairs) - pseudo_pairs) + 0.3 * pseudo_pairs + (0.3 if exp.get("finetune") else 0.0)
            + 0.6 * _stable(name))


def _recalls(base: float, rng: np.random.Generator) -> dict:
    out = {}
    for direction, shift in (("i2t", 4.0), ("t2i", 0.0)):
        r1 = float(np.clip(base + shift + rng.normal(0, 0.6), 1, 95))
        r5 = float(np.clip(r1 + 24 + rng.normal(0, 0.4), 1, 98))
        r10 = float(np.clip(r5 + 11 + rng.normal(0, 0.3), 1, 99.5))
        out.update({f"{direction}_r1": r1, f"{direction}_r5": r5, f"{direction}_r10": r10,
                    f"{direction}_medr": 3.0})
    out["rsum"] = sum(out[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    out["mean_recall"] = out["rsum"] / 6
    return out


def metrics(config: dict, name: str, seed: int) -> dict:
    """One run's metrics.json (retrieval per language, the translation portion, translation R@1,
    how training ended)."""
    rng = np.random.default_rng([seed, int(abs(_stable(name)) * 1e6)])
    q = _quality(config, name)
    retrieval = {lang: _recalls(22.0 + q - (3.0 if lang == "de" else 0.0), rng) for lang in ("en", "de")}
    portion = {lang: _recalls(18.0 + q - 2.0 * k, rng) for k, lang in enumerate(LANGS)}
    c2c = len(config["experiments"][name].get("c2c", []))
    translation = {d: float(np.clip(55 + 4 * q + 8 * c2c + rng.normal(0, 1.5), 1, 99)) for d in ("en2de", "de2en")}
    updates = int(1200 + 300 * _stable(f"{name}{seed}"))
    return {"retrieval": retrieval, "portion_retrieval": portion, "translation": translation,
            "checkpoint": {"update": updates - 400, "updates": updates, "val_score": 2 * retrieval["en"]["rsum"],
                           "stop_reason": "early stopping: no improvement in 4 validations"}}


def write_metrics(root: Path, config: dict, tables: list[str] | None = None) -> list[Path]:
    """Write the metrics.json of every experiment and seed the ``tables`` (default: all) show,
    under ``root`` as the workflow lays them out; returns the paths."""
    from pseudopairs.core import layout
    from pseudopairs.report.contract import table_spec

    written = []
    for table in tables or list(config["tables"]):
        for name, by_seed in table_spec(config, table)["metrics"].items():
            for seed, path in by_seed.items():
                target = Path(root) / path
                if target.exists():
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps(metrics(config, name, int(seed)), indent=1))
                written.append(target)
    assert layout.metrics("x", 1).startswith(layout.RESULTS)
    return written

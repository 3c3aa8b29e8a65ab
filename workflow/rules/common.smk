# Shared names and input functions. Rules stay thin: inputs, outputs, params, one CLI call.
import json

from pseudopairs import experiments as ex
from pseudopairs import layout

WORLD = config["data"]["source"] == "world"
FMT = config["features"]["format"]
GPU = config["resources"]["gpu"]
SPLITS = list(ex.SPLITS)


wildcard_constraints:
    corpus="[A-Za-z0-9_]+",
    split="train|val|test",
    experiment="[A-Za-z0-9][A-Za-z0-9_-]*",
    seed="[0-9]+",
    lang="[a-z]{2}",
    table="table[0-9]+",
    pseudopairs="[A-Za-z0-9][A-Za-z0-9_.-]*",
    percentile="[0-9]+(\\.[0-9]+)?",


def as_json(value, *, sort_keys=True):
    """A config section as a compact JSON string (a rule param, so a change reruns the rule).
    ``sort_keys=False`` keeps the YAML order where it carries meaning."""
    return json.dumps(value, sort_keys=sort_keys, separators=(",", ":"))


def all_tables():
    return [layout.table(name) for name in config["tables"]]


def pseudopair_outputs():
    """§7.2 statistics and Figure 1, when the config declares pseudopair sets."""
    outputs = []
    if ex.pseudopair_sets(config):
        outputs += [layout.pseudopair_stats(), layout.caption_use_plot()]
    if config.get("pseudopair_stats", {}).get("figure"):
        outputs += [layout.pseudopair_figure("png"), layout.pseudopair_figure("html")]
    return outputs


def text_langs():
    """Languages whose captions are prepared (truecaser models are trained for these)."""
    langs = {d["lang"] for d in config["datasets"].values()}
    langs.update(config["evaluation"]["translation_langs"])
    return sorted(langs)


def truecase_inputs(wildcards):
    if config["text"]["case"] != "truecase":
        return []
    return [layout.truecase_model(lang) for lang in text_langs()]


def truecase_args(wildcards, input):
    if config["text"]["case"] != "truecase":
        return ""
    return " ".join(f"--truecase-model {lang}={layout.truecase_model(lang)}" for lang in text_langs())

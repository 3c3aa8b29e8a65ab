"""The model card (``README.md``) of an exported model, in the Hugging Face layout: YAML front
matter (languages, license, tags, ``library_name: pseudopairs``), then the model, its training
data (corpora, sizes, pseudopair set and filter, translation model), its test metrics, how it
was made (seed, package version and commit), how to use it, its intended use and its limits."""

from __future__ import annotations

import json

import yaml

METRIC_KEYS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum")


def front_matter(exported: dict) -> str:
    data = {"language": list(exported["languages"]), "license": "other",
            "license_name": "training-data-terms", "library_name": "pseudopairs",
            "pipeline_tag": "feature-extraction",
            "tags": ["image-text-retrieval", "multilingual", "multimodal", "pseudopairs",
                     f"similarity-{exported['similarity']}"]}
    return "---\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True) + "---\n"


def _dataset_line(row: dict) -> str:
    entry = row["entry"]
    line = (f"| {row['name']} | {row['lang']} | {entry.get('corpus', '?')} | {row['captions']:,} | "
            f"{row['images']:,} | ")
    notes = []
    if entry.get("pseudopairs"):
        filt = entry.get("min_percentile")
        notes.append(f"pseudopairs mined by {entry['pseudopairs']}"
                     + (f", kept above the {filt}th percentile of similarity" if filt else ", all pairs kept"))
        if row.get("pseudopairs"):
            mining = {k: v for k, v in row["pseudopairs"].items() if k != "paper"}  # not the paper's figures
            notes.append("mining " + json.dumps(mining, sort_keys=True))
    if entry.get("translation"):
        model = row.get("translation")
        notes.append(f"machine translation of {entry['translation']}"
                     + (f" (model: {json.dumps(model, sort_keys=True)})" if model else ""))
    return line + ("; ".join(notes) or "human captions") + " |"


def _metrics_table(metrics: dict) -> list[str]:
    lines = ["| language | " + " | ".join(METRIC_KEYS) + " |",
             "|---|" + "---|" * len(METRIC_KEYS)]
    for lang, values in metrics.get("retrieval", {}).items():
        lines.append(f"| {lang} | " + " | ".join(f"{values[k]:.2f}" for k in METRIC_KEYS if k in values) + " |")
    return lines


def model_card(exported: dict, *, metrics: dict, datasets: list[dict]) -> str:
    """The card's Markdown (front matter included)."""
    langs = ", ".join(exported["languages"])
    model, image, text = exported["model"], exported["image"], exported["text"]
    weights = image["weights"]
    lines = [front_matter(exported),
             f"# pseudopairs {exported['experiment']} (seed {exported['seed']})", "",
             f"An image–sentence ranking model in {langs} trained by the pseudopairs pipeline "
             "(Kádár et al., *Bootstrapping Disjoint Datasets for Multilingual Multimodal "
             "Representation Learning*): sentences and images are embedded in one "
             f"{exported['dim']}-d space, compared by {exported['similarity']} similarity.", "",
             "## Model", "",
             f"- text: {model['text_encoder']} word embeddings ({model['vocab_size']:,} words, "
             f"{model['embedding_dim']}-d), a GRU with {model['joint_dim']} units, L2-normalised; "
             f"text preparation: {text['case']}, tokenizers "
             + ", ".join(f"{lang} {entry['tokenizer']['kind']}" for lang, entry in text["languages"].items()),
             f"- image: torchvision {image['arch']} ({weights['kind']} weights {weights['name']}"
             + (f", SHA-256 {weights['sha256']}" if weights.get("sha256") else "")
             + f"), shorter side {image['resize']} px, centre crop {image['crop']} px, "
             f"{image['feature_dim']}-d features ({image['feature_dtype']}), then an affine map "
             f"({model['image_normalization']} features), L2-normalised", "",
             "## Training data", "",
             "| data set | language | corpus | captions | images | notes |",
             "|---|---|---|---|---|---|"]
    lines += [_dataset_line(row) for row in datasets]
    c2c = exported["training"]["spec"].get("c2c", [])
    if c2c:
        lines += ["", "Caption–caption pairs (c2c): " + ", ".join(pair["name"] for pair in c2c) + "."]
    checkpoint = exported["training"].get("checkpoint", {})
    lines += ["", f"Best validation score {checkpoint.get('val_score', '?')} at update "
                  f"{checkpoint.get('update', '?')} of {checkpoint.get('updates', '?')} "
                  f"({checkpoint.get('stop_reason', '?')}).", "",
              "## Test metrics", "",
              "Recall at K (percent) from the run's `metrics.json`, image→text (i2t) and "
              "text→image (t2i):", ""]
    lines += _metrics_table(metrics)
    if metrics.get("translation"):
        lines += ["", "Translation retrieval R@1: " + ", ".join(
            f"{k} {v:.2f}" for k, v in metrics["translation"].items())]
    lines += ["", "## Provenance", "",
              f"- experiment `{exported['experiment']}`, seed {exported['seed']}",
              f"- pseudopairs {exported['pseudopairs_version']}, commit "
              f"{exported.get('git_commit') or 'unknown'}",
              "- every file's SHA-256 is in `config.json`; `pseudopairs.load` checks them", "",
              "## How to use", "", "```python", "import pseudopairs", "",
              "model = pseudopairs.load(\"THIS_FOLDER\")",
              f"texts = model.encode_texts([\"...\"], lang=\"{exported['languages'][0]}\")  # (n, {exported['dim']})",
              "images = model.encode_images([\"photo.jpg\"])", "scores = texts @ images.T", "```", "",
              "## Intended use", "",
              f"Image search and image–text matching in {langs} on collections like the training "
              "data, and research on bootstrapping a language with few captions.", "",
              "## Limits", "",
              "- It knows only the words of its vocabulary: other words count as one unknown word.",
              f"- Sentences in languages other than {langs} are not supported.",
              "- Scores reflect the training data's images and captions (their domain, their biases); "
              "results on other images are unmeasured.",
              "- Pseudopairs and machine translations are noisy training signal; see the test metrics.",
              "- License: the code is MIT; the weights derive from the training data, whose terms apply.", ""]
    return "\n".join(lines)

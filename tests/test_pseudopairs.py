"""The pseudopair stage (paper §2.2, §7.2): mining with a trained model, percentile filters,
the caption tables training reads, the §7.2 statistics and Figure 1."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from conftest import run_settings
import torch
from PIL import Image

import pseudopairs.model.training as training
from pseudopairs.model import checkpoints, encode
from pseudopairs.report.figures import choose_examples, pseudopair_figure
from pseudopairs.mining.statistics import (image_agreement, pseudopair_statistics, pseudopair_statistics_reference,
                                           run_statistics, transferred_jaccard)
from pseudopairs.core.io import PAIR_COLUMNS, read_pairs
from pseudopairs.mining.job import MiningJob
from pseudopairs.mining.step import mine_pseudopairs, percentile_filter, pseudopair_caption_table
from pseudopairs.data.vocab import Vocabulary
from test_training import COLOURS, SETTINGS, SHAPES, _world

torch.set_num_threads(1)


def mining_job(root, *, queries, database, name="toy", source="en_de_c2c", engine=None,
               criterion="cosine", params=None) -> MiningJob:
    """The ``mine`` job (as JSON, the way the rule passes it) for the model trained under
    ``root``: queries and database are ``(caption table, lang)``."""
    return MiningJob.from_dict({
        "pseudopairs": name, "source": source, "seed": 1,
        "checkpoint": str(root / "model" / "checkpoint.pt"), "vocab": str(root / "model" / "vocab.json"),
        "queries": {"name": "queries", "captions": queries[0], "lang": queries[1]},
        "database": {"name": "database", "captions": database[0], "lang": database[1]},
        "engine": engine if engine is not None else {"device": "cpu"},
        "criterion": criterion, "params": params or {}})


def check_nearest_and_same_things(root, *, queries, database, pairs, query_lang, match_lang):
    """Assert that each pair's match is its query's most cosine-similar database caption (brute
    force in float64 with the model under ``root``) and that over 80 % of the matches name the
    query's colour and shape in the database's language. Returns the best similarity per query."""
    model, _ = checkpoints.load_model(root / "model" / "checkpoint.pt")
    vocab = Vocabulary.load(root / "model" / "vocab.json")
    q = encode.encode_captions_texts(model, vocab, queries["text"].tolist()).double()
    d = encode.encode_captions_texts(model, vocab, database["text"].tolist()).double()
    cos = (q @ d.T).numpy()
    best = cos.max(axis=1)
    chosen = cos[np.arange(len(queries)), pairs["match_row"].to_numpy()]
    assert np.allclose(chosen, best, atol=1e-6)
    assert pairs["match_text"].tolist() == database["text"].iloc[pairs["match_row"]].tolist()
    translate = dict(zip(COLOURS[query_lang] + SHAPES[query_lang], COLOURS[match_lang] + SHAPES[match_lang]))

    def names_same_thing(q_text, d_text):
        words = q_text.split()
        colour = next(w for w in words if w in COLOURS[query_lang])
        shape = next(w for w in words if w in SHAPES[query_lang])
        return translate[colour] in d_text.split() and translate[shape] in d_text.split()

    agree = np.mean([names_same_thing(a, b) for a, b in zip(pairs["query_text"], pairs["match_text"])])
    assert agree > 0.8, agree
    return best


# --------------------------------------------------------------------------------------------
# Filters


def test_percentile_filter_on_hand_computed_cases():
    scores = np.array([0.5, 0.1, 0.4, 0.2, 0.3])
    # numpy's linear percentile of [0.1 .. 0.5]: 25th = 0.2, 75th = 0.4
    assert percentile_filter(scores, min_percentile=0).tolist() == [True] * 5
    assert percentile_filter(scores, min_percentile=25).tolist() == [True, False, True, True, True]
    assert percentile_filter(scores, min_percentile=75).tolist() == [True, False, True, False, False]
    # "at or above": ties at the threshold are kept
    assert percentile_filter(np.ones(4), min_percentile=75).all()
    with pytest.raises(ValueError, match=r"min_percentile must be in \[0, 100\]"):
        percentile_filter(scores, min_percentile=101)


def _pairs(rows):
    """A pair table from (query image, query caption idx, match row, score) tuples."""
    return pd.DataFrame([{
        "query_image_id": img, "query_caption_idx": idx, "query_lang": "en", "query_text": f"q {img} {idx}",
        "match_row": row, "match_image_id": f"m{row}", "match_caption_idx": 0, "match_lang": "de",
        "match_text": f"text {row}", "match_raw": f"Text {row}.", "similarity": score, "score": score,
    } for img, idx, row, score in rows], columns=PAIR_COLUMNS)


def test_kept_pairs_stay_with_their_own_image_and_caption():
    # images with 3, 1 and 2 captions (indices not 0..4): nothing assumes blocks of five
    pairs = _pairs([("a", 0, 5, 0.9), ("a", 2, 6, 0.1), ("a", 7, 5, 0.8),
                    ("b", 3, 1, 0.2), ("c", 0, 2, 0.7), ("c", 1, 2, 0.3)])
    table = pseudopair_caption_table(pairs, min_percentile=50, dataset="pp")
    # median of the six scores = 0.5: kept 0.9, 0.8, 0.7
    assert table[["image_id", "caption_idx", "text", "raw"]].values.tolist() == [
        ["a", 0, "text 5", "Text 5."], ["a", 7, "text 5", "Text 5."], ["c", 0, "text 2", "Text 2."]]
    assert set(table["lang"]) == {"de"} and set(table["split"]) == {"train"} and set(table["dataset"]) == {"pp"}
    assert len(pseudopair_caption_table(pairs, min_percentile=0, dataset="pp")) == 6


# --------------------------------------------------------------------------------------------
# Mining with a trained model


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("pp")
    spec, vocab_path = _world(root / "world", n_train=60, n_val=40, seed=0)
    training.train(spec=spec, settings=run_settings({**SETTINGS, "max_updates": 200, "validate_every": 50}),
                   out_dir=root / "model", seed=1)
    return root, spec


def test_mining_takes_each_querys_most_cosine_similar_database_caption(trained, tmp_path):
    root, spec = trained
    captions = spec["c2i"][0]["captions"]
    job = mining_job(root, queries=(captions, "en"), database=(captions, "de"),
                     engine={"device": "cpu", "block_size": 7, "encode_batch_size": 16, "threads": 1})
    stats = mine_pseudopairs(job=job, pairs_path=tmp_path / "pairs.parquet",
                             stats_path=tmp_path / "stats.json", progress=False)
    pairs = read_pairs(tmp_path / "pairs.parquet")
    frame = pd.read_parquet(captions)
    en, de = frame[frame["lang"] == "en"].reset_index(drop=True), frame[frame["lang"] == "de"].reset_index(drop=True)
    assert len(pairs) == len(en) == stats["n_pairs"] == stats["n_queries"] == 300
    assert pairs["query_image_id"].tolist() == en["image_id"].tolist()
    assert pairs["query_caption_idx"].tolist() == en["caption_idx"].tolist()
    # brute force with the same encoders; the model learnt the world: the transferred German
    # caption names the query's colour and shape
    best = check_nearest_and_same_things(root, queries=en, database=de, pairs=pairs, query_lang="en", match_lang="de")
    assert np.allclose(pairs["similarity"], best, atol=1e-5) and np.allclose(pairs["score"], best, atol=1e-5)
    assert pairs["match_image_id"].tolist() == de["image_id"].iloc[pairs["match_row"]].tolist()
    saved = json.loads((tmp_path / "stats.json").read_text())
    assert saved["n_database"] == 300 and saved["n_unmatched"] == 0
    assert saved["settings"] == {"criterion": "cosine", "device": "cpu", "block_size": 7,
                                 "encode_batch_size": 16, "threads": 1} == job.settings_record()
    assert saved["used_share"] == pytest.approx(pairs["match_row"].nunique() / 300)
    assert not list(tmp_path.glob("*.tmp*"))


def test_mining_errors_name_the_input(trained, tmp_path):
    root, spec = trained
    captions = spec["c2i"][0]["captions"]
    job = mining_job(root, queries=(captions, "fr"), database=(captions, "de"), source="x")
    with pytest.raises(ValueError, match="no 'fr' captions to mine"):
        mine_pseudopairs(job=job, pairs_path=tmp_path / "p.parquet", stats_path=tmp_path / "s.json")
    with pytest.raises(ValueError, match=r"mining job.params: beam is not a parameter of any criterion"):
        mining_job(root, queries=(captions, "en"), database=(captions, "de"), params={"beam": 3})
    with pytest.raises(ValueError, match=r"mining job.engine: mining.device: must be auto, cpu, cuda or cuda:N"):
        mining_job(root, queries=(captions, "en"), database=(captions, "de"), engine={"device": "gpu"})
    assert not (tmp_path / "p.parquet").exists() and not (tmp_path / "s.json").exists()


# --------------------------------------------------------------------------------------------
# §7.2 statistics on hand-built pair sets


def test_statistics_of_a_hand_built_pair_set():
    # database of 4 captions; caption 0 transferred twice, caption 1 once: counts [2, 1, 0, 0]
    pairs = _pairs([("i1", 0, 0, 0.9), ("i2", 0, 0, 0.8), ("i3", 0, 1, 0.7)])
    s = run_statistics(pairs, n_database=4, database_unique_texts=4, top=1)
    assert s["n_pairs"] == 3
    assert s["used_share"] == pytest.approx(0.5) and s["unused_share"] == pytest.approx(0.5)
    assert s["used_share_unique"] == pytest.approx(0.5)
    assert s["top_share"] == pytest.approx(2 / 3)                   # the most used caption: 2 of 3 pairs
    assert s["gini"] == pytest.approx(14 / (2 * 16 * 0.75))          # Σ_ij |x_i - x_j| / (2 n² mean)
    assert s["robin_hood"] == pytest.approx(3 / (2 * 3))             # Σ |x_i - mean| / (2 Σ x_i)
    assert s["skewness"] == pytest.approx(0.28125 / 0.6875 ** 1.5)   # population skewness of counts


def test_jaccard_and_per_image_agreement():
    a = _pairs([("i1", 0, 0, 0.9), ("i2", 0, 0, 0.9), ("i3", 0, 1, 0.9)])
    b = _pairs([("i1", 0, 0, 0.9), ("i4", 0, 2, 0.9), ("i5", 0, 2, 0.9)])
    assert transferred_jaccard(a["match_row"], b["match_row"]) == pytest.approx(1 / 3)   # {0,1} vs {0,2}
    # caption 0 is transferred by both: A links it to i1, i2; B to i1 -> 1 of 2 links shared
    assert image_agreement(a, b) == pytest.approx(1 / 2)
    assert image_agreement(a, a) == 1.0


def test_statistics_table_per_seed_across_seeds_and_between_sets():
    sets = {("s", 1): _pairs([("i1", 0, 0, 0.9), ("i2", 0, 1, 0.8)]),
            ("s", 2): _pairs([("i1", 0, 0, 0.9), ("i2", 0, 2, 0.8)]),
            ("t", 1): _pairs([("i1", 0, 3, 0.9), ("i2", 0, 1, 0.8)]),
            ("t", 2): _pairs([("i1", 0, 3, 0.9), ("i2", 0, 1, 0.8)])}

    def load(name, seed):
        return sets[name, seed], {"n_database": 4, "n_database_unique_texts": 4}

    spec = {"sets": {"s": {"source": "src_s", "criterion": "cosine", "paper": {"used_share": 0.4}},
                     "t": {"source": "src_t", "criterion": "csls", "paper": {}}},
            "seeds": [1, 2], "top": 1,
            "compare": [{"a": "s", "b": "t", "paper": {"jaccard": 0.41}}]}
    frame = pseudopair_statistics(spec, load=load)
    row = frame[(frame.statistic == "used_share") & (frame.pseudopairs == "s") & (frame.seeds == "1")]
    assert row["value"].item() == pytest.approx(0.5) and row["paper"].item() == 0.4
    across = frame[(frame.statistic == "jaccard_seeds") & (frame.pseudopairs == "s")]
    assert across["seeds"].item() == "1,2" and across["value"].item() == pytest.approx(1 / 3)
    between = frame[(frame.statistic == "jaccard") & (frame.compared_with == "t")]
    assert between["seeds"].tolist() == ["1", "2"]
    assert between["value"].tolist() == pytest.approx([1 / 3, 0.0])   # {0,1}∩{1,3}; {0,2}∩{1,3}
    assert between["paper"].tolist() == [0.41, 0.41]
    assert math.isnan(frame[(frame.statistic == "gini") & (frame.pseudopairs == "t")]["paper"].iloc[0])


def _random_pairs(rng, n, *, n_database, n_images):
    """A random pair table: some queries without a match (row -1, as ``mutual`` mines)."""
    rows = rng.integers(0, n_database, n)
    rows[rng.random(n) < 0.1] = -1
    images = rng.integers(0, n_images, n)
    return pd.DataFrame({
        "query_image_id": [f"img{i}" for i in images], "query_caption_idx": rng.integers(0, 5, n),
        "query_lang": "en", "query_text": [f"q {i}" for i in range(n)], "match_row": rows,
        "match_image_id": [f"m{r}" for r in rows], "match_caption_idx": 0, "match_lang": "de",
        "match_text": [f"text {r % 7}" for r in rows], "match_raw": [f"Text {r}." for r in rows],
        "similarity": rng.random(n), "score": rng.random(n)}, columns=PAIR_COLUMNS)


def test_statistics_hold_one_set_at_a_time_and_equal_the_caching_computation():
    """18 sets × seeds are each loaded once, never two frames alive at once (the old code cached
    every frame until the end: at the paper's size tens of GB on a login node), and every value
    is exactly (==, not approx) what the frame-by-frame definitions give."""
    import gc
    import weakref

    names = [f"set{i}" for i in range(6)]
    seeds = [1, 2, 3]
    spec = {"sets": {n: {"source": f"src{i % 2}", "criterion": "cosine", "paper": {}}
                     for i, n in enumerate(names)},
            "seeds": seeds, "top": 5,
            "compare": [{"a": "set0", "b": "set1", "paper": {}}, {"a": "set2", "b": "set5", "paper": {}}]}
    alive: list = []
    loads: list = []
    most_alive = 0

    def load(name, seed):
        nonlocal most_alive
        gc.collect()
        most_alive = max(most_alive, sum(ref() is not None for ref in alive))
        loads.append((name, seed))
        rng = np.random.default_rng(names.index(name) * 10 + seed)
        frame = _random_pairs(rng, 400, n_database=60, n_images=90)
        alive.append(weakref.ref(frame))
        return frame, {"n_database": 60, "n_database_unique_texts": 7}

    frame = pseudopair_statistics(spec, load=load)
    assert most_alive == 0                                   # the previous frame was gone at each load
    assert sorted(loads) == sorted((n, s) for n in names for s in seeds)   # each once
    reference = pseudopair_statistics_reference(spec, load=lambda name, seed: (
        _random_pairs(np.random.default_rng(names.index(name) * 10 + seed), 400, n_database=60, n_images=90),
        {"n_database": 60, "n_database_unique_texts": 7}))
    expected = {(r.pseudopairs, r.compared_with, r.statistic, r.seeds): r.value for r in reference.itertuples()}
    got = {(r.pseudopairs, r.compared_with, r.statistic, r.seeds): r.value for r in frame.itertuples()}
    assert set(got) == set(expected) and len(frame) == len(expected)
    for key, value in expected.items():
        assert got[key] == value or (math.isnan(got[key]) and math.isnan(value)), key
    agreements = [v for k, v in got.items() if k[2] in ("agreement", "agreement_seeds")]
    assert all(0 < v < 1 for v in agreements)                # the check compares non-trivial values


def test_the_statistics_step_reads_only_the_columns_it_needs(tmp_path):
    """The default load reads three columns of a pairs file (a 566K-pair table's texts are most of
    its memory); a file lacking one is named with the missing column."""
    from pseudopairs.mining.statistics import STATS_PAIR_COLUMNS

    pairs = _pairs([("i1", 0, 0, 0.9), ("i2", 0, 1, 0.8)])
    pairs.to_parquet(tmp_path / "pairs.parquet")
    assert list(read_pairs(tmp_path / "pairs.parquet", columns=STATS_PAIR_COLUMNS).columns) == STATS_PAIR_COLUMNS
    pairs.drop(columns=["match_text"]).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"bad.parquet: not a pseudopair file, missing columns \['match_text'\]"):
        read_pairs(tmp_path / "bad.parquet", columns=STATS_PAIR_COLUMNS)
    (tmp_path / "stats.json").write_text(json.dumps({"n_database": 4, "n_database_unique_texts": 4}))
    spec = {"sets": {"s": {"source": "x", "criterion": "cosine"}}, "seeds": [1], "top": 1, "compare": [],
            "files": {"s": {"1": {"pairs": str(tmp_path / "pairs.parquet"), "stats": str(tmp_path / "stats.json")}}}}
    value = dict(zip(pseudopair_statistics(spec)["statistic"], pseudopair_statistics(spec)["value"]))
    assert value["used_share"] == 0.5 and value["n_pairs"] == 2


# --------------------------------------------------------------------------------------------
# Figure 1


def test_figure_shows_the_caption_each_set_transferred(tmp_path):
    a = _pairs([("i1", 0, 0, 0.9), ("i1", 1, 1, 0.9), ("i2", 0, 2, 0.9), ("i3", 0, 3, 0.9)])
    b = _pairs([("i1", 0, 4, 0.9), ("i2", 0, 5, 0.9)])          # i3 has no match in b
    examples = choose_examples({"A": a, "B": b}, n_images=5, seed=0)
    assert examples["image_id"].tolist() == ["i1", "i2"]
    assert examples[["A", "B"]].values.tolist() == [["Text 0.", "Text 4."], ["Text 2.", "Text 5."]]
    image_rows = []
    for name in ("i1", "i2", "i3"):
        path = tmp_path / f"{name}.png"
        Image.new("RGB", (32, 32), (200, 30, 30)).save(path)
        image_rows.append({"image_id": name, "path": str(path)})
    pd.DataFrame(image_rows).to_parquet(tmp_path / "images.parquet")
    for name, frame in (("A", a), ("B", b)):
        frame.to_parquet(tmp_path / f"{name}.parquet")
    spec = {"pairs": {"A": str(tmp_path / "A.parquet"), "B": str(tmp_path / "B.parquet")},
            "sources": {"A": "de_coco", "B": "en_de_coco_c2c"}, "seed": 1,
            "images": str(tmp_path / "images.parquet"), "n_images": 2, "sample_seed": 0}
    pseudopair_figure(spec, png=tmp_path / "fig.png", html_path=tmp_path / "fig.html")
    with Image.open(tmp_path / "fig.png") as img:
        assert img.size[0] > 500 and img.size[1] > 200
    page = (tmp_path / "fig.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    assert "Text 4." in page and "Text 5." in page and "source en_de_coco_c2c" in page
    with pytest.raises(ValueError, match="no query image has a match in every set"):
        choose_examples({"A": a, "C": _pairs([("zz", 0, 1, 0.5)])}, n_images=2, seed=0)

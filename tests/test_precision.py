"""Pseudopair precision (beyond the paper, demo world): what each caption says
(pseudopairs.world.meaning, written by the world step) judged against the query image's scene
(pseudopairs.mining.precision), and its statistics in results/pseudopair_stats.csv."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from pseudopairs.core.io import PAIR_COLUMNS
from pseudopairs.mining.precision import PRECISION_STATISTICS, judge_caption, pseudopair_precision
from pseudopairs.mining.statistics import pseudopair_statistics, pseudopair_statistics_reference
from pseudopairs.world import generate
from pseudopairs.world.grammar import BackgroundMention, CaptionSpec, Mention, ObjectGroup
from pseudopairs.world.meaning import (ATTRIBUTES, BACKGROUND, caption_meaning, holds, said_count,
                                       scene_subjects)

# ------------------------------------------------------------------------------------- meaning


def test_a_caption_spec_says_what_its_mentions_and_background_mention():
    groups = (ObjectGroup("ball", "red", "large", "plain", 2), ObjectGroup("box", "blue", "small", "striped", 1))
    spec = CaptionSpec("fragment", 0, (Mention(0, "number", 0, size=1, colour=True, texture=False),
                                       Mention(1, "a", 2, size=None, colour=False, texture=True)),
                       BackgroundMention(0, definite=True, adjective=True))
    # "Two large red balls and a striped box on the green lawn."
    assert caption_meaning(spec, groups=groups, background="lawn", background_colour="green") == [
        (0, "kind", "ball"), (0, "count", "2"), (0, "colour", "red"), (0, "size", "large"),
        (1, "kind", "box"), (1, "count", "1"), (1, "texture", "striped"),
        (BACKGROUND, "background", "lawn"), (BACKGROUND, "background_colour", "green")]
    # "Some balls." — no colour, no background: only kind and "at least two"
    bare = CaptionSpec("fragment", 0, (Mention(0, "some", 0, None, False, False),), None)
    assert caption_meaning(bare, groups=groups, background="lawn", background_colour="green") == [
        (0, "kind", "ball"), (0, "count", "2+")]
    # the divergent world's unrendered details (condition, material) are shared fields of
    # Mention and ObjectGroup, so they are read generically
    assert ATTRIBUTES == ("kind", "count", "colour", "size", "texture", "condition", "material",
                          "background", "background_colour")


def test_said_counts_and_what_holds():
    assert [said_count(q, 3) for q in ("a", "number", "some", "several")] == ["3", "3", "2+", "2+"]
    with pytest.raises(ValueError, match="unknown quantity 'many'"):
        said_count("many", 3)
    assert holds("2+", 3) and holds("2+", 2) and not holds("2+", 1) and not holds("2+", None)
    assert holds("2", 2) and not holds("2", 3) and holds("red", "red") and not holds("red", "blue")


# ------------------------------------------------------------------ precision, by hand

# three COCO scenes
SCENES = {
    "c1": {"background": "lawn", "background_colour": "green",
           "objects": [{"kind": "ball", "colour": "red", "size": "large", "texture": "plain", "count": 2},
                       {"kind": "box", "colour": "blue", "size": "small", "texture": "striped", "count": 1}]},
    "c2": {"background": "road", "background_colour": "grey",
           "objects": [{"kind": "kite", "colour": "yellow", "size": "large", "texture": "checkered", "count": 1}]},
    "c3": {"background": "beach", "background_colour": "yellow",
           "objects": [{"kind": "ball", "colour": "blue", "size": "small", "texture": "dotted", "count": 3}]},
}
# four German captions (image id, lang, caption index) -> what they say
MEANINGS = {
    # "Zwei rote Bälle auf dem grünen Rasen."
    ("g1", "de", 0): [(0, "kind", "ball"), (0, "count", "2"), (0, "colour", "red"),
                      (-1, "background", "lawn"), (-1, "background_colour", "green")],
    # "Ein blauer Ball."
    ("g2", "de", 0): [(0, "kind", "ball"), (0, "count", "1"), (0, "colour", "blue")],
    # "Einige Bälle neben einem Drachen am Strand."
    ("g3", "de", 0): [(0, "kind", "ball"), (0, "count", "2+"), (1, "kind", "kite"), (1, "count", "1"),
                      (-1, "background", "beach")],
    # "Eine gestreifte Kiste auf der Straße."
    ("g4", "de", 0): [(0, "kind", "box"), (0, "count", "1"), (0, "texture", "striped"),
                      (-1, "background", "road")],
}
# (query image, mined caption) and what holds of each: overall; kind, count, colour, texture,
# background, background colour (None = not judged)
HAND = [
    ("c1", "g1"),   # all holds
    ("c1", "g2"),   # a ball, but two red ones: count and colour wrong
    ("c1", "g4"),   # the striped box holds, the road does not
    ("c2", "g3"),   # no ball (its count not judged), the kite's count holds, not a beach
    ("c3", "g3"),   # three balls hold "some", no kite, the beach holds
    ("c3", "g2"),   # a blue ball, but three of them
]


def _pairs(links, unmatched=0):
    rows = [{"query_image_id": q, "query_caption_idx": 0, "query_lang": "en", "query_text": "q",
             "match_row": int(g[1:]) - 1 if g[1:].isdigit() else i, "match_image_id": g, "match_caption_idx": 0, "match_lang": "de",
             "match_text": g, "match_raw": g, "similarity": 0.5, "score": 0.5} for i, (q, g) in enumerate(links)]
    rows += [{"query_image_id": "c2", "query_caption_idx": 1, "query_lang": "en", "query_text": "q",
              "match_row": -1, "match_image_id": "", "match_caption_idx": -1, "match_lang": "",
              "match_text": "", "match_raw": "", "similarity": math.nan, "score": math.nan}] * unmatched
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def test_each_caption_is_judged_detail_by_detail_against_the_scene():
    judged = [judge_caption(MEANINGS[g, "de", 0], scene_subjects(SCENES[q])) for q, g in HAND]
    assert judged == [
        (True, {"kind": True, "count": True, "colour": True, "background": True, "background_colour": True}),
        (False, {"kind": True, "count": False, "colour": False}),
        (False, {"kind": True, "count": True, "texture": True, "background": False}),
        (False, {"kind": False, "count": True, "background": False}),
        (False, {"kind": False, "count": True, "background": True}),
        (False, {"kind": True, "count": False, "colour": True}),
    ]


def test_precision_of_a_hand_built_pair_set():
    # 6 matched pairs (+ one query without a match, as `mutual` mines: left out)
    value = pseudopair_precision(_pairs(HAND, unmatched=1), meanings=MEANINGS, scenes=SCENES)
    assert list(value) == list(PRECISION_STATISTICS)
    assert value["precision"] == pytest.approx(1 / 6)            # only c1 <- g1 holds throughout
    assert value["precision_kind"] == pytest.approx(4 / 6)       # g3's ball or kite missing twice
    assert value["precision_count"] == pytest.approx(4 / 6)      # g2's "one" fails on 2 and 3 balls
    assert value["precision_colour"] == pytest.approx(2 / 3)     # red on c1 yes, blue on c1 no, on c3 yes
    assert value["precision_texture"] == 1.0                     # the striped box
    assert value["precision_background"] == pytest.approx(2 / 4)
    assert value["precision_background_colour"] == 1.0           # judged once: the lawn holds
    assert math.isnan(value["precision_size"])                   # no caption says a size


def test_precision_names_what_it_cannot_find():
    with pytest.raises(ValueError, match=r"no meaning for the mined caption \('g9', 'de', 0\)"):
        pseudopair_precision(_pairs([("c1", "g9")]), meanings=MEANINGS, scenes=SCENES)
    with pytest.raises(ValueError, match=r"no scene for the query image 'c9'"):
        pseudopair_precision(_pairs([("c9", "g1")]), meanings=MEANINGS, scenes=SCENES)
    with pytest.raises(ValueError, match=r"lack columns \['match_image_id'\]"):
        pseudopair_precision(_pairs(HAND).drop(columns=["match_image_id"]), meanings=MEANINGS, scenes=SCENES)


# ------------------------------------------------------- the statistics step, with a world


def _write_meanings(tmp_path):
    rows = [("m30k", "train", g, lang, idx, m, a, v) for (g, lang, idx), details in MEANINGS.items()
            for m, a, v in details]
    # the same key in another corpus (m30k_task1 shares m30k's image ids) must not be read
    rows.append(("m30k_task1", "train", "g2", "de", 0, 0, "kind", "kite"))
    generate.meaning_frame(rows).to_parquet(tmp_path / "caption_meanings.parquet")
    manifest = {"scenes": {"coco": {"train": [{"image_id": k, **v} for k, v in SCENES.items()]}}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return {"captions": str(tmp_path / "caption_meanings.parquet"), "scenes": str(tmp_path / "manifest.json"),
            "database_corpus": {"s": "m30k"}}


def test_the_statistics_step_adds_precision_in_the_demo_world_only(tmp_path):
    sets = {1: _pairs(HAND, unmatched=1), 2: _pairs([("c1", "g1"), ("c3", "g3")])}

    def load(name, seed):
        return sets[seed], {"n_database": 4, "n_database_unique_texts": 4}

    spec = {"sets": {"s": {"source": "src", "criterion": "cosine", "paper": {}}}, "seeds": [1, 2], "top": 1,
            "compare": []}
    plain = pseudopair_statistics(spec, load=load)
    assert not plain["statistic"].str.startswith("precision").any()   # real data: no meanings, absent
    frame = pseudopair_statistics({**spec, "meanings": _write_meanings(tmp_path)}, load=load)
    got = {(r.statistic, r.seeds): r.value for r in frame.itertuples()}
    assert got["precision", "1"] == pytest.approx(1 / 6) and got["precision", "2"] == 0.5
    assert got["precision_kind", "2"] == 0.5 and got["precision_colour", "2"] == 1.0
    assert math.isnan(frame[frame.statistic == "precision"]["paper"].iloc[0])
    # the rows of the statistics without meanings are unchanged, the precision rows follow them
    assert frame[~frame["statistic"].str.startswith("precision")].reset_index(drop=True).equals(plain)
    reference = pseudopair_statistics_reference({**spec, "meanings": _write_meanings(tmp_path)}, load=load)
    assert {(r.statistic, r.seeds): r.value for r in reference.itertuples()}.keys() == got.keys()


def test_the_step_reads_the_pair_columns_precision_needs_from_the_files(tmp_path):
    _pairs(HAND).to_parquet(tmp_path / "pairs.parquet")
    (tmp_path / "stats.json").write_text(json.dumps({"n_database": 4, "n_database_unique_texts": 4}))
    spec = {"sets": {"s": {"source": "x", "criterion": "cosine"}}, "seeds": [1], "top": 1, "compare": [],
            "files": {"s": {"1": {"pairs": str(tmp_path / "pairs.parquet"), "stats": str(tmp_path / "stats.json")}}},
            "meanings": _write_meanings(tmp_path)}
    value = dict(zip(*(pseudopair_statistics(spec)[c] for c in ("statistic", "value"))))
    assert value["precision"] == pytest.approx(1 / 6) and value["n_pairs"] == 6
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(ValueError, match=r"manifest.json: cannot read the demo world's manifest"):
        pseudopair_statistics(spec)


@pytest.mark.parametrize("languages", [{}, {"languages": "divergent", "unrendered": 0.5, "visible_detail": 0.5}])
def test_the_world_writes_what_each_caption_says_and_it_holds_of_its_own_scene(tmp_path, languages):
    """Every caption the world writes has its meaning, and every caption paired with its own
    image is precise in every attribute (the meanings and the scenes agree), in the aligned world
    and in the demo's divergent one (hypernyms, unrendered conditions and materials)."""
    from pseudopairs.mining.precision import load_meanings, load_scenes

    settings = {"seed": 7, "image_size": 32, "captions_per_image": 5, **languages,
                "images": {"m30k": {"train": 4, "val": 2, "test": 2}, "coco": {"train": 4, "val": 2, "test": 2}}}
    generate.build_world(settings, tmp_path / "results")
    root = tmp_path / "results"
    meanings = load_meanings(root / "world/caption_meanings.parquet", corpora={"m30k", "m30k_task1", "coco"})
    scenes = load_scenes(root / "world/manifest.json")
    for corpus in ("m30k", "m30k_task1", "coco"):
        for split in ("train", "val", "test"):
            captions = pd.read_parquet(root / f"captions/raw/{corpus}/{split}.parquet")
            keys = list(zip(captions["image_id"], captions["lang"], captions["caption_idx"]))
            assert set(keys) <= set(meanings[corpus])
            own = _pairs(list(zip(captions["image_id"], captions["image_id"])))
            own["match_lang"], own["match_caption_idx"] = captions["lang"], captions["caption_idx"]
            value = pseudopair_precision(own, meanings=meanings[corpus], scenes=scenes)
            assert value["precision"] == 1.0 and value["precision_kind"] == 1.0, (corpus, split)
            assert all(v == 1.0 or math.isnan(v) for v in value.values())
    assert sum(map(len, meanings.values())) == sum(
        len(pd.read_parquet(root / f"captions/raw/{c}/{s}.parquet"))
        for c in ("m30k", "m30k_task1", "coco") for s in ("train", "val", "test"))
    # a German caption and the English one of the same parallel (task1) spec say the same
    assert meanings["m30k_task1"]["m30k_train_000000", "de", 0] == meanings["m30k_task1"]["m30k_train_000000", "en", 0]


# ------------------------------------------------------------------ tables.md and the report


def _stats_rows():
    rows = []
    for seed, (overall, colour) in (("1", (0.5, 0.75)), ("2", (0.7, math.nan))):
        for statistic, value in (("used_share", 0.4), ("precision", overall), ("precision_kind", 0.9),
                                 ("precision_colour", colour)):
            rows.append({"statistic": statistic, "pseudopairs": "de_coco", "criterion": "cosine",
                         "source": "de_coco", "compared_with": "", "seeds": seed, "value": value,
                         "paper": math.nan})
    return pd.DataFrame(rows)


def test_tables_md_has_a_precision_table_in_the_demo_and_says_why_not_otherwise():
    from pseudopairs.report import tables

    text = tables.markdown_pseudopair_stats(_stats_rows())
    assert "| pseudopair set | criterion | all details % | kind % | colour % |" in text
    # mean ± sample sd over seeds in percent; colour judged at seed 1 only
    assert f"| de_coco | cosine | 60.0 ± {100 * math.sqrt(0.02):.1f} | 90.0 ± 0.0 | 75.0 |" in text
    plain = tables.markdown_pseudopair_stats(_stats_rows().query("statistic == 'used_share'"))
    assert "precision of the pseudopairs" not in plain and tables.NO_PRECISION_NOTE in plain


def test_the_report_shows_the_precision_table_in_the_demo_and_says_why_not_otherwise():
    from pseudopairs.report import html as pages_html
    from pseudopairs.report import tables

    section = pages_html.pseudopair_stats_section(_stats_rows(), "§7.2")
    assert section.count("<table") == 2 and "precision of the pseudopairs (demo world)</h3>" in section
    precision = section[section.index("precision of the pseudopairs"):]
    assert ">precision kind<" in precision and ">90.0<" in precision and ">75.0<" in precision
    plain = pages_html.pseudopair_stats_section(_stats_rows().query("statistic == 'used_share'"), "§7.2")
    assert plain.count("<table") == 1 and tables.NO_PRECISION_NOTE.split(" — ")[0] in plain

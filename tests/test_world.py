"""Tests of the demo world: grammar agreement, determinism, tables, distribution shift."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from pseudopairs.core.io import IMAGE_COLUMNS, RAW_CAPTION_COLUMNS
from pseudopairs.world import content, english, generate, german, render
from pseudopairs.world import scene as scenes
from pseudopairs.world.english import english_noun_phrase, english_object_phrase
from pseudopairs.world.german import (GermanNoun, german_noun_phrase, german_object_phrase,
                                      german_prepositional_phrase)
from pseudopairs.world.grammar import (NOUN_VARIANTS, BackgroundMention, CaptionSpec, Mention,
                                       ObjectGroup, kind_words, realise, sample_caption_spec)
from pseudopairs.world.settings import WorldSettings

SETTINGS = {"seed": 7, "image_size": 64, "captions_per_image": 5,
            "images": {"m30k": {"train": 6, "val": 3, "test": 3},
                       "coco": {"train": 6, "val": 3, "test": 3}}}
CORPORA = {"m30k": ("m30k", "m30k_task1"), "coco": ("coco",)}


# ---------------------------------------------------------------------------------- grammar


@pytest.mark.parametrize("args, expected", [
    # masculine (Ball)
    (("ball", "red", 1, "large", "ein", "nom"), "ein großer roter Ball"),
    (("ball", "red", 1, "large", "ein", "acc"), "einen großen roten Ball"),
    (("ball", "red", 1, "large", "ein", "dat"), "einem großen roten Ball"),
    (("ball", "red", 1, "large", "der", "nom"), "der große rote Ball"),
    (("ball", "red", 1, "large", "der", "acc"), "den großen roten Ball"),
    (("ball", "red", 1, "large", "der", "dat"), "dem großen roten Ball"),
    (("ball", "red", 1, None, "kein", "nom"), "kein roter Ball"),
    (("ball", "red", 1, None, "kein", "dat"), "keinem roten Ball"),
    (("ball", "white", 3, None, "number", "nom"), "drei weiße Bälle"),
    (("ball", "white", 3, None, "number", "dat"), "drei weißen Bällen"),
    (("ball", "white", 2, None, "der", "dat"), "den weißen Bällen"),
    (("ball", "red", 2, None, "kein", "nom"), "keine roten Bälle"),
    (("ball", "red", 2, None, "kein", "dat"), "keinen roten Bällen"),
    (("ball", "red", 2, None, "mehrere", "dat"), "mehreren roten Bällen"),
    (("ball", "red", 2, None, "einige", "nom"), "einige rote Bälle"),
    (("ball", "red", 1, None, "none", "nom"), "roter Ball"),
    (("ball", "red", 1, None, "none", "dat"), "rotem Ball"),
    # feminine (Kiste)
    (("box", "blue", 1, "small", "ein", "nom"), "eine kleine blaue Kiste"),
    (("box", "blue", 1, "small", "ein", "acc"), "eine kleine blaue Kiste"),
    (("box", "blue", 1, "small", "ein", "dat"), "einer kleinen blauen Kiste"),
    (("box", "blue", 1, "small", "der", "nom"), "die kleine blaue Kiste"),
    (("box", "blue", 1, "small", "der", "dat"), "der kleinen blauen Kiste"),
    (("box", "red", 2, "large", "number", "nom"), "zwei große rote Kisten"),
    (("box", "red", 2, "large", "number", "dat"), "zwei großen roten Kisten"),
    (("box", "red", 1, None, "kein", "nom"), "keine rote Kiste"),
    (("box", "red", 1, None, "none", "dat"), "roter Kiste"),
    # neuter (Zelt, Ei)
    (("tent", "yellow", 1, None, "ein", "nom"), "ein gelbes Zelt"),
    (("tent", "yellow", 1, None, "ein", "acc"), "ein gelbes Zelt"),
    (("tent", "yellow", 1, None, "ein", "dat"), "einem gelben Zelt"),
    (("tent", "yellow", 1, None, "der", "nom"), "das gelbe Zelt"),
    (("tent", "yellow", 1, None, "der", "dat"), "dem gelben Zelt"),
    (("tent", "yellow", 1, None, "kein", "acc"), "kein gelbes Zelt"),
    (("tent", "yellow", 1, None, "none", "nom"), "gelbes Zelt"),
    (("egg", "green", 4, None, "number", "dat"), "vier grünen Eiern"),
    (("egg", "green", 4, None, "der", "nom"), "die grünen Eier"),
    # plural already ending in -n: no extra dative -n
    (("kite", "orange", 2, "small", "number", "dat"), "zwei kleinen orangefarbenen Drachen"),
    (("house", "purple", 2, None, "number", "dat"), "zwei violetten Häusern"),
])
def test_german_object_phrase_agreement(args, expected):
    kind, colour, count, size, article, case = args
    assert german_object_phrase(kind, colour=colour, count=count, size=size, article=article,
                                case=case) == expected


def test_german_texture_and_synonyms():
    assert german_object_phrase("box", colour="red", size="large", texture="striped", count=2,
                                article="number") == "zwei große rote gestreifte Kisten"
    assert german_object_phrase("box", texture="checkered", article="ein", case="dat",
                                noun_variant=2) == "einer karierten Schachtel"
    # "plain" is never a described texture
    assert german_object_phrase("ball", texture="plain") == "ein Ball"


@pytest.mark.parametrize("prep, noun, adjs, article, expected", [
    ("an", GermanNoun("Himmel", "Himmel", "m"), ["blau"], "der", "am blauen Himmel"),
    ("in", GermanNoun("Schnee", "Schnee", "m"), [], "der", "im Schnee"),
    ("von", GermanNoun("Ball", "Bälle", "m"), [], "der", "vom Ball"),
    ("auf", GermanNoun("Wiese", "Wiesen", "f"), ["grün"], "ein", "auf einer grünen Wiese"),
    ("auf", GermanNoun("Wiese", "Wiesen", "f"), [], "der", "auf der Wiese"),
    ("an", GermanNoun("Wiese", "Wiesen", "f"), [], "der", "an der Wiese"),  # no contraction: der
    ("vor", GermanNoun("Himmel", "Himmel", "m"), ["blau"], "ein", "vor einem blauen Himmel"),
    ("auf", GermanNoun("Wasser", "Wasser", "n"), [], "der", "auf dem Wasser"),
    ("in", GermanNoun("Zelt", "Zelte", "n"), [], "ein", "in einem Zelt"),
])
def test_german_prepositional_phrase(prep, noun, adjs, article, expected):
    assert german_prepositional_phrase(prep, noun, adjectives=adjs, article=article) == expected


@pytest.mark.parametrize("kwargs, expected", [
    (dict(kind="egg"), "an egg"),
    (dict(kind="egg", size="large"), "a large egg"),
    (dict(kind="ball", colour="orange"), "an orange ball"),
    (dict(kind="box", colour="red", size="large", texture="striped", count=2, article="number"),
     "two large red striped boxes"),
    (dict(kind="fish", count=3, article="number"), "three fish"),
    (dict(kind="box", count=2, article="several", noun_variant=1), "several crates"),
    (dict(kind="star", colour="yellow", article="the"), "the yellow star"),
])
def test_english_object_phrase(kwargs, expected):
    assert english_object_phrase(**kwargs) == expected


# Every German noun the world can print, with gender and plural (dative plural) from a dictionary,
# written out here independently of the lexicon in world_grammar.
GERMAN_KIND_NOUNS = {
    "Kiste": ("f", "Kisten", "Kisten"), "Schachtel": ("f", "Schachteln", "Schachteln"),
    "Ball": ("m", "Bälle", "Bällen"), "Turm": ("m", "Türme", "Türmen"),
    "Fahne": ("f", "Fahnen", "Fahnen"), "Flagge": ("f", "Flaggen", "Flaggen"),
    "Drachen": ("m", "Drachen", "Drachen"), "Stern": ("m", "Sterne", "Sternen"),
    "Zelt": ("n", "Zelte", "Zelten"), "Ei": ("n", "Eier", "Eiern"), "Ring": ("m", "Ringe", "Ringen"),
    "Fisch": ("m", "Fische", "Fischen"), "Haus": ("n", "Häuser", "Häusern"),
    "Flasche": ("f", "Flaschen", "Flaschen"),
}
# backgrounds and picture nouns are only used in the singular
GERMAN_SINGULAR_NOUNS = {
    "Wiese": "f", "Rasen": "m", "Strand": "m", "Sand": "m", "Schnee": "m", "Schneefeld": "n",
    "Wasser": "n", "See": "m", "Straße": "f", "Teppich": "m", "Backsteinmauer": "f", "Mauer": "f",
    "Himmel": "m", "Holzboden": "m", "Boden": "m", "Bild": "n", "Foto": "n", "Szene": "f",
}
# Every German adjective the world can print: base form -> strong nominative masculine form.
GERMAN_ADJECTIVES = {
    "rot": "roter", "blau": "blauer", "grün": "grüner", "gelb": "gelber", "violett": "violetter",
    "orangefarben": "orangefarbener", "weiß": "weißer", "schwarz": "schwarzer", "grau": "grauer",
    "braun": "brauner", "groß": "großer", "riesig": "riesiger", "klein": "kleiner",
    "winzig": "winziger", "gestreift": "gestreifter", "gepunktet": "gepunkteter",
    "kariert": "karierter",
}


def test_german_lexicon_genders_and_plurals():
    """Every noun the German grammar uses has the dictionary gender and plural; every adjective
    is declinable (no lila/rosa) and takes the regular endings."""
    G = german
    kind_nouns = {de.singular: de for nouns in german.KIND_NOUNS.values() for de in nouns}
    assert set(kind_nouns) == set(GERMAN_KIND_NOUNS)
    for word, noun in kind_nouns.items():
        gender, plural, dative_plural = GERMAN_KIND_NOUNS[word]
        assert (noun.gender, noun.plural) == (gender, plural), word
        assert noun.form(plural=True, case="dat") == dative_plural, word
        assert noun.form(plural=True, case="acc") == plural and noun.form(plural=False, case="dat") == word
    singular = {noun.singular: noun for phrases in G.BACKGROUNDS.values() for _, noun in phrases}
    singular.update({noun.singular: noun for noun, _ in G.PICTURE})
    assert {w: n.gender for w, n in singular.items()} == GERMAN_SINGULAR_NOUNS

    used = set(G.COLOURS.values()) | {de for words in G.SIZES.values() for de in words}
    used |= set(G.TEXTURES.values())
    assert used == set(GERMAN_ADJECTIVES)
    for base, strong in GERMAN_ADJECTIVES.items():
        assert german_noun_phrase(GermanNoun("Ball", "Bälle", "m"), adjectives=[base],
                                  article="none") == f"{strong} Ball"


# The textbook paradigm: determiner + adjective + noun for every article type, gender/number and
# case the grammar uses.
PARADIGM = {
    ("der", "m"): ("der rote Ball", "den roten Ball", "dem roten Ball"),
    ("der", "f"): ("die rote Kiste", "die rote Kiste", "der roten Kiste"),
    ("der", "n"): ("das rote Zelt", "das rote Zelt", "dem roten Zelt"),
    ("der", "pl"): ("die roten Bälle", "die roten Bälle", "den roten Bällen"),
    ("ein", "m"): ("ein roter Ball", "einen roten Ball", "einem roten Ball"),
    ("ein", "f"): ("eine rote Kiste", "eine rote Kiste", "einer roten Kiste"),
    ("ein", "n"): ("ein rotes Zelt", "ein rotes Zelt", "einem roten Zelt"),
    ("kein", "pl"): ("keine roten Zelte", "keine roten Zelte", "keinen roten Zelten"),
    ("none", "m"): ("roter Ball", "roten Ball", "rotem Ball"),
    ("none", "f"): ("rote Kiste", "rote Kiste", "roter Kiste"),
    ("none", "n"): ("rotes Zelt", "rotes Zelt", "rotem Zelt"),
    ("none", "pl"): ("rote Eier", "rote Eier", "roten Eiern"),
    ("number", "pl"): ("zwei rote Kisten", "zwei rote Kisten", "zwei roten Kisten"),
    ("einige", "pl"): ("einige rote Zelte", "einige rote Zelte", "einigen roten Zelten"),
    ("mehrere", "pl"): ("mehrere rote Bälle", "mehrere rote Bälle", "mehreren roten Bällen"),
}


@pytest.mark.parametrize("article, gender", sorted(PARADIGM))
def test_german_paradigm(article, gender):
    word = PARADIGM[(article, gender)][0].split()[-1]
    noun = next(de for nouns in german.KIND_NOUNS.values() for de in nouns
                if word in (de.singular, de.plural))
    count = 2 if gender == "pl" else 1
    for case, expected in zip(("nom", "acc", "dat"), PARADIGM[(article, gender)]):
        assert german_noun_phrase(noun, adjectives=["rot"], count=count, article=article,
                                  case=case) == expected


def test_phrase_errors():
    with pytest.raises(ValueError, match="no plural"):
        german_noun_phrase(GermanNoun("Ball", "Bälle", "m"), count=2, article="ein")
    with pytest.raises(ValueError, match="unknown case"):
        german_object_phrase("ball", case="gen")
    with pytest.raises(ValueError, match="gender"):
        GermanNoun("Ding", "Dinge", "x")
    with pytest.raises(ValueError, match="no plural"):
        english_noun_phrase(english.KIND_NOUNS["ball"][0], count=2, article="a")


GROUPS = (ObjectGroup("box", "red", "large", "striped", 2),
          ObjectGroup("ball", "red", "large", "dotted", 1),
          ObjectGroup("tent", "green", "small", "striped", 2))


def _both(spec, background, colour, groups=GROUPS):
    kw = dict(groups=groups, background=background, background_colour=colour)
    return realise(spec, lang="en", **kw), realise(spec, lang="de", **kw)


@pytest.mark.parametrize("spec, background, colour, en, de", [
    (CaptionSpec("fragment", 0, (Mention(0, "number", 0, 0, True, True),),
                 BackgroundMention(0, False, True)), "lawn", "green",
     "Two large red striped boxes on a green lawn.",
     "Zwei große rote gestreifte Kisten auf einer grünen Wiese."),
    (CaptionSpec("exist", 0, (Mention(1, "a", 0, None, True, False), Mention(2, "number", 0, None, False, False)),
                 BackgroundMention(0, True, True)), "sky", "blue",
     "There is a red ball and two tents in the blue sky.",
     "Es gibt einen roten Ball und zwei Zelte am blauen Himmel."),
    (CaptionSpec("exist", 1, (Mention(1, "a", 0, None, False, True),),
                 None), "sky", "blue",
     "You can see a dotted ball.", "Man sieht einen gepunkteten Ball."),
    (CaptionSpec("picture", 2, (Mention(1, "a", 0, None, True, False), Mention(2, "number", 0, 0, False, False)),
                 BackgroundMention(1, False, False)), "sky", "blue",
     "A scene with a red ball and two small tents against a sky.",
     "Eine Szene mit einem roten Ball und zwei kleinen Zelten vor einem Himmel."),
    (CaptionSpec("next_to", 1, (Mention(2, "number", 0, None, True, False), Mention(1, "a", 0, 0, True, False),
                                Mention(0, "some", 1, None, False, False)),
                 BackgroundMention(1, True, False)), "lawn", "green",
     "Two green tents are next to a large red ball and some crates on the grass.",
     "Zwei grüne Zelte sind neben einem großen roten Ball und einigen Kisten auf dem Rasen."),
    (CaptionSpec("verb", 2, (Mention(1, "a", 0, None, False, False),),
                 BackgroundMention(0, True, False)), "sky", "blue",
     "A ball can be seen in the sky.", "Ein Ball ist am Himmel zu sehen."),
    (CaptionSpec("verb", 1, (Mention(0, "several", 0, None, False, False),),
                 BackgroundMention(0, True, False)), "snow", "white",
     "Several boxes lie in the snow.", "Mehrere Kisten liegen im Schnee."),
    (CaptionSpec("bg_with", 0, (Mention(2, "several", 0, None, False, False),),
                 BackgroundMention(1, False, True)), "water", "blue",
     "A blue lake with several tents.", "Ein blauer See mit mehreren Zelten."),
    (CaptionSpec("picture", 0, (Mention(1, "a", 0, 1, False, False),),
                 BackgroundMention(0, True, False)), "beach", "yellow",
     "A picture of a big ball on the beach.", "Ein Bild von einem großen Ball am Strand."),
])
def test_realise_hand_checked(spec, background, colour, en, de):
    assert _both(spec, background, colour) == (en, de)


def test_sampled_specs_are_well_formed():
    """Many sampled specs: proper sentences; every mentioned group's noun appears; no verb
    template without a background."""
    rng = np.random.default_rng(0)
    for i in range(300):
        scene = scenes.sample_scene(rng, corpus=("m30k", "coco")[i % 2], image_size=64)
        spec = sample_caption_spec(rng, groups=scene.groups, background=scene.background)
        assert 1 <= len(spec.mentions) <= 3
        assert len({m.group for m in spec.mentions}) == len(spec.mentions)
        for lang in ("en", "de"):
            text = realise(spec, lang=lang, groups=scene.groups, background=scene.background,
                           background_colour=scene.background_colour)
            assert text[0].isupper() and text.endswith(".") and "  " not in text and ".." not in text
            tokens = set(re.findall(r"\w+", text))
            for m in spec.mentions:
                assert tokens & kind_words(scene.groups[m.group].kind, lang), (text, m)


def test_captions_vary_in_wording_and_attributes():
    """Over many scenes every template and wording frame is used, and each attribute (colour,
    size, texture, exact number, background) is mentioned in some captions and left out in
    others."""
    from pseudopairs.world.grammar import TEMPLATES

    rng = np.random.default_rng(3)
    frames, said, possible = set(), dict.fromkeys(("colour", "size", "texture", "number"), 0), 0
    backgrounds = 0
    for i in range(600):
        scene = scenes.sample_scene(rng, corpus=("m30k", "coco")[i % 2], image_size=64)
        spec = sample_caption_spec(rng, groups=scene.groups, background=scene.background)
        frames.add((spec.template, spec.frame))
        backgrounds += spec.background is not None
        for m in spec.mentions:
            possible += 1
            said["colour"] += m.colour
            said["size"] += m.size is not None
            said["texture"] += m.texture
            said["number"] += m.quantity == "number"
    assert frames == {(t, f) for t, n in TEMPLATES.items() for f in range(n)}
    for attribute, count in said.items():
        assert 0.05 * possible < count < 0.95 * possible, (attribute, count, possible)
    assert 0.5 * 600 < backgrounds < 600


# ---------------------------------------------------------------------------------- world files


def _build(base: Path, settings: dict) -> Path:
    """Build with a relative out-root (as the pipeline does) from inside ``base``; returns the
    results root. Image paths in the tables are then relative to ``base``."""
    cwd = os.getcwd()
    os.chdir(base)
    try:
        generate.build_world(settings, Path("results"))
    finally:
        os.chdir(cwd)
    return base / "results"


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    a = _build(tmp_path_factory.mktemp("a"), SETTINGS)
    b = _build(tmp_path_factory.mktemp("b"), SETTINGS)
    c = _build(tmp_path_factory.mktemp("c"), {**SETTINGS, "seed": 8})
    return a, b, c


def _all_outputs(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


def test_expected_files(worlds):
    root = worlds[0]
    files = {str(p) for p in _all_outputs(root)}
    for split in ("train", "val", "test"):
        for corpus in ("m30k", "coco"):
            assert f"images/{corpus}/{split}.parquet" in files
        for corpus in ("m30k", "m30k_task1", "coco"):
            assert f"captions/raw/{corpus}/{split}.parquet" in files
    assert "world/manifest.json" in files
    assert not [f for f in files if ".tmp" in f]  # no temporary left behind
    pngs = [f for f in files if f.endswith(".png")]
    assert len(pngs) == 2 * (6 + 3 + 3)


def test_same_seed_identical_bytes(worlds):
    a, b, _ = worlds
    assert _all_outputs(a) == _all_outputs(b)
    for rel in _all_outputs(a):  # PNGs, Parquet tables and the manifest
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_different_seed_differs(worlds):
    a, _, c = worlds
    caps_a = pd.read_parquet(a / "captions/raw/m30k/train.parquet")
    caps_c = pd.read_parquet(c / "captions/raw/m30k/train.parquet")
    assert (caps_a["raw"] != caps_c["raw"]).mean() > 0.8
    rel = Path("world/images/coco/coco_train_000000.png")
    assert not np.array_equal(np.asarray(Image.open(a / rel)), np.asarray(Image.open(c / rel)))


def test_image_tables(worlds):
    root = worlds[0]
    ids = []
    for corpus in ("m30k", "coco"):
        for split, n in SETTINGS["images"][corpus].items():
            table = pd.read_parquet(root / f"images/{corpus}/{split}.parquet")
            assert list(table.columns) == IMAGE_COLUMNS
            assert list(table["image_id"]) == [f"{corpus}_{split}_{i:06d}" for i in range(n)]
            assert all(p.startswith(f"results/world/images/{corpus}/") for p in table["path"])
            for path in table["path"]:
                with Image.open(root.parent / path) as img:
                    assert img.size == (64, 64) and img.mode == "RGB"
            ids += list(table["image_id"])
    assert len(ids) == len(set(ids))


def test_caption_tables(worlds):
    root = worlds[0]
    for split in ("train", "val", "test"):
        images = pd.read_parquet(root / f"images/m30k/{split}.parquet")["image_id"].tolist()
        m30k = pd.read_parquet(root / f"captions/raw/m30k/{split}.parquet")
        assert list(m30k.columns) == RAW_CAPTION_COLUMNS
        assert m30k["caption_idx"].dtype == np.int64
        expected = [(i, lang, k) for i in images for lang in ("de", "en") for k in range(5)]
        assert list(zip(m30k["image_id"], m30k["lang"], m30k["caption_idx"])) == expected
        assert set(m30k["dataset"]) == {"m30k"} and set(m30k["split"]) == {split}
        assert not m30k.groupby(["image_id", "lang"])["raw"].apply(lambda s: s.duplicated().any()).any()

        task1 = pd.read_parquet(root / f"captions/raw/m30k_task1/{split}.parquet")
        assert list(task1.columns) == RAW_CAPTION_COLUMNS
        assert list(zip(task1["image_id"], task1["lang"], task1["caption_idx"])) == [
            (i, lang, 0) for i in images for lang in ("cs", "de", "en", "fr")]
        assert set(task1["dataset"]) == {"m30k_task1"}

        coco_images = pd.read_parquet(root / f"images/coco/{split}.parquet")["image_id"].tolist()
        coco = pd.read_parquet(root / f"captions/raw/coco/{split}.parquet")
        assert set(coco["lang"]) == {"en"}
        assert list(zip(coco["image_id"], coco["caption_idx"])) == [
            (i, k) for i in coco_images for k in range(5)]
        for frame in (m30k, task1, coco):
            assert all(t[0].isupper() and t.endswith(".") for t in frame["raw"])


def _kinds_in_text(text: str, lang: str) -> set[str]:
    tokens = set(re.findall(r"\w+", text))
    return {k for k in NOUN_VARIANTS if tokens & kind_words(k, lang)}


def test_distribution_shift(worlds):
    root = worlds[0]
    manifest = json.loads((root / "world/manifest.json").read_text())
    coco_only = set(content.kinds_of("coco")) - set(content.kinds_of("m30k"))
    m30k_only = set(content.kinds_of("m30k")) - set(content.kinds_of("coco"))
    assert coco_only and m30k_only
    for corpus, banned in (("m30k", coco_only), ("coco", m30k_only)):
        for split in ("train", "val", "test"):
            for scene in manifest["scenes"][corpus][split]:
                assert not {o["kind"] for o in scene["objects"]} & banned
            for name in CORPORA[corpus]:
                caps = pd.read_parquet(root / f"captions/raw/{name}/{split}.parquet")
                for text, lang in zip(caps["raw"], caps["lang"]):
                    assert not _kinds_in_text(text, lang) & banned, text
    # the tables themselves, at a larger size than the fixture: shift is visible
    rng = np.random.default_rng(1)
    bgs = {c: [scenes.sample_scene(rng, corpus=c, image_size=64).background for _ in range(400)]
           for c in ("m30k", "coco")}
    assert bgs["m30k"].count("lawn") > 1.5 * bgs["coco"].count("lawn")
    assert bgs["coco"].count("road") > 1.5 * bgs["m30k"].count("road")


def test_captions_describe_their_scene(worlds):
    root = worlds[0]
    manifest = json.loads((root / "world/manifest.json").read_text())
    for corpus in ("m30k", "coco"):
        for split in ("train", "val", "test"):
            scenes = {s["image_id"]: s for s in manifest["scenes"][corpus][split]}
            for name in CORPORA[corpus]:
                caps = pd.read_parquet(root / f"captions/raw/{name}/{split}.parquet")
                for iid, lang, text in zip(caps["image_id"], caps["lang"], caps["raw"]):
                    kinds = {o["kind"] for o in scenes[iid]["objects"]}
                    mentioned = _kinds_in_text(text, lang)
                    assert mentioned and mentioned <= kinds, (text, kinds)


def test_regenerated_image_matches_files(worlds):
    """An image regenerated on its own (any order) equals the files; task1 En and De come from
    one spec, and the comparable captions mention each described object's kind word."""
    root = worlds[0]
    cfg = WorldSettings.from_dict(SETTINGS)
    manifest = json.loads((root / "world/manifest.json").read_text())
    for split, index in (("val", 2), ("train", 4), ("test", 0)):
        item = generate.generate_image(cfg, "m30k", split, index)
        record = manifest["scenes"]["m30k"][split][index]
        assert record["image_id"] == item.image_id
        assert {k: v for k, v in record.items() if k not in ("image_id", "path")} == item.scene.to_json()
        assert sum(o["count"] for o in record["objects"]) == sum(len(o["boxes"]) for o in record["objects"])
        png = np.asarray(Image.open(root.parent / record["path"]))
        assert np.array_equal(png, np.asarray(render.render_scene(item.scene, image_size=64)))

        task1 = pd.read_parquet(root / f"captions/raw/m30k_task1/{split}.parquet")
        rows = task1[task1["image_id"] == item.image_id].set_index("lang")["raw"]
        spec, en, de = generate.parallel_caption(
            item.scene, rng=scenes.image_rng(7, "m30k", split, index, "task1"))
        assert (rows["en"], rows["de"]) == (en, de)
        kw = dict(groups=item.scene.groups, background=item.scene.background,
                  background_colour=item.scene.background_colour)
        assert realise(spec, lang="en", **kw) == en and realise(spec, lang="de", **kw) == de

        caps = pd.read_parquet(root / f"captions/raw/m30k/{split}.parquet")
        for lang in ("en", "de"):
            pairs = generate.comparable_captions(
                item.scene, rng=scenes.image_rng(7, "m30k", split, index, f"captions.{lang}"),
                lang=lang, n=5)
            table = caps[(caps["image_id"] == item.image_id) & (caps["lang"] == lang)]["raw"].tolist()
            assert [t for _, t in pairs] == table
            for spec, text in pairs:
                tokens = set(re.findall(r"\w+", text))
                for m in spec.mentions:
                    assert tokens & kind_words(item.scene.groups[m.group].kind, lang)


def test_en_and_de_comparable_not_parallel(worlds):
    """Comparable captions are drawn independently: the De captions are not the translations
    of the En ones (differ from the realisation of the En specs)."""
    cfg = WorldSettings.from_dict(SETTINGS)
    same = 0
    for index in range(6):
        item = generate.generate_image(cfg, "m30k", "train", index)
        pairs = generate.comparable_captions(
            item.scene, rng=scenes.image_rng(7, "m30k", "train", index, "captions.en"), lang="en", n=5)
        kw = dict(groups=item.scene.groups, background=item.scene.background,
                  background_colour=item.scene.background_colour)
        same += sum(realise(spec, lang="de", **kw) == de for (spec, _), de in zip(pairs, item.captions["de"]))
    assert same < 5


def test_smaller_rebuild_removes_stale_pngs(tmp_path):
    small = {**SETTINGS, "images": {"coco": {"train": 2, "val": 1, "test": 1}}}
    generate.build_world({**small, "images": {"coco": {"train": 4, "val": 1, "test": 1}}}, tmp_path)
    generate.build_world(small, tmp_path)
    assert len(list((tmp_path / "world/images/coco").glob("*.png"))) == 4


# ---------------------------------------------------------------------------------- settings / CLI


@pytest.mark.parametrize("settings, message", [
    ({**SETTINGS, "colour": 3}, "world: unknown setting(s) world.colour"),
    ({k: v for k, v in SETTINGS.items() if k != "seed"}, "world.seed: required setting missing"),
    ({**SETTINGS, "image_size": 8}, "world.image_size"),
    ({**SETTINGS, "images": {"flickr": {"train": 1, "val": 1, "test": 1}}}, "unknown corpus 'flickr'"),
    ({**SETTINGS, "images": {"m30k": {"train": 1, "val": 1}}}, "world.images.m30k"),
    ({**SETTINGS, "captions_per_image": "5"}, "world.captions_per_image: must be an integer in [1, 10]"),
])
def test_settings_errors(settings, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        WorldSettings.from_dict(settings)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    generate.register_cli(parser.add_subparsers(dest="command"))
    return parser


def test_cli(tmp_path, capsys):
    settings = {**SETTINGS, "images": {"m30k": {"train": 2, "val": 1, "test": 1}}}
    args = _parser().parse_args(["world", "--settings", json.dumps(settings), "--out-root", str(tmp_path)])
    assert args.func(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["images"] == {"m30k/train": 2, "m30k/val": 1, "m30k/test": 1}
    assert summary["captions"]["m30k/train"] == 20 and summary["captions"]["m30k_task1/train"] == 8
    assert len(pd.read_parquet(tmp_path / "captions/raw/m30k_task1/val.parquet")) == 4  # one image, 4 languages
    with pytest.raises(SystemExit):  # refused while parsing the arguments
        _parser().parse_args(["world", "--settings", "{seed: 1}", "--out-root", str(tmp_path)])
    assert "argument --settings: --settings: not valid JSON" in capsys.readouterr().err


def test_parallel_text_for_the_demo_mt_model(tmp_path):
    settings = {"seed": 3, "images": {"m30k": {"train": 1, "val": 1, "test": 1}},
                "parallel": {"train": 40, "val": 5}}
    assert generate.write_parallel_text(settings, tmp_path) == {"train": 40, "val": 5}
    lines = {(s, l): (tmp_path / "world" / "parallel" / f"{s}.{l}").read_text().splitlines()
             for s in ("train", "val") for l in ("en", "de")}
    assert [len(lines[s, l]) for s in ("train", "val") for l in ("en", "de")] == [40, 40, 5, 5]
    # each line pair is one caption spec realised in both languages: the same objects are named
    for en, de in zip(lines["train", "en"], lines["train", "de"]):
        assert en[0].isupper() and en.endswith(".") and de[0].isupper() and de.endswith(".")

    both = 0
    for en, de in zip(lines["train", "en"], lines["train", "de"]):
        en_words, de_words = set(re.findall(r"\w+", en.lower())), set(re.findall(r"\w+", de.lower()))
        for kind in ("kite", "fish", "flag", "egg"):
            if {w.lower() for w in kind_words(kind, "en")} & en_words:
                both += 1
                assert {w.lower() for w in kind_words(kind, "de")} & de_words, (en, de)
    assert both > 0   # scenes of both corpora (kites/fish only in coco, flags/eggs only in m30k)
    # pair k does not depend on how many pairs are asked for
    bigger = generate.parallel_pairs(WorldSettings.from_dict({**settings, "parallel": {"train": 50}}), "train")
    assert [p[0] for p in bigger[:40]] == lines["train", "en"]
    with pytest.raises(ValueError, match="world.parallel must map some of"):
        WorldSettings.from_dict({**settings, "parallel": {"test": 3}})
    with pytest.raises(ValueError, match="no parallel text asked for"):
        generate.write_parallel_text({**settings, "parallel": {}}, tmp_path)

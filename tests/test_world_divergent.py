"""Tests of the demo world's divergent languages and unrendered details (world.languages,
world.unrendered, world.visible_detail): hand-checked realisations, a German word for two
English kinds, compounds, word order, pixels that do not show the details, and the aligned world
kept as it was."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pseudopairs.world import generate
from pseudopairs.world.grammar import (BackgroundMention, CaptionSpec, CaptionStyle, Mention, ObjectGroup,
                                       kind_words, noun_senses, realise, sample_caption_spec)
from pseudopairs.world.render import render_scene
from pseudopairs.world.scene import image_rng, sample_scene, with_unrendered_details
from pseudopairs.world.settings import WorldSettings

SETTINGS = {"seed": 7, "image_size": 64, "captions_per_image": 5,
            "images": {"m30k": {"train": 6, "val": 3, "test": 3},
                       "coco": {"train": 6, "val": 3, "test": 3}}}
DIVERGENT = {**SETTINGS, "languages": "divergent", "unrendered": 0.5, "visible_detail": 0.5}

GROUPS = (ObjectGroup("box", "red", "large", "striped", 2, condition="old", material="wooden"),
          ObjectGroup("ball", "red", "large", "dotted", 1, condition="broken", material="plastic"),
          ObjectGroup("egg", "white", "small", "plain", 1, condition="new", material="paper"))


def _all(spec, background="lawn", colour="green", groups=GROUPS):
    kw = dict(groups=groups, background=background, background_colour=colour)
    return {lang: realise(spec, lang=lang, **kw) for lang in ("en", "de", "fr", "cs")}


def test_a_divergent_spec_realises_to_hand_checked_sentences():
    # German fronts the background (verb second), puts the condition after the colour and makes
    # the material a compound; English puts the condition first and the material last; French
    # puts "vieux" before the noun and the material after; Czech declines every adjective.
    spec = CaptionSpec("verb", 1, (Mention(0, "number", 0, None, True, False, condition=True, material=True),),
                       BackgroundMention(0, True, False), "divergent")
    assert _all(spec) == {
        "en": "Two old red wooden boxes lie on the lawn.",
        "de": "Auf der Wiese liegen zwei rote alte Holzkisten.",
        "fr": "Deux vieilles boîtes rouges en bois sont posées sur la pelouse.",
        "cs": "Dvě staré červené dřevěné krabice leží na trávníku.",
    }


def test_the_aligned_lexicon_keeps_the_subject_first():
    spec = CaptionSpec("verb", 1, (Mention(0, "number", 0, None, True, False),),
                       BackgroundMention(0, True, False))
    assert _all(spec)["de"] == "Zwei rote Kisten liegen auf der Wiese."


def test_one_german_word_for_two_english_kinds():
    # the second variant of ball and of egg: English keeps the kinds apart, German says Kugel
    spec = CaptionSpec("fragment", 0, (Mention(1, "a", 1, None, True, False), Mention(2, "a", 1, None, False, False)),
                       None, "divergent")
    texts = _all(spec)
    assert texts["en"] == "A red ball and an egg."
    assert texts["de"] == "Eine rote Kugel und eine Kugel."
    assert "Kugel" in kind_words("ball", "de") & kind_words("egg", "de")
    assert not kind_words("ball", "en") & kind_words("egg", "en")


def test_hypernyms_and_their_senses():
    assert noun_senses("ball", "divergent") == [("kind", 0), ("kind", 1), ("hypernym", "toy"),
                                                ("hypernym", "object")]
    assert noun_senses("egg", "divergent") == [("kind", 0), ("kind", 1), ("hypernym", "object")]
    assert noun_senses("ball", "aligned") == [("kind", 0)]
    spec = CaptionSpec("picture", 0, (Mention(1, "a", 2, 0, False, False, condition=True),), None, "divergent")
    texts = _all(spec)
    assert texts["en"] == "A picture of a broken large toy."
    assert texts["de"] == "Ein Bild von einem großen kaputten Spielzeug."
    spec = CaptionSpec("fragment", 0, (Mention(2, "a", 2, None, False, False, material=True),), None, "divergent")
    assert _all(spec)["de"] == "Ein Papiergegenstand."  # a compound of a hypernym
    with pytest.raises(ValueError, match="noun variant 3 of 'egg' out of range"):
        realise(CaptionSpec("fragment", 0, (Mention(2, "a", 3, None, False, False),), None, "divergent"),
                lang="en", groups=GROUPS, background="lawn", background_colour="green")


def test_a_detail_the_scene_lacks_cannot_be_named():
    plain = (ObjectGroup("ball", "red", "large", "dotted", 1),)
    spec = CaptionSpec("fragment", 0, (Mention(0, "a", 0, None, False, False, condition=True),), None, "divergent")
    with pytest.raises(ValueError, match="names the condition of a 'ball' group that has none"):
        realise(spec, lang="de", groups=plain, background="lawn", background_colour="green")


def test_unrendered_details_leave_the_pixels_unchanged():
    scene = sample_scene(image_rng(7, "m30k", "train", 3, "scene"), corpus="m30k", image_size=64)
    detailed = with_unrendered_details(scene, image_rng(7, "m30k", "train", 3, "details"))
    assert all(g.condition is None and g.material is None for g in scene.groups)
    assert all(g.condition and g.material for g in detailed.groups)
    assert [(g.kind, g.colour, g.size, g.texture, g.count) for g in detailed.groups] == \
        [(g.kind, g.colour, g.size, g.texture, g.count) for g in scene.groups]
    assert np.array_equal(np.asarray(render_scene(scene, image_size=64)),
                          np.asarray(render_scene(detailed, image_size=64)))
    # the manifest records the details only where the scene has them
    assert "condition" in detailed.to_json()["objects"][0]
    assert "condition" not in scene.to_json()["objects"][0]


def test_the_divergent_world_draws_the_aligned_worlds_scenes():
    old, new = WorldSettings.from_dict(SETTINGS), WorldSettings.from_dict(DIVERGENT)
    for index in range(3):
        a, b = generate.generate_image(old, "m30k", "train", index), generate.generate_image(new, "m30k", "train", index)
        assert np.array_equal(np.asarray(render_scene(a.scene, image_size=64)),
                              np.asarray(render_scene(b.scene, image_size=64)))
        assert all(g.condition is not None for g in b.scene.groups)


def test_the_aligned_world_is_unchanged():
    # captions of main ac6445d (before the divergent world existed), same settings
    cfg = WorldSettings.from_dict(SETTINGS)
    item = generate.generate_image(cfg, "m30k", "train", 0)
    assert item.captions["en"][0] == "You can see a ball, a large blue box and a red house on a street."
    assert item.captions["de"][0] == "Ein rotes Haus, eine Kiste und ein roter Ball auf der Straße."
    assert item.task1["de"] == ("Ein kleiner Ball neben einer blauen Kiste und einem großen roten Haus "
                                "auf der grauen Straße.")
    assert generate.generate_image(cfg, "m30k", "train", 4).task1["en"] == "A large red tent is on the lawn."
    assert generate.generate_image(cfg, "coco", "train", 2).captions["en"][0] == \
        "Two huge yellow rings and two yellow houses on the brown floor."
    pairs = generate.parallel_pairs(WorldSettings.from_dict({**SETTINGS, "parallel": {"train": 2}}), "train")
    assert pairs[1] == ("There are some huge blue rings, a tower and a dotted ball.",
                        "Es gibt einige riesige blaue Ringe, einen Turm und einen gepunkteten Ball.")


def test_divergent_captions_and_task1_follow_their_specs():
    cfg = WorldSettings.from_dict(DIVERGENT)
    kw = {}
    named_details = hypernyms = 0
    for index in range(6):
        item = generate.generate_image(cfg, "m30k", "train", index)
        assert item == generate.generate_image(cfg, "m30k", "train", index)  # pure
        kw = dict(groups=item.scene.groups, background=item.scene.background,
                  background_colour=item.scene.background_colour)
        # task1: one spec, exact translations in every language
        assert item.task1_spec.languages == "divergent"
        assert item.task1 == {lang: realise(item.task1_spec, lang=lang, **kw) for lang in generate.TASK1_LANGS}
        for lang in ("en", "de"):
            for spec, text in zip(item.specs[lang], item.captions[lang]):
                assert realise(spec, lang=lang, **kw) == text
                named_details += sum(m.condition + m.material for m in spec.mentions)
                hypernyms += sum(noun_senses(item.scene.groups[m.group].kind, "divergent")[m.noun][0] == "hypernym"
                                 for m in spec.mentions)
    assert named_details > 10 and hypernyms > 3


def test_visible_detail_scales_the_attributes_named():
    scene = sample_scene(image_rng(1, "m30k", "train", 0, "scene"), corpus="m30k", image_size=64)

    def colours(style):
        rng = np.random.default_rng(0)
        specs = [sample_caption_spec(rng, groups=scene.groups, background=scene.background, style=style)
                 for _ in range(400)]
        return sum(m.colour for s in specs for m in s.mentions) / sum(len(s.mentions) for s in specs)

    assert colours(CaptionStyle()) == pytest.approx(0.75, abs=0.05)
    assert colours(CaptionStyle(visible_detail=0.4)) == pytest.approx(0.3, abs=0.05)
    assert colours(CaptionStyle(visible_detail=0.0)) == 0.0


@pytest.mark.parametrize("settings, message", [
    ({**SETTINGS, "languages": "mixed"}, "world.languages: must be one of ['aligned', 'divergent']"),
    ({**SETTINGS, "unrendered": 1.5}, "world.unrendered: must be a number in [0.0, 1.0]"),
    ({**SETTINGS, "visible_detail": -0.1}, "world.visible_detail: must be a number in [0.0, 1.0]"),
])
def test_settings_errors(settings, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        WorldSettings.from_dict(settings)


def test_french_vieux_before_a_vowel():
    groups = (ObjectGroup("egg", "white", "small", "plain", 1, condition="old", material="paper"),
              ObjectGroup("egg", "white", "small", "plain", 2, condition="old", material="paper"))
    one = CaptionSpec("fragment", 0, (Mention(0, "a", 0, None, False, False, condition=True),), None, "divergent")
    two = CaptionSpec("fragment", 0, (Mention(1, "number", 0, 0, False, False, condition=True),), None, "divergent")
    assert _all(one, groups=groups)["fr"] == "Un vieil œuf."
    assert _all(two, groups=groups)["fr"] == "Deux petits vieux œufs."

"""English captions of the demo world: the lexicon (aligned with the semantic lexicon of
:mod:`pseudopairs.world.grammar`), noun phrases and the realisation of a caption spec."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pseudopairs.world.grammar import (LANGUAGES, BackgroundMention, CaptionSpec, Language, Mention,
                                       ObjectGroup, check_aligned, check_divergent, coordinate, lexicon_noun,
                                       mention_details, pick_adjectives, plural_subject, sentence)


@dataclass(frozen=True)
class EnglishNoun:
    singular: str
    plural: str
    mass: bool = False  # mass nouns take only the definite article ("the grass")


def _en(singular: str, plural: str | None = None, *, mass: bool = False) -> EnglishNoun:
    return EnglishNoun(singular, plural if plural is not None else singular + "s", mass)


# Object kinds: synonym variants, aligned with the other languages' lists.
KIND_NOUNS: dict[str, list[EnglishNoun]] = {
    "box": [_en("box", "boxes"), _en("crate"), _en("box", "boxes")],
    "ball": [_en("ball")],
    "tower": [_en("tower")],
    "flag": [_en("flag"), _en("flag"), _en("banner")],
    "kite": [_en("kite")],
    "star": [_en("star")],
    "tent": [_en("tent")],
    "egg": [_en("egg")],
    "ring": [_en("ring")],
    "fish": [_en("fish", "fish")],
    "house": [_en("house")],
    "bottle": [_en("bottle")],
}
COLOURS: dict[str, str] = {"red": "red", "blue": "blue", "green": "green", "yellow": "yellow",
                           "purple": "purple", "orange": "orange", "white": "white",
                           "black": "black", "grey": "grey", "brown": "brown"}
SIZES: dict[str, list[str]] = {"large": ["large", "big", "huge"], "small": ["small", "little", "tiny"]}
TEXTURES: dict[str, str] = {"striped": "striped", "dotted": "dotted", "checkered": "checkered"}
# Background phrases: (preposition, noun), aligned with grammar.BACKGROUND_SENSES.
BACKGROUNDS: dict[str, list[tuple[str, EnglishNoun]]] = {
    "lawn": [("on", _en("lawn")), ("on", _en("grass", mass=True)), ("on", _en("meadow"))],
    "beach": [("on", _en("beach", "beaches")), ("on", _en("sand", mass=True))],
    "snow": [("in", _en("snow", mass=True)), ("on", _en("snowfield"))],
    "water": [("on", _en("water", mass=True)), ("on", _en("lake"))],
    "road": [("on", _en("road")), ("on", _en("street"))],
    "carpet": [("on", _en("carpet")), ("on", _en("rug"))],
    "wall": [("in front of", _en("brick wall")), ("in front of", _en("wall"))],
    "sky": [("in", _en("sky", "skies", mass=True)), ("against", _en("sky", "skies"))],
    "floor": [("on", _en("wooden floor")), ("on", _en("floor"))],
}
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}
QUANTIFIERS = {"some": "some", "several": "several"}
PICTURE = ("A picture of", "A photo of", "A scene with")
ARTICLES = ("a", "the", "number", "some", "several", "none")

check_aligned("en", nouns=KIND_NOUNS, colours=COLOURS, sizes=SIZES, textures=TEXTURES,
              backgrounds=BACKGROUNDS)

# The divergent lexicon (grammar.CaptionStyle): English has one noun where German has two (a
# ball's second variant, German "Kugel", is still "ball"), hypernyms, unrendered details.
DIVERGENT_NOUNS: dict[str, list[EnglishNoun]] = {
    **KIND_NOUNS, "ball": KIND_NOUNS["ball"] * 2, "egg": KIND_NOUNS["egg"] * 2}
HYPERNYM_NOUNS: dict[str, EnglishNoun] = {"toy": _en("toy"), "building": _en("building"),
                                          "container": _en("container"), "object": _en("object")}
CONDITIONS: dict[str, str] = {"new": "new", "old": "old", "broken": "broken", "dirty": "dirty"}
MATERIALS: dict[str, str] = {"wooden": "wooden", "plastic": "plastic", "metal": "metal", "paper": "paper"}

check_divergent("en", nouns=DIVERGENT_NOUNS, hypernyms=HYPERNYM_NOUNS, conditions=CONDITIONS,
                materials=MATERIALS)


def mention_noun(mention: Mention, group: ObjectGroup, languages: str) -> EnglishNoun:
    return lexicon_noun(group.kind, mention.noun, languages, kinds=KIND_NOUNS,
                        divergent=DIVERGENT_NOUNS, hypernyms=HYPERNYM_NOUNS)


def english_indefinite_article(next_word: str) -> str:
    return "an" if next_word[:1].lower() in "aeio" else "a"


def english_noun_phrase(noun: EnglishNoun, *, adjectives: Sequence[str] = (), count: int = 1,
                        article: str = "a") -> str:
    """An English noun phrase. ``article``: ``a`` (a/an, singular), ``the``, ``number`` (numeral
    from ``count``; count 1 gives a/an), ``some``/``several`` (plural) or ``none``."""
    if article not in ARTICLES:
        raise ValueError(f"unknown English article type {article!r}; expected one of {ARTICLES}")
    if count < 1:
        raise ValueError(f"count must be ≥ 1, got {count}")
    if article == "number" and count == 1:
        article = "a"
    plural = count > 1 or article in ("some", "several")
    if article == "a" and plural:
        raise ValueError("the article 'a' has no plural")
    words = list(adjectives) + [noun.plural if plural else noun.singular]
    if article == "a":
        det = english_indefinite_article(words[0])
    elif article == "the":
        det = "the"
    elif article == "number":
        if count not in NUMBERS:
            raise ValueError(f"no English number word for {count}")
        det = NUMBERS[count]
    elif article in ("some", "several"):
        det = QUANTIFIERS[article]
    else:
        det = None
    return " ".join(([det] if det else []) + words)


def adjectives(*, size: str | None, size_variant: int, colour: str | None, texture: str | None) -> list[str]:
    """Adjectives (base forms) in the order size, colour, texture."""
    return pick_adjectives(sizes=SIZES, colours=COLOURS, textures=TEXTURES, size=size,
                           size_variant=size_variant, colour=colour, texture=texture)


def mention_adjectives(mention: Mention, group: ObjectGroup) -> list[str]:
    """Condition, size, colour, texture, material (an English order: "an old small red wooden box")."""
    if mention.texture and group.texture not in TEXTURES:
        raise ValueError(f"texture {group.texture!r} cannot be mentioned")
    condition, material = mention_details(mention, group)
    return (([CONDITIONS[condition]] if condition else [])
            + adjectives(size=group.size if mention.size is not None else None,
                         size_variant=mention.size or 0, colour=group.colour if mention.colour else None,
                         texture=group.texture if mention.texture else None)
            + ([MATERIALS[material]] if material else []))


def english_object_phrase(kind: str, *, colour: str | None = None, size: str | None = None,
                          texture: str | None = None, count: int = 1, article: str = "a",
                          noun_variant: int = 0, size_variant: int = 0) -> str:
    """English noun phrase for an object described by (kind, colour, count, size, texture),
    e.g. ``("box", "red", 2, "large", "number")`` → ``"two large red boxes"``."""
    adjs = adjectives(size=size, size_variant=size_variant, colour=colour, texture=texture)
    return english_noun_phrase(KIND_NOUNS[kind][noun_variant], adjectives=adjs, count=count,
                               article=article)


def english_mention(mention: Mention, group: ObjectGroup, languages: str = "aligned") -> str:
    noun = mention_noun(mention, group, languages)
    article = "a" if group.count == 1 else mention.quantity
    return english_noun_phrase(noun, adjectives=mention_adjectives(mention, group),
                               count=group.count, article=article)


def english_background(bg: BackgroundMention, *, background: str, background_colour: str,
                       prepositional: bool = True) -> str:
    prep, noun = BACKGROUNDS[background][bg.phrase]
    adjs = [COLOURS[background_colour]] if bg.adjective else []
    np_ = english_noun_phrase(noun, adjectives=adjs, article="the" if bg.definite else "a")
    return f"{prep} {np_}" if prepositional else np_


def realise_english(spec: CaptionSpec, *, groups: Sequence[ObjectGroup], background: str,
                    background_colour: str) -> str:
    nps = [english_mention(m, groups[m.group], spec.languages) for m in spec.mentions]
    bg = (" " + english_background(spec.background, background=background,
                                   background_colour=background_colour)
          if spec.background is not None else "")
    plural = plural_subject(spec.mentions, groups)
    t, f = spec.template, spec.frame
    if t == "fragment":
        text = coordinate(nps, "and") + bg
    elif t == "exist":
        if f == 0:
            first_plural = groups[spec.mentions[0].group].count > 1  # agrees with first conjunct
            text = f"There {'are' if first_plural else 'is'} {coordinate(nps, 'and')}{bg}"
        else:
            text = f"You can see {coordinate(nps, 'and')}{bg}"
    elif t == "verb":
        verb = [("is", "are"), ("lies", "lie"), ("can be seen", "can be seen")][f][plural]
        text = f"{coordinate(nps, 'and')} {verb}{bg}"
    elif t == "picture":
        text = f"{PICTURE[f]} {coordinate(nps, 'and')}{bg}"
    elif t == "next_to":
        first_plural = plural_subject(spec.mentions[:1], groups)
        verb = "" if f == 0 else (" are" if first_plural else " is")
        text = f"{nps[0]}{verb} next to {coordinate(nps[1:], 'and')}{bg}"
    elif t == "bg_with":
        head = english_background(spec.background, background=background,
                                  background_colour=background_colour, prepositional=False)
        text = f"{head} with {coordinate(nps, 'and')}"
    else:
        raise ValueError(f"unknown template {t!r}")
    return sentence(text)


def kind_words(kind: str) -> set[str]:
    """Forms of the kind's own nouns (aligned and divergent lexicon; not the hypernyms)."""
    return {form for noun in KIND_NOUNS[kind] + DIVERGENT_NOUNS[kind] for form in (noun.singular, noun.plural)}


LANGUAGES.register("en", Language("en", realise=realise_english, kind_words=kind_words))

"""German captions of the demo world: the lexicon (aligned with the semantic lexicon of
:mod:`pseudopairs.world.grammar`), noun phrases with agreement, and the realisation of a spec.

German agreement: every noun in the lexicon carries its gender and plural; adjectives take
strong, weak or mixed endings after no article / numerals, ``der``, ``ein``/``kein``; dative plural
adds ``-n`` unless the plural already ends in ``-n`` or ``-s``; ``an``/``in``/``von``/``zu`` contract
with the definite dative article (``am``, ``im``, ``vom``, ``zum``). None of the nouns used is a
weak (n-declension) masculine, and no adjective used is indeclinable (no ``lila``, ``rosa``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pseudopairs.world.grammar import (LANGUAGES, BackgroundMention, CaptionSpec, Language, Mention,
                                       ObjectGroup, check_aligned, check_divergent, coordinate, lexicon_noun,
                                       mention_details, pick_adjectives, plural_subject, sentence)

CASES = ("nom", "acc", "dat")
GENDERS = ("m", "f", "n")


@dataclass(frozen=True)
class GermanNoun:
    singular: str
    plural: str
    gender: str  # "m", "f" or "n"

    def __post_init__(self) -> None:
        if self.gender not in GENDERS:
            raise ValueError(f"German noun {self.singular!r}: gender must be one of {GENDERS}")

    def form(self, *, plural: bool, case: str) -> str:
        """Inflected form (no archaic dative -e; none of our nouns is an n-declension noun)."""
        if case not in CASES:
            raise ValueError(f"unknown case {case!r}; expected one of {CASES}")
        if not plural:
            return self.singular
        if case == "dat" and not self.plural.endswith(("n", "s")):
            return self.plural + "n"
        return self.plural


def _de(singular: str, plural: str, gender: str) -> GermanNoun:
    return GermanNoun(singular, plural, gender)


_KISTE = _de("Kiste", "Kisten", "f")
_FAHNE = _de("Fahne", "Fahnen", "f")
KIND_NOUNS: dict[str, list[GermanNoun]] = {
    "box": [_KISTE, _KISTE, _de("Schachtel", "Schachteln", "f")],
    "ball": [_de("Ball", "Bälle", "m")],
    "tower": [_de("Turm", "Türme", "m")],
    "flag": [_FAHNE, _de("Flagge", "Flaggen", "f"), _FAHNE],
    "kite": [_de("Drachen", "Drachen", "m")],
    "star": [_de("Stern", "Sterne", "m")],
    "tent": [_de("Zelt", "Zelte", "n")],
    "egg": [_de("Ei", "Eier", "n")],
    "ring": [_de("Ring", "Ringe", "m")],
    "fish": [_de("Fisch", "Fische", "m")],
    "house": [_de("Haus", "Häuser", "n")],
    "bottle": [_de("Flasche", "Flaschen", "f")],
}
COLOURS: dict[str, str] = {"red": "rot", "blue": "blau", "green": "grün", "yellow": "gelb",
                           "purple": "violett", "orange": "orangefarben", "white": "weiß",
                           "black": "schwarz", "grey": "grau", "brown": "braun"}
SIZES: dict[str, list[str]] = {"large": ["groß", "groß", "riesig"], "small": ["klein", "klein", "winzig"]}
TEXTURES: dict[str, str] = {"striped": "gestreift", "dotted": "gepunktet", "checkered": "kariert"}
_WIESE = _de("Wiese", "Wiesen", "f")
_STRASSE = _de("Straße", "Straßen", "f")
_TEPPICH = _de("Teppich", "Teppiche", "m")
_HIMMEL = _de("Himmel", "Himmel", "m")
# Background phrases: (preposition governing the dative, noun), aligned with the senses.
BACKGROUNDS: dict[str, list[tuple[str, GermanNoun]]] = {
    "lawn": [("auf", _WIESE), ("auf", _de("Rasen", "Rasen", "m")), ("auf", _WIESE)],
    "beach": [("an", _de("Strand", "Strände", "m")), ("auf", _de("Sand", "Sande", "m"))],
    "snow": [("in", _de("Schnee", "Schnee", "m")), ("auf", _de("Schneefeld", "Schneefelder", "n"))],
    "water": [("auf", _de("Wasser", "Wasser", "n")), ("auf", _de("See", "Seen", "m"))],
    "road": [("auf", _STRASSE), ("auf", _STRASSE)],
    "carpet": [("auf", _TEPPICH), ("auf", _TEPPICH)],
    "wall": [("vor", _de("Backsteinmauer", "Backsteinmauern", "f")), ("vor", _de("Mauer", "Mauern", "f"))],
    "sky": [("an", _HIMMEL), ("vor", _HIMMEL)],
    "floor": [("auf", _de("Holzboden", "Holzböden", "m")), ("auf", _de("Boden", "Böden", "m"))],
}
NUMBERS = {2: "zwei", 3: "drei", 4: "vier", 5: "fünf", 6: "sechs", 7: "sieben", 8: "acht", 9: "neun"}
PICTURE = ((_de("Bild", "Bilder", "n"), "von"), (_de("Foto", "Fotos", "n"), "von"),
           (_de("Szene", "Szenen", "f"), "mit"))

check_aligned("de", nouns=KIND_NOUNS, colours=COLOURS, sizes=SIZES, textures=TEXTURES,
              backgrounds=BACKGROUNDS)

# The divergent lexicon (grammar.CaptionStyle): "Kugel" is the second variant of both ball and
# egg (one German word for two English kinds), hypernyms, unrendered details; a material is the
# first part of a compound (Holzkiste), not an adjective.
_KUGEL = _de("Kugel", "Kugeln", "f")
DIVERGENT_NOUNS: dict[str, list[GermanNoun]] = {
    **KIND_NOUNS, "ball": KIND_NOUNS["ball"] + [_KUGEL], "egg": KIND_NOUNS["egg"] + [_KUGEL]}
HYPERNYM_NOUNS: dict[str, GermanNoun] = {
    "toy": _de("Spielzeug", "Spielzeuge", "n"), "building": _de("Gebäude", "Gebäude", "n"),
    "container": _de("Behälter", "Behälter", "m"), "object": _de("Gegenstand", "Gegenstände", "m")}
CONDITIONS: dict[str, str] = {"new": "neu", "old": "alt", "broken": "kaputt", "dirty": "schmutzig"}
MATERIALS: dict[str, str] = {"wooden": "Holz", "plastic": "Plastik", "metal": "Metall", "paper": "Papier"}

check_divergent("de", nouns=DIVERGENT_NOUNS, hypernyms=HYPERNYM_NOUNS, conditions=CONDITIONS,
                materials=MATERIALS)


def compound(prefix: str, noun: GermanNoun) -> GermanNoun:
    """A compound noun: the head's gender and plural (Holz + Kiste → Holzkiste, Holzkisten)."""
    return GermanNoun(prefix + noun.singular.lower(), prefix + noun.plural.lower(), noun.gender)

# --------------------------------------------------------------------------------------------
# Noun phrases
# --------------------------------------------------------------------------------------------

_DER = {("m", "nom"): "der", ("m", "acc"): "den", ("m", "dat"): "dem",
        ("f", "nom"): "die", ("f", "acc"): "die", ("f", "dat"): "der",
        ("n", "nom"): "das", ("n", "acc"): "das", ("n", "dat"): "dem",
        ("pl", "nom"): "die", ("pl", "acc"): "die", ("pl", "dat"): "den"}
# Suffix of ein / kein (plural only for kein).
_EIN_SUFFIX = {("m", "nom"): "", ("m", "acc"): "en", ("m", "dat"): "em",
               ("f", "nom"): "e", ("f", "acc"): "e", ("f", "dat"): "er",
               ("n", "nom"): "", ("n", "acc"): "", ("n", "dat"): "em",
               ("pl", "nom"): "e", ("pl", "acc"): "e", ("pl", "dat"): "en"}
# Adjective endings (nominative, accusative, dative; genitive is never used).
STRONG_ENDINGS = {("m", "nom"): "er", ("m", "acc"): "en", ("m", "dat"): "em",
                  ("f", "nom"): "e", ("f", "acc"): "e", ("f", "dat"): "er",
                  ("n", "nom"): "es", ("n", "acc"): "es", ("n", "dat"): "em",
                  ("pl", "nom"): "e", ("pl", "acc"): "e", ("pl", "dat"): "en"}
WEAK_ENDINGS = {key: ("e" if key in {("m", "nom"), ("f", "nom"), ("f", "acc"), ("n", "nom"),
                                      ("n", "acc")} else "en")
                for key in STRONG_ENDINGS}
MIXED_ENDINGS = {**WEAK_ENDINGS, ("m", "nom"): "er", ("n", "nom"): "es", ("n", "acc"): "es"}

ARTICLES = ("der", "ein", "kein", "number", "einige", "mehrere", "none")
_CONTRACTIONS = {("an", "dem"): "am", ("in", "dem"): "im", ("von", "dem"): "vom",
                 ("zu", "dem"): "zum"}


def german_adjective(base: str, ending: str) -> str:
    """Inflected adjective; a base ending in -e takes the ending without its own e (leise → leiser)."""
    if base.endswith("e") and ending.startswith("e"):
        return base + ending[1:]
    return base + ending


def _german_parts(noun: GermanNoun, *, adjectives: Sequence[str], count: int, article: str,
                  case: str) -> tuple[str | None, list[str]]:
    if case not in CASES:
        raise ValueError(f"unknown case {case!r}; expected one of {CASES}")
    if article not in ARTICLES:
        raise ValueError(f"unknown German article type {article!r}; expected one of {ARTICLES}")
    if count < 1:
        raise ValueError(f"count must be ≥ 1, got {count}")
    if article == "number" and count == 1:
        article = "ein"  # "ein Ball" is the numeral one as well
    plural = count > 1 or article in ("einige", "mehrere")
    if article == "ein" and plural:
        raise ValueError("the article 'ein' has no plural; use 'number', 'none' or a quantifier")
    key = ("pl" if plural else noun.gender, case)
    if article == "der":
        det, endings = _DER[key], WEAK_ENDINGS
    elif article == "ein":
        det, endings = "ein" + _EIN_SUFFIX[key], MIXED_ENDINGS
    elif article == "kein":
        det, endings = "kein" + _EIN_SUFFIX[key], (WEAK_ENDINGS if plural else MIXED_ENDINGS)
    elif article == "number":
        if count not in NUMBERS:
            raise ValueError(f"no German number word for {count}")
        det, endings = NUMBERS[count], STRONG_ENDINGS
    elif article in ("einige", "mehrere"):
        det, endings = article + ("n" if case == "dat" else ""), STRONG_ENDINGS
    else:  # none
        det, endings = None, STRONG_ENDINGS
    words = [german_adjective(a, endings[key]) for a in adjectives]
    words.append(noun.form(plural=plural, case=case))
    return det, words


def german_noun_phrase(noun: GermanNoun, *, adjectives: Sequence[str] = (), count: int = 1,
                       article: str = "ein", case: str = "nom") -> str:
    """A German noun phrase with correct agreement.

    ``article``: ``der`` (definite, weak adjectives), ``ein`` (singular indefinite, mixed),
    ``kein`` (mixed in the singular, weak in the plural), ``number`` (numeral from ``count``;
    count 1 gives ``ein``; strong adjectives), ``einige``/``mehrere`` (plural, strong) or ``none``
    (no determiner, strong). ``case``: ``nom``, ``acc`` or ``dat``. ``adjectives``: base forms.
    """
    det, words = _german_parts(noun, adjectives=adjectives, count=count, article=article, case=case)
    return " ".join(([det] if det else []) + words)


def german_prepositional_phrase(preposition: str, noun: GermanNoun, *,
                                adjectives: Sequence[str] = (), count: int = 1,
                                article: str = "ein", case: str = "dat") -> str:
    """``preposition`` + noun phrase, contracting an/in/von/zu + dem to am/im/vom/zum."""
    det, words = _german_parts(noun, adjectives=adjectives, count=count, article=article, case=case)
    contracted = _CONTRACTIONS.get((preposition, det)) if article == "der" else None
    if contracted:
        return " ".join([contracted] + words)
    return " ".join([preposition] + ([det] if det else []) + words)


def adjectives(*, size: str | None, size_variant: int, colour: str | None, texture: str | None) -> list[str]:
    """Adjectives (base forms) in the order size, colour, texture."""
    return pick_adjectives(sizes=SIZES, colours=COLOURS, textures=TEXTURES, size=size,
                           size_variant=size_variant, colour=colour, texture=texture)


def german_object_phrase(kind: str, *, colour: str | None = None, size: str | None = None,
                         texture: str | None = None, count: int = 1, article: str = "ein",
                         case: str = "nom", noun_variant: int = 0, size_variant: int = 0) -> str:
    """German noun phrase for an object described by (kind, colour, count, size, texture),
    e.g. ``("box", "red", 2, "large", "number", "dat")`` → ``"zwei großen roten Kisten"``."""
    adjs = adjectives(size=size, size_variant=size_variant, colour=colour, texture=texture)
    return german_noun_phrase(KIND_NOUNS[kind][noun_variant], adjectives=adjs, count=count,
                              article=article, case=case)


def german_mention(mention: Mention, group: ObjectGroup, *, case: str, languages: str = "aligned") -> str:
    """The noun phrase of a mention: size, colour, texture, then the condition (German order of
    the divergent world: "eine kleine rote alte Holzkiste"); a material makes a compound."""
    if mention.texture and group.texture not in TEXTURES:
        raise ValueError(f"texture {group.texture!r} cannot be mentioned")
    noun = lexicon_noun(group.kind, mention.noun, languages, kinds=KIND_NOUNS,
                        divergent=DIVERGENT_NOUNS, hypernyms=HYPERNYM_NOUNS)
    condition, material = mention_details(mention, group)
    if material:
        noun = compound(MATERIALS[material], noun)
    article = {"a": "ein", "number": "number", "some": "einige", "several": "mehrere"}[
        "a" if group.count == 1 else mention.quantity]
    adjs = adjectives(size=group.size if mention.size is not None else None,
                      size_variant=mention.size or 0, colour=group.colour if mention.colour else None,
                      texture=group.texture if mention.texture else None)
    if condition:
        adjs.append(CONDITIONS[condition])
    return german_noun_phrase(noun, adjectives=adjs, count=group.count, article=article, case=case)


def german_background(bg: BackgroundMention, *, background: str, background_colour: str,
                      prepositional: bool = True) -> str:
    prep, noun = BACKGROUNDS[background][bg.phrase]
    adjs = [COLOURS[background_colour]] if bg.adjective else []
    article = "der" if bg.definite else "ein"
    if prepositional:
        return german_prepositional_phrase(prep, noun, adjectives=adjs, article=article, case="dat")
    return german_noun_phrase(noun, adjectives=adjs, article=article, case="nom")


def realise_german(spec: CaptionSpec, *, groups: Sequence[ObjectGroup], background: str,
                   background_colour: str) -> str:
    def nps(mentions, case):
        return coordinate([german_mention(m, groups[m.group], case=case, languages=spec.languages)
                           for m in mentions], "und")

    bg = (" " + german_background(spec.background, background=background,
                                  background_colour=background_colour)
          if spec.background is not None else "")
    plural = plural_subject(spec.mentions, groups)
    t, f = spec.template, spec.frame
    if t == "fragment":
        text = nps(spec.mentions, "nom") + bg
    elif t == "exist":
        opener = ("Es gibt", "Man sieht")[f]
        text = f"{opener} {nps(spec.mentions, 'acc')}{bg}"
    elif t == "verb" and spec.languages == "divergent":  # background first, verb second
        verb = ("sind" if plural else "ist", "liegen" if plural else "liegt", "sind" if plural else "ist")[f]
        text = f"{bg} {verb} {nps(spec.mentions, 'nom')}{' zu sehen' if f == 2 else ''}"
    elif t == "verb":
        subject = nps(spec.mentions, "nom")
        if f == 0:
            text = f"{subject} {'sind' if plural else 'ist'}{bg}"
        elif f == 1:
            text = f"{subject} {'liegen' if plural else 'liegt'}{bg}"
        else:
            text = f"{subject} {'sind' if plural else 'ist'}{bg} zu sehen"
    elif t == "picture":
        noun, prep = PICTURE[f]
        text = f"{german_noun_phrase(noun, article='ein')} {prep} {nps(spec.mentions, 'dat')}{bg}"
    elif t == "next_to":
        first_plural = plural_subject(spec.mentions[:1], groups)
        verb = "" if f == 0 else (" sind" if first_plural else " ist")
        text = f"{nps(spec.mentions[:1], 'nom')}{verb} neben {nps(spec.mentions[1:], 'dat')}{bg}"
    elif t == "bg_with":
        head = german_background(spec.background, background=background,
                                 background_colour=background_colour, prepositional=False)
        text = f"{head} mit {nps(spec.mentions, 'dat')}"
    else:
        raise ValueError(f"unknown template {t!r}")
    return sentence(text)


def kind_words(kind: str) -> set[str]:
    """Forms of the kind's own nouns (aligned and divergent lexicon; not hypernyms or compounds)."""
    return {form for noun in KIND_NOUNS[kind] + DIVERGENT_NOUNS[kind]
            for form in (noun.singular, noun.plural, noun.form(plural=True, case="dat"))}


LANGUAGES.register("de", Language("de", realise=realise_german, kind_words=kind_words))

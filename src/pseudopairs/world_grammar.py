"""The English and German caption grammars of the demo world (DESIGN §5).

A caption is produced in two steps:

1. :func:`sample_caption_spec` draws a language-independent *semantic spec*
   (:class:`CaptionSpec`): which object groups of the scene are mentioned, with which attributes,
   the sentence template, the wording indices (synonyms, verbs, openers) and how the background is
   mentioned.
2. :func:`realise` turns the spec into an English or a German sentence.

Every wording choice is a pair (English, German), so one spec realised in both languages gives a
sentence and its exact translation (the task1-like parallel set), while two specs drawn
independently give comparable captions (the task2-like set).

German agreement: every noun in the lexicon carries its gender and plural; adjectives take
strong, weak or mixed endings after no article / numerals, ``der``, ``ein``/``kein``; dative plural
adds ``-n`` unless the plural already ends in ``-n`` or ``-s``; ``an``/``in``/``von``/``zu`` contract
with the definite dative article (``am``, ``im``, ``vom``, ``zum``). None of the nouns used is a
weak (n-declension) masculine, and no adjective used is indeclinable (no ``lila``, ``rosa``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

CASES = ("nom", "acc", "dat")
GENDERS = ("m", "f", "n")
LANGS = ("en", "de")


# --------------------------------------------------------------------------------------------
# Lexicon
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnglishNoun:
    singular: str
    plural: str
    mass: bool = False  # mass nouns take only the definite article ("the grass")


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


def _en(singular: str, plural: str | None = None, *, mass: bool = False) -> EnglishNoun:
    return EnglishNoun(singular, plural if plural is not None else singular + "s", mass)


def _de(singular: str, plural: str, gender: str) -> GermanNoun:
    return GermanNoun(singular, plural, gender)


# Object kinds: each a list of (English, German) noun pairs (synonym variants).
KIND_NOUNS: dict[str, list[tuple[EnglishNoun, GermanNoun]]] = {
    "box": [(_en("box", "boxes"), _de("Kiste", "Kisten", "f")),
            (_en("crate"), _de("Kiste", "Kisten", "f")),
            (_en("box", "boxes"), _de("Schachtel", "Schachteln", "f"))],
    "ball": [(_en("ball"), _de("Ball", "Bälle", "m"))],
    "tower": [(_en("tower"), _de("Turm", "Türme", "m"))],
    "flag": [(_en("flag"), _de("Fahne", "Fahnen", "f")),
             (_en("flag"), _de("Flagge", "Flaggen", "f")),
             (_en("banner"), _de("Fahne", "Fahnen", "f"))],
    "kite": [(_en("kite"), _de("Drachen", "Drachen", "m"))],
    "star": [(_en("star"), _de("Stern", "Sterne", "m"))],
    "tent": [(_en("tent"), _de("Zelt", "Zelte", "n"))],
    "egg": [(_en("egg"), _de("Ei", "Eier", "n"))],
    "ring": [(_en("ring"), _de("Ring", "Ringe", "m"))],
    "fish": [(_en("fish", "fish"), _de("Fisch", "Fische", "m"))],
    "house": [(_en("house"), _de("Haus", "Häuser", "n"))],
    "bottle": [(_en("bottle"), _de("Flasche", "Flaschen", "f"))],
}

# Colour adjectives (English, German base form). Background-only colours included (grey, brown).
COLOURS: dict[str, tuple[str, str]] = {
    "red": ("red", "rot"),
    "blue": ("blue", "blau"),
    "green": ("green", "grün"),
    "yellow": ("yellow", "gelb"),
    "purple": ("purple", "violett"),
    "orange": ("orange", "orangefarben"),
    "white": ("white", "weiß"),
    "black": ("black", "schwarz"),
    "grey": ("grey", "grau"),
    "brown": ("brown", "braun"),
}

# Size adjectives: synonym pairs per size class.
SIZES: dict[str, list[tuple[str, str]]] = {
    "large": [("large", "groß"), ("big", "groß"), ("huge", "riesig")],
    "small": [("small", "klein"), ("little", "klein"), ("tiny", "winzig")],
}

# Texture adjectives. "plain" objects are never described by texture.
TEXTURES: dict[str, tuple[str, str] | None] = {
    "plain": None,
    "striped": ("striped", "gestreift"),
    "dotted": ("dotted", "gepunktet"),
    "checkered": ("checkered", "kariert"),
}


@dataclass(frozen=True)
class BackgroundPhrase:
    """One way of mentioning a background: ``{prep} {det} {adj} {noun}`` in each language."""

    en_prep: str
    en_noun: EnglishNoun
    de_prep: str  # always governs the dative here (location)
    de_noun: GermanNoun
    adjective: bool = True  # whether the colour adjective may be used with this phrase

    @property
    def countable(self) -> bool:
        return not self.en_noun.mass


_WIESE = _de("Wiese", "Wiesen", "f")
_STRASSE = _de("Straße", "Straßen", "f")
_TEPPICH = _de("Teppich", "Teppiche", "m")
_HIMMEL = _de("Himmel", "Himmel", "m")

BACKGROUND_PHRASES: dict[str, list[BackgroundPhrase]] = {
    "lawn": [BackgroundPhrase("on", _en("lawn"), "auf", _WIESE),
             BackgroundPhrase("on", _en("grass", mass=True), "auf", _de("Rasen", "Rasen", "m")),
             BackgroundPhrase("on", _en("meadow"), "auf", _WIESE)],
    "beach": [BackgroundPhrase("on", _en("beach", "beaches"), "an", _de("Strand", "Strände", "m"),
                               adjective=False),
              BackgroundPhrase("on", _en("sand", mass=True), "auf", _de("Sand", "Sande", "m"))],
    "snow": [BackgroundPhrase("in", _en("snow", mass=True), "in", _de("Schnee", "Schnee", "m")),
             BackgroundPhrase("on", _en("snowfield"), "auf", _de("Schneefeld", "Schneefelder", "n"))],
    "water": [BackgroundPhrase("on", _en("water", mass=True), "auf", _de("Wasser", "Wasser", "n")),
              BackgroundPhrase("on", _en("lake"), "auf", _de("See", "Seen", "m"))],
    "road": [BackgroundPhrase("on", _en("road"), "auf", _STRASSE),
             BackgroundPhrase("on", _en("street"), "auf", _STRASSE)],
    "carpet": [BackgroundPhrase("on", _en("carpet"), "auf", _TEPPICH),
               BackgroundPhrase("on", _en("rug"), "auf", _TEPPICH)],
    "wall": [BackgroundPhrase("in front of", _en("brick wall"), "vor",
                              _de("Backsteinmauer", "Backsteinmauern", "f")),
             BackgroundPhrase("in front of", _en("wall"), "vor", _de("Mauer", "Mauern", "f"))],
    "sky": [BackgroundPhrase("in", _en("sky", "skies", mass=True), "an", _HIMMEL),
            BackgroundPhrase("against", _en("sky", "skies"), "vor", _HIMMEL)],
    "floor": [BackgroundPhrase("on", _en("wooden floor"), "auf", _de("Holzboden", "Holzböden", "m")),
              BackgroundPhrase("on", _en("floor"), "auf", _de("Boden", "Böden", "m"))],
}

NUMBERS_EN = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight",
              9: "nine"}
NUMBERS_DE = {2: "zwei", 3: "drei", 4: "vier", 5: "fünf", 6: "sechs", 7: "sieben", 8: "acht",
              9: "neun"}
# Vague quantities for plural groups: (English, German).
QUANTIFIERS = {"some": ("some", "einige"), "several": ("several", "mehrere")}


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

GERMAN_ARTICLES = ("der", "ein", "kein", "number", "einige", "mehrere", "none")
ENGLISH_ARTICLES = ("a", "the", "number", "some", "several", "none")
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
    if article not in GERMAN_ARTICLES:
        raise ValueError(f"unknown German article type {article!r}; expected one of {GERMAN_ARTICLES}")
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
        if count not in NUMBERS_DE:
            raise ValueError(f"no German number word for {count}")
        det, endings = NUMBERS_DE[count], STRONG_ENDINGS
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


def english_indefinite_article(next_word: str) -> str:
    return "an" if next_word[:1].lower() in "aeio" else "a"


def english_noun_phrase(noun: EnglishNoun, *, adjectives: Sequence[str] = (), count: int = 1,
                        article: str = "a") -> str:
    """An English noun phrase. ``article``: ``a`` (a/an, singular), ``the``, ``number`` (numeral
    from ``count``; count 1 gives a/an), ``some``/``several`` (plural) or ``none``."""
    if article not in ENGLISH_ARTICLES:
        raise ValueError(f"unknown English article type {article!r}; expected one of {ENGLISH_ARTICLES}")
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
        if count not in NUMBERS_EN:
            raise ValueError(f"no English number word for {count}")
        det = NUMBERS_EN[count]
    elif article in ("some", "several"):
        det = article
    else:
        det = None
    return " ".join(([det] if det else []) + words)


# --------------------------------------------------------------------------------------------
# Semantic specs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectGroup:
    """``count`` identical objects of one kind in a scene."""

    kind: str
    colour: str
    size: str  # "large" | "small"
    texture: str  # "plain" | "striped" | "dotted" | "checkered"
    count: int


@dataclass(frozen=True)
class Mention:
    """How one object group is described."""

    group: int  # index into the scene's groups
    quantity: str  # "a" (count 1), "number", "some", "several"
    noun: int  # index into KIND_NOUNS[kind]
    size: int | None  # index into SIZES[size]; None = size not mentioned
    colour: bool
    texture: bool


@dataclass(frozen=True)
class BackgroundMention:
    phrase: int  # index into BACKGROUND_PHRASES[background]
    definite: bool
    adjective: bool


@dataclass(frozen=True)
class CaptionSpec:
    template: str  # one of TEMPLATES
    frame: int  # template-specific wording (opener / verb), index into TEMPLATES[template]
    mentions: tuple[Mention, ...]
    background: BackgroundMention | None


# Template → number of wording frames. Frames per template (English / German):
#   fragment:  "{NPs} {BG}."                        / same, nominative
#   exist:     "There is/are {NPs} {BG}." | "You can see {NPs} {BG}."
#              / "Es gibt {NPs:acc} {BG}." | "Man sieht {NPs:acc} {BG}."
#   verb:      "{NPs} is/are {BG}." | "{NPs} lies/lie {BG}." | "{NPs} can be seen {BG}."
#              / "{NPs} ist/sind {BG}." | "{NPs} liegt/liegen {BG}." | "{NPs} ist/sind {BG} zu sehen."
#   picture:   "A picture of" | "A photo of" | "A scene with" + {NPs} {BG}
#              / "Ein Bild von" | "Ein Foto von" | "Eine Szene mit" + {NPs:dat} {BG}
#   next_to:   "{NP1} next to {rest} {BG}." | "{NP1} is/are next to {rest} {BG}."
#              / "{NP1} neben {rest:dat} {BG}." | "{NP1} ist/sind neben {rest:dat} {BG}."
#   bg_with:   "{BG noun phrase} with {NPs}." / "{BG noun phrase} mit {NPs:dat}."
TEMPLATES = {"fragment": 1, "exist": 2, "verb": 3, "picture": 3, "next_to": 2, "bg_with": 1}
TEMPLATE_WEIGHTS = {"fragment": 0.3, "exist": 0.15, "verb": 0.2, "picture": 0.15,
                    "next_to": 0.1, "bg_with": 0.1}
_NEEDS_BACKGROUND = {"verb", "bg_with"}
_PICTURE_EN = ("A picture of", "A photo of", "A scene with")
_PICTURE_DE = ((GermanNoun("Bild", "Bilder", "n"), "von"), (GermanNoun("Foto", "Fotos", "n"), "von"),
               (GermanNoun("Szene", "Szenen", "f"), "mit"))

# Probabilities that an attribute is mentioned.
P_COLOUR = 0.75
P_SIZE = 0.4
P_TEXTURE = 0.3
P_NUMBER = 0.8  # plural groups: exact number, otherwise some/several
P_BACKGROUND = 0.8
P_BACKGROUND_DEFINITE = 0.4
P_BACKGROUND_ADJECTIVE = 0.4


def _mention_count_weights(n_groups: int) -> list[float]:
    k = min(3, n_groups)
    w = [2.0 ** i for i in range(k)]  # favour mentioning more of the scene
    return [x / sum(w) for x in w]


def weighted_index(rng: np.random.Generator, weights: Sequence[float]) -> int:
    """Index drawn with probability proportional to ``weights`` (one uniform draw)."""
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("weights must have a positive sum")
    u = rng.random() * total
    acc = 0.0
    for i, w in enumerate(weights):
        acc += w
        if u < acc:
            return i
    return max(i for i, w in enumerate(weights) if w > 0)


def sample_caption_spec(rng: np.random.Generator, *, groups: Sequence[ObjectGroup],
                        background: str) -> CaptionSpec:
    """Draw one language-independent caption spec for a scene (1–3 of its groups mentioned)."""
    if not groups:
        raise ValueError("a scene needs at least one object group to be described")
    if background not in BACKGROUND_PHRASES:
        raise ValueError(f"unknown background {background!r}")
    n_mentions = weighted_index(rng, _mention_count_weights(len(groups))) + 1
    chosen = rng.permutation(len(groups))[:n_mentions]
    mentions = []
    for g in chosen:
        group = groups[int(g)]
        if group.count == 1:
            quantity = "a"
        elif rng.random() < P_NUMBER:
            quantity = "number"
        else:
            quantity = "some" if rng.random() < 0.5 else "several"
        noun = int(rng.integers(len(KIND_NOUNS[group.kind])))
        size = int(rng.integers(len(SIZES[group.size]))) if rng.random() < P_SIZE else None
        colour = bool(rng.random() < P_COLOUR)
        texture = bool(TEXTURES[group.texture] is not None and rng.random() < P_TEXTURE)
        mentions.append(Mention(int(g), quantity, noun, size, colour, texture))

    names = [t for t in TEMPLATES if t != "next_to" or n_mentions >= 2]
    template = names[weighted_index(rng, [TEMPLATE_WEIGHTS[t] for t in names])]

    phrases = BACKGROUND_PHRASES[background]
    bg = None
    if template in _NEEDS_BACKGROUND or rng.random() < P_BACKGROUND:
        if template == "bg_with":
            options = [i for i, ph in enumerate(phrases) if ph.countable]
        else:
            options = list(range(len(phrases)))
        idx = options[int(rng.integers(len(options)))]
        phrase = phrases[idx]
        if template == "bg_with":
            definite = False
        elif not phrase.countable:
            definite = True
        else:
            definite = bool(rng.random() < P_BACKGROUND_DEFINITE)
        adjective = bool(phrase.adjective and rng.random() < P_BACKGROUND_ADJECTIVE)
        bg = BackgroundMention(idx, definite, adjective)
    frames = list(range(TEMPLATES[template]))
    if template == "verb":  # no "lie in the sky", no "is against a sky"
        if background == "sky":
            frames.remove(1)
        if bg is not None and phrases[bg.phrase].en_prep == "against" and 0 in frames:
            frames.remove(0)
    frame = frames[int(rng.integers(len(frames)))]
    return CaptionSpec(template, frame, tuple(mentions), bg)


# --------------------------------------------------------------------------------------------
# Realisation
# --------------------------------------------------------------------------------------------


def _coordinate(items: Sequence[str], conjunction: str) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + f" {conjunction} " + items[-1]


def mention_adjectives(mention: Mention, group: ObjectGroup, lang: str) -> list[str]:
    """Adjectives (base forms) in the order size, colour, texture."""
    side = LANGS.index(lang)
    adjs = []
    if mention.size is not None:
        adjs.append(SIZES[group.size][mention.size][side])
    if mention.colour:
        adjs.append(COLOURS[group.colour][side])
    if mention.texture:
        texture = TEXTURES[group.texture]
        if texture is None:
            raise ValueError(f"texture {group.texture!r} cannot be mentioned")
        adjs.append(texture[side])
    return adjs


def german_object_phrase(kind: str, *, colour: str | None = None, size: str | None = None,
                         texture: str | None = None, count: int = 1, article: str = "ein",
                         case: str = "nom", noun_variant: int = 0, size_variant: int = 0) -> str:
    """German noun phrase for an object described by (kind, colour, count, size, texture),
    e.g. ``("box", "red", 2, "large", "number", "dat")`` → ``"zwei großen roten Kisten"``."""
    adjs = []
    if size is not None:
        adjs.append(SIZES[size][size_variant][1])
    if colour is not None:
        adjs.append(COLOURS[colour][1])
    if texture is not None and TEXTURES[texture] is not None:
        adjs.append(TEXTURES[texture][1])
    return german_noun_phrase(KIND_NOUNS[kind][noun_variant][1], adjectives=adjs, count=count,
                              article=article, case=case)


def english_object_phrase(kind: str, *, colour: str | None = None, size: str | None = None,
                          texture: str | None = None, count: int = 1, article: str = "a",
                          noun_variant: int = 0, size_variant: int = 0) -> str:
    """English counterpart of :func:`german_object_phrase`."""
    adjs = []
    if size is not None:
        adjs.append(SIZES[size][size_variant][0])
    if colour is not None:
        adjs.append(COLOURS[colour][0])
    if texture is not None and TEXTURES[texture] is not None:
        adjs.append(TEXTURES[texture][0])
    return english_noun_phrase(KIND_NOUNS[kind][noun_variant][0], adjectives=adjs, count=count,
                               article=article)


def english_mention(mention: Mention, group: ObjectGroup) -> str:
    noun = KIND_NOUNS[group.kind][mention.noun][0]
    article = "a" if group.count == 1 else mention.quantity
    return english_noun_phrase(noun, adjectives=mention_adjectives(mention, group, "en"),
                               count=group.count, article=article)


def german_mention(mention: Mention, group: ObjectGroup, *, case: str) -> str:
    noun = KIND_NOUNS[group.kind][mention.noun][1]
    article = {"a": "ein", "number": "number", "some": "einige", "several": "mehrere"}[
        "a" if group.count == 1 else mention.quantity]
    return german_noun_phrase(noun, adjectives=mention_adjectives(mention, group, "de"),
                              count=group.count, article=article, case=case)


def _plural_subject(mentions: Sequence[Mention], groups: Sequence[ObjectGroup]) -> bool:
    return len(mentions) > 1 or groups[mentions[0].group].count > 1


def _background_parts(bg: BackgroundMention, background: str, background_colour: str, lang: str):
    phrase = BACKGROUND_PHRASES[background][bg.phrase]
    side = LANGS.index(lang)
    adjs = [COLOURS[background_colour][side]] if bg.adjective else []
    return phrase, adjs


def english_background(bg: BackgroundMention, *, background: str, background_colour: str,
                       prepositional: bool = True) -> str:
    phrase, adjs = _background_parts(bg, background, background_colour, "en")
    np_ = english_noun_phrase(phrase.en_noun, adjectives=adjs, article="the" if bg.definite else "a")
    return f"{phrase.en_prep} {np_}" if prepositional else np_


def german_background(bg: BackgroundMention, *, background: str, background_colour: str,
                      prepositional: bool = True) -> str:
    phrase, adjs = _background_parts(bg, background, background_colour, "de")
    article = "der" if bg.definite else "ein"
    if prepositional:
        return german_prepositional_phrase(phrase.de_prep, phrase.de_noun, adjectives=adjs,
                                           article=article, case="dat")
    return german_noun_phrase(phrase.de_noun, adjectives=adjs, article=article, case="nom")


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text[:1].upper() + text[1:] + "."


def realise_english(spec: CaptionSpec, *, groups: Sequence[ObjectGroup], background: str,
                    background_colour: str) -> str:
    nps = [english_mention(m, groups[m.group]) for m in spec.mentions]
    bg = (" " + english_background(spec.background, background=background,
                                   background_colour=background_colour)
          if spec.background is not None else "")
    plural = _plural_subject(spec.mentions, groups)
    t, f = spec.template, spec.frame
    if t == "fragment":
        text = _coordinate(nps, "and") + bg
    elif t == "exist":
        if f == 0:
            first_plural = groups[spec.mentions[0].group].count > 1  # agrees with first conjunct
            text = f"There {'are' if first_plural else 'is'} {_coordinate(nps, 'and')}{bg}"
        else:
            text = f"You can see {_coordinate(nps, 'and')}{bg}"
    elif t == "verb":
        verb = [("is", "are"), ("lies", "lie"), ("can be seen", "can be seen")][f][plural]
        text = f"{_coordinate(nps, 'and')} {verb}{bg}"
    elif t == "picture":
        text = f"{_PICTURE_EN[f]} {_coordinate(nps, 'and')}{bg}"
    elif t == "next_to":
        first_plural = _plural_subject(spec.mentions[:1], groups)
        verb = "" if f == 0 else (" are" if first_plural else " is")
        text = f"{nps[0]}{verb} next to {_coordinate(nps[1:], 'and')}{bg}"
    elif t == "bg_with":
        head = english_background(spec.background, background=background,
                                  background_colour=background_colour, prepositional=False)
        text = f"{head} with {_coordinate(nps, 'and')}"
    else:
        raise ValueError(f"unknown template {t!r}")
    return _sentence(text)


def realise_german(spec: CaptionSpec, *, groups: Sequence[ObjectGroup], background: str,
                   background_colour: str) -> str:
    def nps(mentions, case):
        return _coordinate([german_mention(m, groups[m.group], case=case) for m in mentions], "und")

    bg = (" " + german_background(spec.background, background=background,
                                  background_colour=background_colour)
          if spec.background is not None else "")
    plural = _plural_subject(spec.mentions, groups)
    t, f = spec.template, spec.frame
    if t == "fragment":
        text = nps(spec.mentions, "nom") + bg
    elif t == "exist":
        opener = ("Es gibt", "Man sieht")[f]
        text = f"{opener} {nps(spec.mentions, 'acc')}{bg}"
    elif t == "verb":
        subject = nps(spec.mentions, "nom")
        if f == 0:
            text = f"{subject} {'sind' if plural else 'ist'}{bg}"
        elif f == 1:
            text = f"{subject} {'liegen' if plural else 'liegt'}{bg}"
        else:
            text = f"{subject} {'sind' if plural else 'ist'}{bg} zu sehen"
    elif t == "picture":
        noun, prep = _PICTURE_DE[f]
        text = f"{german_noun_phrase(noun, article='ein')} {prep} {nps(spec.mentions, 'dat')}{bg}"
    elif t == "next_to":
        first_plural = _plural_subject(spec.mentions[:1], groups)
        verb = "" if f == 0 else (" sind" if first_plural else " ist")
        text = f"{nps(spec.mentions[:1], 'nom')}{verb} neben {nps(spec.mentions[1:], 'dat')}{bg}"
    elif t == "bg_with":
        head = german_background(spec.background, background=background,
                                 background_colour=background_colour, prepositional=False)
        text = f"{head} mit {nps(spec.mentions, 'dat')}"
    else:
        raise ValueError(f"unknown template {t!r}")
    return _sentence(text)


def realise(spec: CaptionSpec, *, lang: str, groups: Sequence[ObjectGroup], background: str,
            background_colour: str) -> str:
    """The caption of ``spec`` in ``lang`` ("en" or "de")."""
    if spec.template in _NEEDS_BACKGROUND and spec.background is None:
        raise ValueError(f"template {spec.template!r} needs a background mention")
    if spec.template == "next_to" and len(spec.mentions) < 2:
        raise ValueError("template 'next_to' needs at least two mentions")
    if lang == "en":
        return realise_english(spec, groups=groups, background=background,
                               background_colour=background_colour)
    if lang == "de":
        return realise_german(spec, groups=groups, background=background,
                              background_colour=background_colour)
    raise ValueError(f"unknown language {lang!r}; expected one of {LANGS}")


def kind_words(kind: str, lang: str) -> set[str]:
    """Every surface form of a kind's nouns in ``lang`` (singular, plural, dative plural)."""
    side = LANGS.index(lang)
    words = set()
    for pair in KIND_NOUNS[kind]:
        noun = pair[side]
        words.update({noun.singular, noun.plural})
        if lang == "de":
            words.add(noun.form(plural=True, case="dat"))
    return words

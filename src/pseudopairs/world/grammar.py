"""The caption grammar of the demo world, language-independent part.

A caption is produced in two steps:

1. :func:`sample_caption_spec` draws a language-independent *semantic spec*
   (:class:`CaptionSpec`): which object groups of the scene are mentioned, with which attributes,
   the sentence template, the wording indices (synonyms, verbs, openers) and how the background is
   mentioned.
2. :func:`realise` turns the spec into a sentence of one language. Each language is a module of
   :mod:`pseudopairs.world` that registers a :class:`Language` (``english``, ``german``): its
   lexicon is *aligned* with the semantic lexicon below — variant k of a kind's noun, of a size or
   of a background phrase means the same in every language — so one spec realised in several
   languages gives a sentence and its exact translations (the task1-like parallel set), while
   specs drawn independently give comparable captions (the task2-like set).

How far the languages and the images agree is a choice of :class:`CaptionStyle` (the world's
``languages``, ``unrendered`` and ``visible_detail`` settings). ``aligned`` is the world above;
``divergent`` realises a spec with lexicons that are not one-to-one — hypernyms a spec may choose
instead of the kind (``toy``/``Spielzeug``), one German noun for two kinds (``Kugel``: a ball or an
egg), German compounds for materials (``Holzkiste``) — and language-specific word order (German
fronts the background and puts the condition after the colour). Unrendered details — each
object's condition and material, never drawn — are scene facts that comparable captions of both
languages mention, so only caption–caption pairs (c2c) can align their words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from pseudopairs.core.registry import Registry

# --------------------------------------------------------------------------------------------
# The semantic lexicon: what can be said (every language's lexicon is aligned with it)
# --------------------------------------------------------------------------------------------

# Synonym variants per object kind (index = Mention.noun).
NOUN_VARIANTS: dict[str, int] = {"box": 3, "ball": 1, "tower": 1, "flag": 3, "kite": 1, "star": 1,
                                 "tent": 1, "egg": 1, "ring": 1, "fish": 1, "house": 1, "bottle": 1}
# Colours (object and background colours).
COLOUR_NAMES = ("red", "blue", "green", "yellow", "purple", "orange", "white", "black", "grey", "brown")
# Size classes and their synonym variants (index = Mention.size).
SIZE_VARIANTS: dict[str, int] = {"large": 3, "small": 3}
# Textures; "plain" objects are never described by texture.
TEXTURE_MENTIONABLE: dict[str, bool] = {"plain": False, "striped": True, "dotted": True, "checkered": True}
# Unrendered details of an object (scene facts the image does not show).
CONDITIONS = ("new", "old", "broken", "dirty")
MATERIALS = ("wooden", "plastic", "metal", "paper")

# How the languages relate: "aligned" (one lexicon, variant for variant) or "divergent".
LANGUAGE_RELATIONS = ("aligned", "divergent")
# The divergent lexicon: specific noun variants per kind (ball and egg have a second one, which
# German realises with one word for both), then the hypernyms that cover the kind.
DIVERGENT_NOUN_VARIANTS: dict[str, int] = {**NOUN_VARIANTS, "ball": 2, "egg": 2}
HYPERNYMS: dict[str, tuple[str, ...]] = {
    "toy": ("ball", "kite", "ring", "star"),
    "building": ("tower", "house", "tent"),
    "container": ("box", "bottle"),
    "object": tuple(NOUN_VARIANTS),
}


def noun_senses(kind: str, languages: str) -> list[tuple[str, object]]:
    """What a spec's noun index may name for ``kind``: ``("kind", variant)`` entries, then (in the
    divergent lexicon) ``("hypernym", name)`` entries, in a fixed order."""
    if languages == "aligned":
        return [("kind", i) for i in range(NOUN_VARIANTS[kind])]
    if languages != "divergent":
        raise ValueError(f"unknown language relation {languages!r}; expected one of {LANGUAGE_RELATIONS}")
    return ([("kind", i) for i in range(DIVERGENT_NOUN_VARIANTS[kind])]
            + [("hypernym", h) for h, kinds in HYPERNYMS.items() if kind in kinds])


def lexicon_noun(kind: str, variant: int, languages: str, *, kinds: dict, divergent: dict,
                 hypernyms: dict):
    """One language's noun for a spec's (kind, noun index) — ``kinds``: its aligned lexicon,
    ``divergent``: its divergent kind lexicon, ``hypernyms``: its hypernym nouns."""
    senses = noun_senses(kind, languages)
    if not 0 <= variant < len(senses):
        raise ValueError(f"noun variant {variant} of {kind!r} out of range for {languages!r} ({len(senses)})")
    what, which = senses[variant]
    if what == "hypernym":
        return hypernyms[which]
    return (kinds if languages == "aligned" else divergent)[kind][which]


@dataclass(frozen=True)
class BackgroundSense:
    """One way of mentioning a background (index = BackgroundMention.phrase)."""

    countable: bool  # a mass noun ("grass", "snow") takes only the definite article
    adjective: bool = True  # whether its colour adjective may be used
    against: bool = False  # "against a sky": not with the "is {BG}" frame


BACKGROUND_SENSES: dict[str, tuple[BackgroundSense, ...]] = {
    "lawn": (BackgroundSense(True), BackgroundSense(False), BackgroundSense(True)),
    "beach": (BackgroundSense(True, adjective=False), BackgroundSense(False)),
    "snow": (BackgroundSense(False), BackgroundSense(True)),
    "water": (BackgroundSense(False), BackgroundSense(True)),
    "road": (BackgroundSense(True), BackgroundSense(True)),
    "carpet": (BackgroundSense(True), BackgroundSense(True)),
    "wall": (BackgroundSense(True), BackgroundSense(True)),
    "sky": (BackgroundSense(False), BackgroundSense(True, against=True)),
    "floor": (BackgroundSense(True), BackgroundSense(True)),
}

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
    condition: str | None = None  # unrendered: CONDITIONS, or None (the aligned world has none)
    material: str | None = None  # unrendered: MATERIALS, or None


@dataclass(frozen=True)
class Mention:
    """How one object group is described."""

    group: int  # index into the scene's groups
    quantity: str  # "a" (count 1), "number", "some", "several"
    noun: int  # noun variant (NOUN_VARIANTS[kind])
    size: int | None  # size variant (SIZE_VARIANTS[size]); None = size not mentioned
    colour: bool
    texture: bool
    condition: bool = False  # the group's (unrendered) condition is mentioned
    material: bool = False  # the group's (unrendered) material is mentioned


@dataclass(frozen=True)
class BackgroundMention:
    phrase: int  # index into BACKGROUND_SENSES[background]
    definite: bool
    adjective: bool


@dataclass(frozen=True)
class CaptionSpec:
    template: str  # one of TEMPLATES
    frame: int  # template-specific wording (opener / verb), index < TEMPLATES[template]
    mentions: tuple[Mention, ...]
    background: BackgroundMention | None
    languages: str = "aligned"  # LANGUAGE_RELATIONS: the lexicon the noun indices refer to


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
NEEDS_BACKGROUND = {"verb", "bg_with"}

# Probabilities that an attribute is mentioned.
P_COLOUR = 0.75
P_SIZE = 0.4
P_TEXTURE = 0.3
P_NUMBER = 0.8  # plural groups: exact number, otherwise some/several
P_BACKGROUND = 0.8
P_BACKGROUND_DEFINITE = 0.4
P_BACKGROUND_ADJECTIVE = 0.4
P_HYPERNYM = 0.3  # divergent lexicon: a mention names a hypernym instead of the kind


@dataclass(frozen=True)
class CaptionStyle:
    """What a caption spec may say: ``languages`` (LANGUAGE_RELATIONS), ``unrendered`` (the
    probability that a mention names each unrendered detail of its group that the scene has),
    ``visible_detail`` (scales the probabilities of mentioning colour, size and texture). The
    default is the aligned world, whose specs draw exactly as before these choices existed."""

    languages: str = "aligned"
    unrendered: float = 0.0
    visible_detail: float = 1.0

    def __post_init__(self) -> None:
        if self.languages not in LANGUAGE_RELATIONS:
            raise ValueError(f"unknown language relation {self.languages!r}; expected one of {LANGUAGE_RELATIONS}")
        if not 0.0 <= self.unrendered <= 1.0 or not 0.0 <= self.visible_detail <= 1.0:
            raise ValueError(f"caption style out of range: {self}")


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
                        background: str, style: CaptionStyle = CaptionStyle()) -> CaptionSpec:
    """Draw one language-independent caption spec for a scene (1–3 of its groups mentioned, in a
    random order, each with its own attributes)."""
    if not groups:
        raise ValueError("a scene needs at least one object group to be described")
    if background not in BACKGROUND_SENSES:
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
        if style.languages == "aligned":
            noun = int(rng.integers(NOUN_VARIANTS[group.kind]))
        else:
            senses = noun_senses(group.kind, style.languages)
            n_kind = DIVERGENT_NOUN_VARIANTS[group.kind]
            if rng.random() < P_HYPERNYM:
                noun = n_kind + int(rng.integers(len(senses) - n_kind))
            else:
                noun = int(rng.integers(n_kind))
        v = style.visible_detail
        size = int(rng.integers(SIZE_VARIANTS[group.size])) if rng.random() < P_SIZE * v else None
        colour = bool(rng.random() < P_COLOUR * v)
        texture = bool(TEXTURE_MENTIONABLE[group.texture] and rng.random() < P_TEXTURE * v)
        details = {}
        if style.unrendered > 0:
            details = {"condition": group.condition is not None and bool(rng.random() < style.unrendered),
                       "material": group.material is not None and bool(rng.random() < style.unrendered)}
        mentions.append(Mention(int(g), quantity, noun, size, colour, texture, **details))

    names = [t for t in TEMPLATES if t != "next_to" or n_mentions >= 2]
    template = names[weighted_index(rng, [TEMPLATE_WEIGHTS[t] for t in names])]

    senses = BACKGROUND_SENSES[background]
    bg = None
    if template in NEEDS_BACKGROUND or rng.random() < P_BACKGROUND:
        if template == "bg_with":
            options = [i for i, sense in enumerate(senses) if sense.countable]
        else:
            options = list(range(len(senses)))
        idx = options[int(rng.integers(len(options)))]
        sense = senses[idx]
        if template == "bg_with":
            definite = False
        elif not sense.countable:
            definite = True
        else:
            definite = bool(rng.random() < P_BACKGROUND_DEFINITE)
        adjective = bool(sense.adjective and rng.random() < P_BACKGROUND_ADJECTIVE)
        bg = BackgroundMention(idx, definite, adjective)
    frames = list(range(TEMPLATES[template]))
    if template == "verb":  # no "lie in the sky", no "is against a sky"
        if background == "sky":
            frames.remove(1)
        if bg is not None and senses[bg.phrase].against and 0 in frames:
            frames.remove(0)
    frame = frames[int(rng.integers(len(frames)))]
    return CaptionSpec(template, frame, tuple(mentions), bg, style.languages)


# --------------------------------------------------------------------------------------------
# Languages
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Language:
    """A language of the demo world: ``realise(spec, groups=, background=, background_colour=)``
    → the sentence; ``kind_words(kind)`` → every surface form of the kind's nouns."""

    code: str
    realise: Callable[..., str]
    kind_words: Callable[[str], set[str]]


LANGUAGES: Registry[Language] = Registry(
    "demo-world language", modules=("pseudopairs.world.english", "pseudopairs.world.german",
                                    "pseudopairs.world.french", "pseudopairs.world.czech"))


def check_aligned(lang: str, *, nouns: dict, colours: dict, sizes: dict, textures: dict,
                  backgrounds: dict) -> None:
    """A language's lexicon must cover the semantic lexicon variant for variant."""
    problems = []
    if {k: len(v) for k, v in nouns.items()} != NOUN_VARIANTS:
        problems.append("noun variants per kind")
    if set(colours) != set(COLOUR_NAMES):
        problems.append("colours")
    if {k: len(v) for k, v in sizes.items()} != SIZE_VARIANTS:
        problems.append("size variants")
    if {k for k, ok in TEXTURE_MENTIONABLE.items() if ok} != set(textures):
        problems.append("textures")
    if {k: len(v) for k, v in backgrounds.items()} != {k: len(v) for k, v in BACKGROUND_SENSES.items()}:
        problems.append("background phrases")
    if problems:
        raise RuntimeError(f"world language {lang!r}: lexicon not aligned ({', '.join(problems)})")


def check_divergent(lang: str, *, nouns: dict, hypernyms: dict, conditions: dict,
                    materials: dict) -> None:
    """A language's divergent lexicon must cover the divergent noun variants, the hypernyms and
    the unrendered details."""
    problems = []
    if {k: len(v) for k, v in nouns.items()} != DIVERGENT_NOUN_VARIANTS:
        problems.append("divergent noun variants per kind")
    if set(hypernyms) != set(HYPERNYMS):
        problems.append("hypernyms")
    if set(conditions) != set(CONDITIONS):
        problems.append("conditions")
    if set(materials) != set(MATERIALS):
        problems.append("materials")
    if problems:
        raise RuntimeError(f"world language {lang!r}: divergent lexicon incomplete ({', '.join(problems)})")


def mention_details(mention: Mention, group: ObjectGroup) -> tuple[str | None, str | None]:
    """(condition, material) a mention names: the group's, or None where not mentioned."""
    for name in ("condition", "material"):
        if getattr(mention, name) and getattr(group, name) is None:
            raise ValueError(f"mention names the {name} of a {group.kind!r} group that has none")
    return (group.condition if mention.condition else None,
            group.material if mention.material else None)


def pick_adjectives(*, sizes: dict, colours: dict, textures: dict, size: str | None, size_variant: int,
                    colour: str | None, texture: str | None) -> list:
    """One language's adjectives for an object, in the order size, colour, texture (each language
    passes its own lexicon: base forms, or inflectable adjectives); a texture the language has no
    adjective for is left out."""
    adjs = []
    if size is not None:
        adjs.append(sizes[size][size_variant])
    if colour is not None:
        adjs.append(colours[colour])
    if texture is not None and texture in textures:
        adjs.append(textures[texture])
    return adjs


def coordinate(items: Sequence[str], conjunction: str) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + f" {conjunction} " + items[-1]


def plural_subject(mentions: Sequence[Mention], groups: Sequence[ObjectGroup]) -> bool:
    return len(mentions) > 1 or groups[mentions[0].group].count > 1


def sentence(text: str) -> str:
    text = " ".join(text.split())
    return text[:1].upper() + text[1:] + "."


def realise(spec: CaptionSpec, *, lang: str, groups: Sequence[ObjectGroup], background: str,
            background_colour: str) -> str:
    """The caption of ``spec`` in ``lang`` (a registered language)."""
    if spec.template in NEEDS_BACKGROUND and spec.background is None:
        raise ValueError(f"template {spec.template!r} needs a background mention")
    if spec.template == "next_to" and len(spec.mentions) < 2:
        raise ValueError("template 'next_to' needs at least two mentions")
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r}; expected one of {tuple(LANGUAGES.names())}")
    if spec.languages not in LANGUAGE_RELATIONS:
        raise ValueError(f"unknown language relation {spec.languages!r}; expected one of {LANGUAGE_RELATIONS}")
    return LANGUAGES.get(lang).realise(spec, groups=groups, background=background,
                                       background_colour=background_colour)


def kind_words(kind: str, lang: str) -> set[str]:
    """Every surface form of a kind's nouns in ``lang`` (singular, plural, inflected forms)."""
    return LANGUAGES.get(lang).kind_words(kind)

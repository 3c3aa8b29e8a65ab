"""French captions of the demo world: the lexicon (aligned with the semantic lexicon of
:mod:`pseudopairs.world.grammar`), noun phrases with agreement, and the realisation of a spec.

French agreement: every noun carries its gender and plural; adjectives agree in gender and number
and stand after the noun (colours, textures) or before it (sizes: ``un grand ballon rouge``);
some are invariable (``orange``, ``marron``, ``à pois``, ``à carreaux``). ``le``/``la`` elide to
``l'`` and ``de`` to ``d'`` before a vowel or a mute h (never before an aspirated h: ``de huit``);
``de``/``à`` contract with ``le``/``les`` (``du``, ``des``, ``au``, ``aux``; ``à côté du``), and
``de`` swallows the indefinite ``des`` (``à côté de boîtes``). Under ``de`` (``une photo de``,
``à côté de``) the preposition is repeated before every conjunct, as French does. The participle
and adjectives of the frames (``posé``, ``visible``) agree with the subject: plural when it is
plural or coordinated, feminine only when every conjunct is feminine. Élision is always written
with the ASCII apostrophe, which the Moses tokenizer keeps on the article (``l' œuf``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pseudopairs.world.grammar import (LANGUAGES, BackgroundMention, CaptionSpec, Language, Mention,
                                       ObjectGroup, check_aligned, check_divergent, coordinate, lexicon_noun,
                                       mention_details, pick_adjectives, plural_subject, sentence)

GENDERS = ("m", "f")
VOWELS = frozenset("aeiouàâäéèêëîïôöùûüœæ")  # y + vowel is a consonant: le yaourt
# Words with an aspirated h (no élision, no liaison); the lexicon has none but the numeral.
ASPIRATED_H = frozenset({"huit", "haie", "hangar", "hameau", "haut", "haute", "hêtre", "hibou"})


def elides(word: str) -> bool:
    """Whether ``le``/``la``/``de`` elide before ``word`` (vowel or mute h)."""
    w = word.lower()
    if w[:1] in VOWELS:
        return True
    return w.startswith("h") and w.split()[0].split("-")[0] not in ASPIRATED_H


@dataclass(frozen=True)
class FrenchNoun:
    singular: str
    plural: str
    gender: str  # "m" or "f"

    def __post_init__(self) -> None:
        if self.gender not in GENDERS:
            raise ValueError(f"French noun {self.singular!r}: gender must be one of {GENDERS}")

    def form(self, *, plural: bool) -> str:
        return self.plural if plural else self.singular


@dataclass(frozen=True)
class FrenchAdjective:
    ms: str  # masculine singular (the dictionary form)
    fs: str
    mp: str
    fp: str
    before: bool = False  # stands before the noun (grand, petit)
    ms_vowel: str | None = None  # masculine singular before a vowel or mute h (vieux → vieil)

    def form(self, *, gender: str, plural: bool) -> str:
        if gender not in GENDERS:
            raise ValueError(f"unknown French gender {gender!r}; expected one of {GENDERS}")
        return {("m", False): self.ms, ("f", False): self.fs, ("m", True): self.mp,
                ("f", True): self.fp}[(gender, plural)]


def _fr(singular: str, gender: str, plural: str | None = None) -> FrenchNoun:
    if plural is None:
        plural = singular if singular.endswith(("s", "x", "z")) else singular + "s"
    return FrenchNoun(singular, plural, gender)


def _adj(ms: str, fs: str | None = None, *, before: bool = False) -> FrenchAdjective:
    """A regular adjective: feminine + e (unless already in -e), plural + s (unless in -s/-x)."""
    fs = fs if fs is not None else (ms if ms.endswith("e") else ms + "e")
    mp = ms if ms.endswith(("s", "x")) else ms + "s"
    fp = fs if fs.endswith("s") else fs + "s"
    return FrenchAdjective(ms, fs, mp, fp, before)


def _inv(word: str) -> FrenchAdjective:
    """An invariable adjective (``orange``, ``marron``) or adjectival phrase (``à pois``)."""
    return FrenchAdjective(word, word, word, word)


_BOITE = _fr("boîte", "f")
_DRAPEAU = _fr("drapeau", "m", "drapeaux")
KIND_NOUNS: dict[str, list[FrenchNoun]] = {
    "box": [_BOITE, _fr("caisse", "f"), _BOITE],
    "ball": [_fr("ballon", "m")],
    "tower": [_fr("tour", "f")],
    "flag": [_DRAPEAU, _DRAPEAU, _fr("bannière", "f")],
    "kite": [_fr("cerf-volant", "m", "cerfs-volants")],
    "star": [_fr("étoile", "f")],
    "tent": [_fr("tente", "f")],
    "egg": [_fr("œuf", "m")],
    "ring": [_fr("anneau", "m", "anneaux")],
    "fish": [_fr("poisson", "m")],
    "house": [_fr("maison", "f")],
    "bottle": [_fr("bouteille", "f")],
}
COLOURS: dict[str, FrenchAdjective] = {
    "red": _adj("rouge"), "blue": _adj("bleu"), "green": _adj("vert"), "yellow": _adj("jaune"),
    "purple": _adj("violet", "violette"), "orange": _inv("orange"), "white": _adj("blanc", "blanche"),
    "black": _adj("noir"), "grey": _adj("gris"), "brown": _inv("marron"),
}
_PETIT = _adj("petit", before=True)
SIZES: dict[str, list[FrenchAdjective]] = {
    "large": [_adj("grand", before=True), _adj("gros", "grosse", before=True),
              _adj("énorme", before=True)],
    "small": [_PETIT, _PETIT, _adj("minuscule", before=True)],
}
TEXTURES: dict[str, FrenchAdjective] = {"striped": _adj("rayé"), "dotted": _inv("à pois"),
                                        "checkered": _inv("à carreaux")}
_CIEL = _fr("ciel", "m", "cieux")
# Background phrases: (preposition, noun), aligned with grammar.BACKGROUND_SENSES.
BACKGROUNDS: dict[str, list[tuple[str, FrenchNoun]]] = {
    "lawn": [("sur", _fr("pelouse", "f")), ("sur", _fr("herbe", "f")), ("sur", _fr("pré", "m"))],
    "beach": [("sur", _fr("plage", "f")), ("sur", _fr("sable", "m"))],
    "snow": [("dans", _fr("neige", "f")), ("sur", _fr("champ de neige", "m", "champs de neige"))],
    "water": [("sur", _fr("eau", "f", "eaux")), ("sur", _fr("lac", "m"))],
    "road": [("sur", _fr("route", "f")), ("dans", _fr("rue", "f"))],
    "carpet": [("sur", _fr("tapis", "m")), ("sur", _fr("carpette", "f"))],
    "wall": [("devant", _fr("mur de briques", "m", "murs de briques")), ("devant", _fr("mur", "m"))],
    "sky": [("dans", _CIEL), ("devant", _CIEL)],
    "floor": [("sur", _fr("parquet", "m")), ("sur", _fr("sol", "m"))],
}
NUMBERS = {2: "deux", 3: "trois", 4: "quatre", 5: "cinq", 6: "six", 7: "sept", 8: "huit", 9: "neuf"}
QUANTIFIERS = {"some": "quelques", "several": "plusieurs"}
PICTURE = ((_fr("image", "f"), "de"), (_fr("photo", "f"), "de"), (_fr("scène", "f"), "avec"))
# Predicates of the frames that agree with the subject.
POSE = _adj("posé")
VISIBLE = _adj("visible")

check_aligned("fr", nouns=KIND_NOUNS, colours=COLOURS, sizes=SIZES, textures=TEXTURES,
              backgrounds=BACKGROUNDS)

# The divergent lexicon (grammar.CaptionStyle): hypernyms and unrendered details (materials as
# invariable phrases after the noun: "une boîte en bois").
DIVERGENT_NOUNS: dict[str, list[FrenchNoun]] = {
    **KIND_NOUNS, "ball": KIND_NOUNS["ball"] + [_fr("balle", "f")], "egg": KIND_NOUNS["egg"] * 2}
HYPERNYM_NOUNS: dict[str, FrenchNoun] = {"toy": _fr("jouet", "m"), "building": _fr("bâtiment", "m"),
                                         "container": _fr("récipient", "m"), "object": _fr("objet", "m")}
CONDITIONS: dict[str, FrenchAdjective] = {
    "new": _adj("neuf", "neuve"), "old": FrenchAdjective("vieux", "vieille", "vieux", "vieilles", True, "vieil"),
    "broken": _adj("cassé"), "dirty": _adj("sale")}
MATERIALS: dict[str, FrenchAdjective] = {"wooden": _inv("en bois"), "plastic": _inv("en plastique"),
                                         "metal": _inv("en métal"), "paper": _inv("en papier")}

check_divergent("fr", nouns=DIVERGENT_NOUNS, hypernyms=HYPERNYM_NOUNS, conditions=CONDITIONS,
                materials=MATERIALS)


def mention_noun(mention: Mention, group: ObjectGroup, languages: str) -> FrenchNoun:
    return lexicon_noun(group.kind, mention.noun, languages, kinds=KIND_NOUNS,
                        divergent=DIVERGENT_NOUNS, hypernyms=HYPERNYM_NOUNS)

# --------------------------------------------------------------------------------------------
# Noun phrases
# --------------------------------------------------------------------------------------------

ARTICLES = ("un", "le", "number", "des", "quelques", "plusieurs", "none")


def french_noun_phrase(noun: FrenchNoun, *, adjectives: Sequence[FrenchAdjective] = (),
                       count: int = 1, article: str = "un") -> str:
    """A French noun phrase with agreement and adjective position.

    ``article``: ``un`` (un/une, singular), ``le`` (le/la/l'/les), ``number`` (numeral from
    ``count``; count 1 gives un/une), ``des`` (indefinite plural; ``de`` before a preposed
    adjective), ``quelques``/``plusieurs`` (plural) or ``none``."""
    if article not in ARTICLES:
        raise ValueError(f"unknown French article type {article!r}; expected one of {ARTICLES}")
    if count < 1:
        raise ValueError(f"count must be ≥ 1, got {count}")
    if article == "number" and count == 1:
        article = "un"
    plural = count > 1 or article in ("des", "quelques", "plusieurs")
    if article == "un" and plural:
        raise ValueError("the article 'un' has no plural; use 'number', 'des' or a quantifier")
    g = noun.gender
    after = [a.form(gender=g, plural=plural) for a in adjectives if not a.before]
    words = [noun.form(plural=plural)]
    for a in reversed([a for a in adjectives if a.before]):  # "un vieil objet", "un vieux grand objet"
        vowel = a.ms_vowel and g == "m" and not plural and elides(words[0])
        words.insert(0, a.ms_vowel if vowel else a.form(gender=g, plural=plural))
    before = words[:-1]
    words = words + after
    if article == "un":
        det = "une" if g == "f" else "un"
    elif article == "le":
        if not plural and elides(words[0]):
            return "l'" + " ".join(words)
        det = "les" if plural else ("la" if g == "f" else "le")
    elif article == "number":
        if count not in NUMBERS:
            raise ValueError(f"no French number word for {count}")
        det = NUMBERS[count]
    elif article == "des":
        det = "de" if before else "des"  # "de grands ballons"
    elif article in ("quelques", "plusieurs"):
        det = article
    else:
        det = None
    return " ".join(([det] if det else []) + words)


def with_preposition(preposition: str, phrase: str) -> str:
    """``preposition`` + noun phrase: ``de``/``à`` (also at the end of ``à côté de``) contract
    with ``le``/``les`` (du, des, au, aux), ``de`` drops the indefinite ``des``/``de`` and elides
    to ``d'`` before a vowel or mute h."""
    words = preposition.split()
    last, head = words[-1], " ".join(words[:-1])
    head = head + " " if head else ""
    if last == "de":
        for article, contracted in (("le ", "du "), ("les ", "des "), ("des ", "de "), ("de ", "de ")):
            if phrase.startswith(article):
                return head + contracted + phrase[len(article):]
        if elides(phrase):
            return head + "d'" + phrase
    elif last == "à":
        for article, contracted in (("le ", "au "), ("les ", "aux ")):
            if phrase.startswith(article):
                return head + contracted + phrase[len(article):]
    return f"{preposition} {phrase}"


def adjectives(*, size: str | None, size_variant: int, colour: str | None,
               texture: str | None) -> list[FrenchAdjective]:
    """Adjectives in the order size, colour, texture (sizes then stand before the noun)."""
    return pick_adjectives(sizes=SIZES, colours=COLOURS, textures=TEXTURES, size=size,
                           size_variant=size_variant, colour=colour, texture=texture)


def french_object_phrase(kind: str, *, colour: str | None = None, size: str | None = None,
                         texture: str | None = None, count: int = 1, article: str = "un",
                         noun_variant: int = 0, size_variant: int = 0) -> str:
    """French noun phrase for an object described by (kind, colour, count, size, texture),
    e.g. ``("box", "red", 2, "large", "number")`` → ``"deux grandes boîtes rouges"``."""
    adjs = adjectives(size=size, size_variant=size_variant, colour=colour, texture=texture)
    return french_noun_phrase(KIND_NOUNS[kind][noun_variant], adjectives=adjs, count=count,
                              article=article)


def french_mention(mention: Mention, group: ObjectGroup, languages: str = "aligned") -> str:
    if mention.texture and group.texture not in TEXTURES:
        raise ValueError(f"texture {group.texture!r} cannot be mentioned")
    noun = mention_noun(mention, group, languages)
    condition, material = mention_details(mention, group)
    article = {"a": "un", "number": "number", "some": "quelques", "several": "plusieurs"}[
        "a" if group.count == 1 else mention.quantity]
    adjs = adjectives(size=group.size if mention.size is not None else None,
                      size_variant=mention.size or 0, colour=group.colour if mention.colour else None,
                      texture=group.texture if mention.texture else None)
    adjs += ([MATERIALS[material]] if material else []) + ([CONDITIONS[condition]] if condition else [])
    return french_noun_phrase(noun, adjectives=adjs, count=group.count, article=article)


def french_background(bg: BackgroundMention, *, background: str, background_colour: str,
                      prepositional: bool = True) -> str:
    prep, noun = BACKGROUNDS[background][bg.phrase]
    adjs = [COLOURS[background_colour]] if bg.adjective else []
    phrase = french_noun_phrase(noun, adjectives=adjs, article="le" if bg.definite else "un")
    return with_preposition(prep, phrase) if prepositional else phrase


def subject_agreement(mentions: Sequence[Mention], groups: Sequence[ObjectGroup],
                      languages: str = "aligned") -> tuple[str, bool]:
    """(gender, plural) of a (coordinated) subject: feminine only if every conjunct is."""
    genders = {mention_noun(m, groups[m.group], languages).gender for m in mentions}
    return ("f" if genders == {"f"} else "m"), plural_subject(mentions, groups)


# --------------------------------------------------------------------------------------------
# Sentences
# --------------------------------------------------------------------------------------------


def realise_french(spec: CaptionSpec, *, groups: Sequence[ObjectGroup], background: str,
                   background_colour: str) -> str:
    def nps(mentions, preposition=None):
        phrases = [french_mention(m, groups[m.group], spec.languages) for m in mentions]
        if preposition is not None:  # "à côté d'un ballon et de deux tentes"
            repeat = "de" if preposition.split()[-1] == "de" else None
            phrases = [with_preposition(preposition, phrases[0])] + [
                with_preposition(repeat, p) if repeat else p for p in phrases[1:]]
        return coordinate(phrases, "et")

    bg = (" " + french_background(spec.background, background=background,
                                  background_colour=background_colour)
          if spec.background is not None else "")
    gender, plural = subject_agreement(spec.mentions, groups, spec.languages)
    t, f = spec.template, spec.frame
    if t == "fragment":
        text = nps(spec.mentions) + bg
    elif t == "exist":
        opener = ("Il y a", "On voit")[f]
        text = f"{opener} {nps(spec.mentions)}{bg}"
    elif t == "verb":
        subject = nps(spec.mentions)
        verb = "sont" if plural else "est"
        if f == 1:
            verb += " " + POSE.form(gender=gender, plural=plural)
        elif f == 2:
            verb += " " + VISIBLE.form(gender=gender, plural=plural)
        text = f"{subject} {verb}{bg}"
    elif t == "picture":
        noun, prep = PICTURE[f]
        text = f"{french_noun_phrase(noun, article='un')} {nps(spec.mentions, prep)}{bg}"
    elif t == "next_to":
        first_plural = plural_subject(spec.mentions[:1], groups)
        verb = "" if f == 0 else (" se trouvent" if first_plural else " se trouve")
        text = f"{nps(spec.mentions[:1])}{verb} {nps(spec.mentions[1:], 'à côté de')}{bg}"
    elif t == "bg_with":
        head = french_background(spec.background, background=background,
                                 background_colour=background_colour, prepositional=False)
        text = f"{head} {nps(spec.mentions, 'avec')}"
    else:
        raise ValueError(f"unknown template {t!r}")
    return sentence(text)


def kind_words(kind: str) -> set[str]:
    """Singular and plural of every noun of ``kind``, and the parts of hyphenated ones
    (``cerf-volant``: ``cerf``, ``volant``), so that ``\\w+`` tokens find them too."""
    forms = {form for noun in KIND_NOUNS[kind] + DIVERGENT_NOUNS[kind] for form in (noun.singular, noun.plural)}
    return forms | {part for form in forms if "-" in form for part in form.split("-")}


LANGUAGES.register("fr", Language("fr", realise=realise_french, kind_words=kind_words))

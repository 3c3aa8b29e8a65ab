"""Czech captions of the demo world: the lexicon (aligned with the semantic lexicon of
:mod:`pseudopairs.world.grammar`), noun phrases with case and agreement, and the realisation of
a spec.

Czech has no articles (a spec's definite/indefinite background gives the same phrase). Every noun
carries its gender — masculine animate (``drak``, the kite, declined like the animal),
masculine inanimate, feminine, neuter — and the case forms the frames need, written out in the
lexicon: nominative, accusative (``je vidět``), genitive (``vedle``, ``obrázek``, quantifiers and
numerals from five on), instrumental (``s``, ``před``) for the objects; nominative, locative
(``na``, ``v``), instrumental (``před``) and dative (``proti``) for the backgrounds. Adjectives
decline hard (``červený``) or soft (``obří``), with the animate nominative plural's consonant
change (``velcí červení draci``). Numerals: ``dva``/``dvě`` by gender, ``tři``, ``čtyři`` with the
nominative/accusative plural; ``pět``… and the quantifiers ``pár``, ``několik`` with the genitive
plural in the nominative and accusative, and the verb in the singular (``pět míčů leží``); in
other cases the numeral declines (``dvou``, ``dvěma``, ``pěti``, ``několika``) and the noun takes
the case. Prepositions vocalise (``se třemi``, ``ve sněhu``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from pseudopairs.world.grammar import (LANGUAGES, BackgroundMention, CaptionSpec, Language, Mention,
                                       ObjectGroup, check_aligned, check_divergent, coordinate, lexicon_noun,
                                       mention_details, pick_adjectives, sentence)

CASES = ("nom", "acc", "gen", "dat", "ins", "loc")
GENDERS = ("ma", "mi", "f", "n")  # masculine animate / inanimate, feminine, neuter
VOWELS = frozenset("aáeéěiíoóuúůyý")


def _forms(cases: str, text: str) -> dict[str, str]:
    words, names = text.split(), cases.split()
    if len(words) != len(names):
        raise ValueError(f"{text!r}: expected forms for {names}")
    return dict(zip(names, words))


@dataclass(frozen=True)
class CzechAdjective:
    base: str  # nominative singular masculine: hard -ý, soft -í

    def __post_init__(self) -> None:
        if not self.base.endswith(("ý", "í")):
            raise ValueError(f"Czech adjective {self.base!r}: expected a hard (-ý) or soft (-í) one")

    @property
    def soft(self) -> bool:
        return self.base.endswith("í")

    def form(self, *, gender: str, plural: bool, case: str) -> str:
        if gender not in GENDERS or case not in CASES:
            raise ValueError(f"unknown Czech gender/case {gender!r}/{case!r}")
        stem = self.base[:-1]
        if self.soft:
            return stem + _SOFT_ENDINGS[_ending_key(gender, plural, case)]
        if plural and case == "nom" and gender == "ma":
            return animate_plural_stem(stem) + "í"
        return stem + _HARD_ENDINGS[_ending_key(gender, plural, case)]


def animate_plural_stem(stem: str) -> str:
    """The consonant change before the animate nominative plural -í (velk- → velc-)."""
    for old, new in (("ck", "čt"), ("sk", "št"), ("ch", "š"), ("k", "c"), ("h", "z"), ("r", "ř")):
        if stem.endswith(old):
            return stem[:-len(old)] + new
    return stem


def _ending_key(gender: str, plural: bool, case: str) -> tuple[str, str]:
    if plural:
        return ("pl-" + {"ma": "ma", "mi": "mi", "f": "f", "n": "n"}[gender], case)
    return (gender, case)


_HARD = {  # nom acc gen dat ins loc
    "ma": "ý ého ého ému ým ém", "mi": "ý ý ého ému ým ém", "f": "á ou é é ou é",
    "n": "é é ého ému ým ém", "pl-ma": "í é ých ým ými ých", "pl-mi": "é é ých ým ými ých",
    "pl-f": "é é ých ým ými ých", "pl-n": "á á ých ým ými ých",
}
_SOFT = {
    "ma": "í ího ího ímu ím ím", "mi": "í í ího ímu ím ím", "f": "í í í í í í",
    "n": "í í ího ímu ím ím", "pl-ma": "í í ích ím ími ích", "pl-mi": "í í ích ím ími ích",
    "pl-f": "í í ích ím ími ích", "pl-n": "í í ích ím ími ích",
}
_HARD_ENDINGS = {(k, c): e for k, row in _HARD.items() for c, e in zip(CASES, row.split())}
_SOFT_ENDINGS = {(k, c): e for k, row in _SOFT.items() for c, e in zip(CASES, row.split())}


@dataclass(frozen=True)
class CzechNoun:
    lemma: str
    gender: str
    singular: dict = field(compare=False)  # case -> form (the cases the grammar uses)
    plural: dict = field(compare=False)
    attribute: CzechAdjective | None = None  # a fixed attribute (cihlová zeď), declined along

    def __post_init__(self) -> None:
        if self.gender not in GENDERS:
            raise ValueError(f"Czech noun {self.lemma!r}: gender must be one of {GENDERS}")

    def form(self, *, plural: bool, case: str) -> str:
        forms = self.plural if plural else self.singular
        if case not in forms:
            raise ValueError(f"Czech noun {self.lemma!r}: no {'plural' if plural else 'singular'} "
                             f"{case} form in the lexicon")
        return forms[case]


def _object(gender: str, singular: str, plural: str) -> CzechNoun:
    """An object noun: nominative, accusative, genitive, instrumental, singular and plural."""
    sg = _forms("nom acc gen ins", singular)
    return CzechNoun(sg["nom"], gender, sg, _forms("nom acc gen ins", plural))


def _place(gender: str, singular: str, attribute: str | None = None) -> CzechNoun:
    """A background noun (singular only): nominative, dative, instrumental, locative."""
    sg = _forms("nom dat ins loc", singular)
    return CzechNoun(sg["nom"], gender, sg, {}, CzechAdjective(attribute) if attribute else None)


_KRABICE = _object("f", "krabice krabici krabice krabicí", "krabice krabice krabic krabicemi")
_VLAJKA = _object("f", "vlajka vlajku vlajky vlajkou", "vlajky vlajky vlajek vlajkami")
KIND_NOUNS: dict[str, list[CzechNoun]] = {
    "box": [_KRABICE, _object("f", "bedna bednu bedny bednou", "bedny bedny beden bednami"),
            _KRABICE],
    "ball": [_object("mi", "míč míč míče míčem", "míče míče míčů míči")],
    "tower": [_object("f", "věž věž věže věží", "věže věže věží věžemi")],
    "flag": [_VLAJKA, _VLAJKA,
             _object("mi", "prapor prapor praporu praporem", "prapory prapory praporů prapory")],
    "kite": [_object("ma", "drak draka draka drakem", "draci draky draků draky")],
    "star": [_object("f", "hvězda hvězdu hvězdy hvězdou", "hvězdy hvězdy hvězd hvězdami")],
    "tent": [_object("mi", "stan stan stanu stanem", "stany stany stanů stany")],
    "egg": [_object("n", "vejce vejce vejce vejcem", "vejce vejce vajec vejci")],
    "ring": [_object("mi", "kroužek kroužek kroužku kroužkem", "kroužky kroužky kroužků kroužky")],
    "fish": [_object("f", "ryba rybu ryby rybou", "ryby ryby ryb rybami")],
    "house": [_object("mi", "dům dům domu domem", "domy domy domů domy")],
    "bottle": [_object("f", "láhev láhev láhve láhví", "láhve láhve láhví láhvemi")],
}
_adj = CzechAdjective
COLOURS: dict[str, CzechAdjective] = {
    "red": _adj("červený"), "blue": _adj("modrý"), "green": _adj("zelený"), "yellow": _adj("žlutý"),
    "purple": _adj("fialový"), "orange": _adj("oranžový"), "white": _adj("bílý"),
    "black": _adj("černý"), "grey": _adj("šedý"), "brown": _adj("hnědý"),
}
SIZES: dict[str, list[CzechAdjective]] = {
    "large": [_adj("velký"), _adj("velký"), _adj("obří")],
    "small": [_adj("malý"), _adj("malý"), _adj("malinký")],
}
TEXTURES: dict[str, CzechAdjective] = {"striped": _adj("pruhovaný"), "dotted": _adj("puntíkovaný"),
                                       "checkered": _adj("kostkovaný")}
_SILNICE = _place("f", "silnice silnici silnicí silnici")
_OBLOHA = _place("f", "obloha obloze oblohou obloze")
# Background phrases: (preposition, the case it governs, noun), aligned with the senses.
BACKGROUNDS: dict[str, list[tuple[str, str, CzechNoun]]] = {
    "lawn": [("na", "loc", _place("mi", "trávník trávníku trávníkem trávníku")),
             ("na", "loc", _place("f", "tráva trávě trávou trávě")),
             ("na", "loc", _place("f", "louka louce loukou louce"))],
    "beach": [("na", "loc", _place("f", "pláž pláži pláží pláži")),
              ("na", "loc", _place("mi", "písek písku pískem písku"))],
    "snow": [("v", "loc", _place("mi", "sníh sněhu sněhem sněhu")),
             ("na", "loc", _place("f", "pláň pláni plání pláni", "sněhový"))],
    "water": [("na", "loc", _place("f", "voda vodě vodou vodě")),
              ("na", "loc", _place("n", "jezero jezeru jezerem jezeře"))],
    "road": [("na", "loc", _SILNICE), ("na", "loc", _place("f", "ulice ulici ulicí ulici"))],
    "carpet": [("na", "loc", _place("mi", "koberec koberci kobercem koberci")),
               ("na", "loc", _place("mi", "kobereček koberečku koberečkem koberečku"))],
    "wall": [("před", "ins", _place("f", "zeď zdi zdí zdi", "cihlový")),
             ("před", "ins", _place("f", "zeď zdi zdí zdi"))],
    "sky": [("na", "loc", _OBLOHA), ("proti", "dat", _OBLOHA)],
    "floor": [("na", "loc", _place("f", "podlaha podlaze podlahou podlaze", "dřevěný")),
              ("na", "loc", _place("f", "podlaha podlaze podlahou podlaze"))],
}
# Numerals 2-4: nominative/accusative (masculine, feminine/neuter), genitive, instrumental.
SMALL_NUMBERS = {2: ("dva", "dvě", "dvou", "dvěma"), 3: ("tři", "tři", "tří", "třemi"),
                 4: ("čtyři", "čtyři", "čtyř", "čtyřmi")}
# Numerals 5-9: nominative/accusative, other cases.
NUMBERS = {5: ("pět", "pěti"), 6: ("šest", "šesti"), 7: ("sedm", "sedmi"), 8: ("osm", "osmi"),
           9: ("devět", "devíti")}
# Quantifiers with the genitive plural: nominative/accusative, other cases.
QUANTIFIERS = {"pár": ("pár", "pár"), "několik": ("několik", "několika")}
PICTURE = (("obrázek", None, "gen"), ("fotografie", None, "gen"), ("scéna", "s", "ins"))

check_aligned("cs", nouns=KIND_NOUNS, colours=COLOURS, sizes=SIZES, textures=TEXTURES,
              backgrounds={k: [noun for _, _, noun in v] for k, v in BACKGROUNDS.items()})

# The divergent lexicon (grammar.CaptionStyle): hypernyms and unrendered details (adjectives).
DIVERGENT_NOUNS: dict[str, list[CzechNoun]] = {
    **KIND_NOUNS, "egg": KIND_NOUNS["egg"] * 2,
    "ball": KIND_NOUNS["ball"] + [_object("mi", "míček míček míčku míčkem", "míčky míčky míčků míčky")]}
HYPERNYM_NOUNS: dict[str, CzechNoun] = {
    "toy": _object("f", "hračka hračku hračky hračkou", "hračky hračky hraček hračkami"),
    "building": _object("f", "budova budovu budovy budovou", "budovy budovy budov budovami"),
    "container": _object("f", "nádoba nádobu nádoby nádobou", "nádoby nádoby nádob nádobami"),
    "object": _object("mi", "předmět předmět předmětu předmětem", "předměty předměty předmětů předměty")}
CONDITIONS: dict[str, CzechAdjective] = {"new": _adj("nový"), "old": _adj("starý"),
                                         "broken": _adj("rozbitý"), "dirty": _adj("špinavý")}
MATERIALS: dict[str, CzechAdjective] = {"wooden": _adj("dřevěný"), "plastic": _adj("plastový"),
                                        "metal": _adj("kovový"), "paper": _adj("papírový")}

check_divergent("cs", nouns=DIVERGENT_NOUNS, hypernyms=HYPERNYM_NOUNS, conditions=CONDITIONS,
                materials=MATERIALS)

# --------------------------------------------------------------------------------------------
# Noun phrases
# --------------------------------------------------------------------------------------------

QUANTITIES = ("none", "number", "pár", "několik")
_DIRECT = ("nom", "acc")


def quantified(count: int, quantity: str) -> bool:
    """Numerals from five on and the quantifiers: genitive plural, verb in the singular."""
    return quantity in QUANTIFIERS or (quantity == "number" and count >= 5)


def czech_noun_phrase(noun: CzechNoun, *, adjectives: Sequence[CzechAdjective] = (), count: int = 1,
                      quantity: str = "none", case: str = "nom") -> str:
    """A Czech noun phrase in ``case``. ``quantity``: ``none`` (bare noun; singular for count 1,
    plural otherwise), ``number`` (numeral from ``count``; count 1 gives the bare noun), ``pár`` or
    ``několik`` (plural). ``adjectives`` (and the noun's own attribute) agree with the noun."""
    if quantity not in QUANTITIES:
        raise ValueError(f"unknown Czech quantity {quantity!r}; expected one of {QUANTITIES}")
    if case not in CASES:
        raise ValueError(f"unknown case {case!r}; expected one of {CASES}")
    if count < 1:
        raise ValueError(f"count must be ≥ 1, got {count}")
    if quantity == "number" and count == 1:
        quantity = "none"
    plural = count > 1 or quantity in QUANTIFIERS
    det, noun_case = None, case
    if quantity == "number" and count in SMALL_NUMBERS:
        nom_m, nom_f, gen, ins = SMALL_NUMBERS[count]
        det = {"nom": nom_m if noun.gender in ("ma", "mi") else nom_f, "gen": gen, "ins": ins}.get(
            "nom" if case in _DIRECT else case)
        if det is None:
            raise ValueError(f"no {case} form of the Czech numeral {count} in the lexicon")
    elif quantity == "number" or quantity in QUANTIFIERS:
        if quantity == "number" and count not in NUMBERS:
            raise ValueError(f"no Czech number word for {count}")
        direct, oblique = NUMBERS[count] if quantity == "number" else QUANTIFIERS[quantity]
        det, noun_case = (direct, "gen") if case in _DIRECT else (oblique, case)
    adjs = list(adjectives) + ([noun.attribute] if noun.attribute else [])
    words = [a.form(gender=noun.gender, plural=plural, case=noun_case) for a in adjs]
    words.append(noun.form(plural=plural, case=noun_case))
    return " ".join(([det] if det else []) + words)


def vocalise(preposition: str, next_word: str) -> str:
    """``s``→``se`` before s/z/š/ž and dvěma/třemi/čtyřmi; ``v``→``ve`` before v/f and before
    s/z/š/ž/ř + consonant (ve sněhu, v bílém sněhu); ``k``→``ke`` before k/g; ``z``→``ze``."""
    w = next_word.lower()
    if preposition == "s" and (w[:1] in "szšž" or w in ("dvěma", "třemi", "čtyřmi", "mnou")):
        return "se"
    if preposition == "v" and (w[:1] in "vf" or (w[:1] in "szšžř" and w[1:2] not in VOWELS)):
        return "ve"
    if preposition == "k" and w[:1] in "kg":
        return "ke"
    if preposition == "z" and w[:1] in "szšž":
        return "ze"
    return preposition


def with_preposition(preposition: str, phrase: str) -> str:
    return f"{vocalise(preposition, phrase.split()[0])} {phrase}"


def adjectives(*, size: str | None, size_variant: int, colour: str | None,
               texture: str | None) -> list[CzechAdjective]:
    """Adjectives in the order size, colour, texture."""
    return pick_adjectives(sizes=SIZES, colours=COLOURS, textures=TEXTURES, size=size,
                           size_variant=size_variant, colour=colour, texture=texture)


def czech_object_phrase(kind: str, *, colour: str | None = None, size: str | None = None,
                        texture: str | None = None, count: int = 1, quantity: str = "none",
                        case: str = "nom", noun_variant: int = 0, size_variant: int = 0) -> str:
    """Czech noun phrase for an object described by (kind, colour, count, size, texture),
    e.g. ``("box", "red", 2, "large", "number", "gen")`` → ``"dvou velkých červených krabic"``."""
    adjs = adjectives(size=size, size_variant=size_variant, colour=colour, texture=texture)
    return czech_noun_phrase(KIND_NOUNS[kind][noun_variant], adjectives=adjs, count=count,
                             quantity=quantity, case=case)


_QUANTITY = {"a": "none", "number": "number", "some": "pár", "several": "několik"}


def czech_mention(mention: Mention, group: ObjectGroup, *, case: str, languages: str = "aligned") -> str:
    """Condition, size, colour, texture, material, noun."""
    if mention.texture and group.texture not in TEXTURES:
        raise ValueError(f"texture {group.texture!r} cannot be mentioned")
    condition, material = mention_details(mention, group)
    adjs = (([CONDITIONS[condition]] if condition else [])
            + adjectives(size=group.size if mention.size is not None else None,
                         size_variant=mention.size or 0, colour=group.colour if mention.colour else None,
                         texture=group.texture if mention.texture else None)
            + ([MATERIALS[material]] if material else []))
    noun = lexicon_noun(group.kind, mention.noun, languages, kinds=KIND_NOUNS,
                        divergent=DIVERGENT_NOUNS, hypernyms=HYPERNYM_NOUNS)
    return czech_noun_phrase(noun, adjectives=adjs,
                             count=group.count, quantity=_QUANTITY[mention_quantity(mention, group)],
                             case=case)


def mention_quantity(mention: Mention, group: ObjectGroup) -> str:
    return "a" if group.count == 1 else mention.quantity


def plural_verb(mentions: Sequence[Mention], groups: Sequence[ObjectGroup]) -> bool:
    """Whether the verb of this subject is plural: coordinated subjects and plurals of 2-4 (or of
    a bare plural); a single numeral from five on or quantifier takes the singular."""
    if len(mentions) > 1:
        return True
    m = mentions[0]
    group = groups[m.group]
    return group.count > 1 and not quantified(group.count, _QUANTITY[mention_quantity(m, group)])


def czech_background(bg: BackgroundMention, *, background: str, background_colour: str,
                     prepositional: bool = True) -> str:
    """The background phrase (no articles: ``bg.definite`` changes nothing)."""
    prep, case, noun = BACKGROUNDS[background][bg.phrase]
    adjs = [COLOURS[background_colour]] if bg.adjective else []
    if not prepositional:
        return czech_noun_phrase(noun, adjectives=adjs, case="nom")
    return with_preposition(prep, czech_noun_phrase(noun, adjectives=adjs, case=case))


# --------------------------------------------------------------------------------------------
# Sentences
# --------------------------------------------------------------------------------------------


def realise_czech(spec: CaptionSpec, *, groups: Sequence[ObjectGroup], background: str,
                  background_colour: str) -> str:
    def nps(mentions, case, preposition=None):
        text = coordinate([czech_mention(m, groups[m.group], case=case, languages=spec.languages)
                           for m in mentions], "a")
        return with_preposition(preposition, text) if preposition else text

    bg = (" " + czech_background(spec.background, background=background,
                                 background_colour=background_colour)
          if spec.background is not None else "")
    plural = plural_verb(spec.mentions, groups)
    t, f = spec.template, spec.frame
    if t == "fragment":
        text = nps(spec.mentions, "nom") + bg
    elif t == "exist":
        if f == 0:  # the verb before the subject agrees with the first conjunct
            verb = "Jsou" if plural_verb(spec.mentions[:1], groups) else "Je"
            text = f"{verb} tu {nps(spec.mentions, 'nom')}{bg}"
        else:
            text = f"Je vidět {nps(spec.mentions, 'acc')}{bg}"
    elif t == "verb":
        verb = [("je", "jsou"), ("leží", "leží"), ("je vidět", "jsou vidět")][f][plural]
        text = f"{nps(spec.mentions, 'nom')} {verb}{bg}"
    elif t == "picture":
        noun, prep, case = PICTURE[f]
        text = f"{noun} {nps(spec.mentions, case, prep)}{bg}"
    elif t == "next_to":
        verb = "" if f == 0 else (" jsou" if plural_verb(spec.mentions[:1], groups) else " je")
        text = f"{nps(spec.mentions[:1], 'nom')}{verb} {nps(spec.mentions[1:], 'gen', 'vedle')}{bg}"
    elif t == "bg_with":
        head = czech_background(spec.background, background=background,
                                background_colour=background_colour, prepositional=False)
        text = f"{head} {nps(spec.mentions, 'ins', 's')}"
    else:
        raise ValueError(f"unknown template {t!r}")
    return sentence(text)


def kind_words(kind: str) -> set[str]:
    """Every case form (singular and plural) of every noun of ``kind``, also capitalised: with no
    article, a bare noun can open the sentence (``Stan na trávě.``)."""
    forms = {form for noun in KIND_NOUNS[kind] + DIVERGENT_NOUNS[kind] for forms in (noun.singular, noun.plural)
             for form in forms.values()}
    return forms | {form[:1].upper() + form[1:] for form in forms}


LANGUAGES.register("cs", Language("cs", realise=realise_czech, kind_words=kind_words))

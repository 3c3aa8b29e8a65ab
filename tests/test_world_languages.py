"""Tests of the demo world's French and Czech grammars: agreement tables written independently of
the lexicons (dictionary genders, plurals and case forms), hand-checked sentences of every
template and frame, sampled specs, the m30k_task1 table in four languages, Moses preparation."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from pseudopairs.data.text import prepare_line
from pseudopairs.world import content, czech, french, generate
from pseudopairs.world import scene as scenes
from pseudopairs.world.czech import CzechAdjective, czech_object_phrase
from pseudopairs.world.french import FrenchNoun, french_noun_phrase, french_object_phrase, with_preposition
from pseudopairs.world.grammar import (LANGUAGES, TEMPLATES, BackgroundMention, CaptionSpec, Mention,
                                       ObjectGroup, check_aligned, kind_words, realise,
                                       sample_caption_spec)
from pseudopairs.world.settings import WorldSettings

# ---------------------------------------------------------------------------------- French


# Every French noun the world can print: gender and plural, from a dictionary.
FRENCH_KIND_NOUNS = {
    "boîte": ("f", "boîtes"), "caisse": ("f", "caisses"), "ballon": ("m", "ballons"),
    "tour": ("f", "tours"), "drapeau": ("m", "drapeaux"), "bannière": ("f", "bannières"),
    "cerf-volant": ("m", "cerfs-volants"), "étoile": ("f", "étoiles"), "tente": ("f", "tentes"),
    "œuf": ("m", "œufs"), "anneau": ("m", "anneaux"), "poisson": ("m", "poissons"),
    "maison": ("f", "maisons"), "bouteille": ("f", "bouteilles"),
}
# Background and picture nouns (singular only): the definite singular, which shows gender/élision.
FRENCH_SINGULAR_NOUNS = {
    "pelouse": "la pelouse", "herbe": "l'herbe", "pré": "le pré", "plage": "la plage",
    "sable": "le sable", "neige": "la neige", "champ de neige": "le champ de neige", "eau": "l'eau",
    "lac": "le lac", "route": "la route", "rue": "la rue", "tapis": "le tapis",
    "carpette": "la carpette", "mur de briques": "le mur de briques", "mur": "le mur",
    "ciel": "le ciel", "parquet": "le parquet", "sol": "le sol", "image": "l'image",
    "photo": "la photo", "scène": "la scène",
}
# Every French adjective: masculine singular -> (feminine singular, masculine plural, feminine
# plural, before the noun).
FRENCH_ADJECTIVES = {
    "rouge": ("rouge", "rouges", "rouges", False), "bleu": ("bleue", "bleus", "bleues", False),
    "vert": ("verte", "verts", "vertes", False), "jaune": ("jaune", "jaunes", "jaunes", False),
    "violet": ("violette", "violets", "violettes", False),
    "orange": ("orange", "orange", "orange", False),
    "blanc": ("blanche", "blancs", "blanches", False), "noir": ("noire", "noirs", "noires", False),
    "gris": ("grise", "gris", "grises", False), "marron": ("marron", "marron", "marron", False),
    "grand": ("grande", "grands", "grandes", True), "gros": ("grosse", "gros", "grosses", True),
    "énorme": ("énorme", "énormes", "énormes", True), "petit": ("petite", "petits", "petites", True),
    "minuscule": ("minuscule", "minuscules", "minuscules", True),
    "rayé": ("rayée", "rayés", "rayées", False), "à pois": ("à pois", "à pois", "à pois", False),
    "à carreaux": ("à carreaux", "à carreaux", "à carreaux", False),
}


def test_french_lexicon_genders_plurals_adjectives():
    nouns = {n.singular: n for ns in french.KIND_NOUNS.values() for n in ns}
    assert {w: (n.gender, n.plural) for w, n in nouns.items()} == FRENCH_KIND_NOUNS
    singular = {n.singular: n for ps in french.BACKGROUNDS.values() for _, n in ps}
    singular.update({n.singular: n for n, _ in french.PICTURE})
    assert {w: french_noun_phrase(n, article="le") for w, n in singular.items()} == FRENCH_SINGULAR_NOUNS
    used = [*french.COLOURS.values(), *french.TEXTURES.values()]
    used += [a for adjs in french.SIZES.values() for a in adjs]
    assert {a.ms for a in used} == set(FRENCH_ADJECTIVES)
    for adj in used:
        fs, mp, fp, before = FRENCH_ADJECTIVES[adj.ms]
        assert (adj.fs, adj.mp, adj.fp, adj.before) == (fs, mp, fp, before), adj.ms
        boite = french_noun_phrase(nouns["boîte"], adjectives=[adj], count=2, article="number")
        assert boite == (f"deux {fp} boîtes" if before else f"deux boîtes {fp}")


@pytest.mark.parametrize("kwargs, expected", [
    (dict(kind="ball", colour="red", size="large"), "un grand ballon rouge"),
    (dict(kind="box", colour="red", size="large"), "une grande boîte rouge"),
    (dict(kind="box", colour="white", size="large", texture="striped", count=2, article="number"),
     "deux grandes boîtes blanches rayées"),
    (dict(kind="ball", colour="white", texture="dotted", count=3, article="number"),
     "trois ballons blancs à pois"),
    (dict(kind="star", colour="purple", size="small"), "une petite étoile violette"),
    (dict(kind="ring", colour="purple", count=2, article="quelques"), "quelques anneaux violets"),
    (dict(kind="kite", colour="orange", count=2, article="plusieurs"), "plusieurs cerfs-volants orange"),
    (dict(kind="house", colour="orange", texture="checkered"), "une maison orange à carreaux"),
    (dict(kind="egg", size="large", size_variant=2), "un énorme œuf"),
    (dict(kind="egg", size="large", size_variant=1, count=2, article="number"), "deux gros œufs"),
    (dict(kind="tower", size="large", size_variant=1, colour="grey"), "une grosse tour grise"),
    (dict(kind="tent", size="small", size_variant=2, count=4, article="number"),
     "quatre minuscules tentes"),
    (dict(kind="egg", article="le"), "l'œuf"),
    (dict(kind="egg", size="small", article="le"), "le petit œuf"),
    (dict(kind="star", size="large", size_variant=2, article="le"), "l'énorme étoile"),
    (dict(kind="star", colour="black", count=2, article="le"), "les étoiles noires"),
    (dict(kind="fish", count=2, article="des"), "des poissons"),
    (dict(kind="fish", size="small", count=2, article="des"), "de petits poissons"),
    (dict(kind="flag", noun_variant=2, colour="white"), "une bannière blanche"),
    (dict(kind="box", noun_variant=1, colour="white", count=9, article="number"), "neuf caisses blanches"),
])
def test_french_object_phrase_agreement(kwargs, expected):
    assert french_object_phrase(**kwargs) == expected


@pytest.mark.parametrize("preposition, phrase, expected", [
    ("de", "le ballon", "du ballon"), ("de", "la boîte", "de la boîte"), ("de", "l'œuf", "de l'œuf"),
    ("de", "les tentes", "des tentes"), ("de", "des tentes", "de tentes"),
    ("de", "de grands ballons", "de grands ballons"), ("de", "un œuf", "d'un œuf"),
    ("de", "une tente", "d'une tente"), ("de", "huit œufs", "de huit œufs"),
    ("de", "deux œufs", "de deux œufs"), ("à côté de", "le mur", "à côté du mur"),
    ("à côté de", "la tente", "à côté de la tente"), ("à côté de", "l'eau", "à côté de l'eau"),
    ("à côté de", "les maisons", "à côté des maisons"), ("à côté de", "un mur", "à côté d'un mur"),
    ("à", "le sol", "au sol"), ("à", "les maisons", "aux maisons"), ("à", "la plage", "à la plage"),
    ("à", "l'eau", "à l'eau"), ("sur", "le sable", "sur le sable"), ("avec", "un œuf", "avec un œuf"),
])
def test_french_contractions_and_elision(preposition, phrase, expected):
    assert with_preposition(preposition, phrase) == expected


def test_french_errors():
    with pytest.raises(ValueError, match="gender"):
        FrenchNoun("chose", "choses", "n")
    with pytest.raises(ValueError, match="no plural"):
        french_object_phrase("ball", count=2, article="un")
    with pytest.raises(ValueError, match="unknown French article"):
        french_object_phrase("ball", article="the")


# ---------------------------------------------------------------------------------- Czech


# Every Czech object noun: gender (ma = masculine animate, mi = inanimate) and the case forms the
# frames use, singular | plural: nominative, accusative, genitive, instrumental (a dictionary).
CZECH_KIND_NOUNS = {
    "krabice": ("f", "krabice krabici krabice krabicí", "krabice krabice krabic krabicemi"),
    "bedna": ("f", "bedna bednu bedny bednou", "bedny bedny beden bednami"),
    "míč": ("mi", "míč míč míče míčem", "míče míče míčů míči"),
    "věž": ("f", "věž věž věže věží", "věže věže věží věžemi"),
    "vlajka": ("f", "vlajka vlajku vlajky vlajkou", "vlajky vlajky vlajek vlajkami"),
    "prapor": ("mi", "prapor prapor praporu praporem", "prapory prapory praporů prapory"),
    "drak": ("ma", "drak draka draka drakem", "draci draky draků draky"),
    "hvězda": ("f", "hvězda hvězdu hvězdy hvězdou", "hvězdy hvězdy hvězd hvězdami"),
    "stan": ("mi", "stan stan stanu stanem", "stany stany stanů stany"),
    "vejce": ("n", "vejce vejce vejce vejcem", "vejce vejce vajec vejci"),
    "kroužek": ("mi", "kroužek kroužek kroužku kroužkem", "kroužky kroužky kroužků kroužky"),
    "ryba": ("f", "ryba rybu ryby rybou", "ryby ryby ryb rybami"),
    "dům": ("mi", "dům dům domu domem", "domy domy domů domy"),
    "láhev": ("f", "láhev láhev láhve láhví", "láhve láhve láhví láhvemi"),
}
# Every background phrase: (bare, with the background's colour adjective).
CZECH_BACKGROUNDS = {
    ("lawn", 0): ("na trávníku", "na zeleném trávníku"), ("lawn", 1): ("na trávě", "na zelené trávě"),
    ("lawn", 2): ("na louce", "na zelené louce"), ("beach", 0): ("na pláži", "na žluté pláži"),
    ("beach", 1): ("na písku", "na žlutém písku"), ("snow", 0): ("ve sněhu", "v bílém sněhu"),
    ("snow", 1): ("na sněhové pláni", "na bílé sněhové pláni"),
    ("water", 0): ("na vodě", "na modré vodě"), ("water", 1): ("na jezeře", "na modrém jezeře"),
    ("road", 0): ("na silnici", "na šedé silnici"), ("road", 1): ("na ulici", "na šedé ulici"),
    ("carpet", 0): ("na koberci", "na červeném koberci"),
    ("carpet", 1): ("na koberečku", "na červeném koberečku"),
    ("wall", 0): ("před cihlovou zdí", "před červenou cihlovou zdí"),
    ("wall", 1): ("před zdí", "před červenou zdí"), ("sky", 0): ("na obloze", "na modré obloze"),
    ("sky", 1): ("proti obloze", "proti modré obloze"),
    ("floor", 0): ("na dřevěné podlaze", "na hnědé dřevěné podlaze"),
    ("floor", 1): ("na podlaze", "na hnědé podlaze"),
}
# Every Czech adjective -> its masculine animate nominative plural (consonant changes).
CZECH_ADJECTIVES = {
    "červený": "červení", "modrý": "modří", "zelený": "zelení", "žlutý": "žlutí",
    "fialový": "fialoví", "oranžový": "oranžoví", "bílý": "bílí", "černý": "černí", "šedý": "šedí",
    "hnědý": "hnědí", "velký": "velcí", "obří": "obří", "malý": "malí", "malinký": "malincí",
    "pruhovaný": "pruhovaní", "puntíkovaný": "puntíkovaní", "kostkovaný": "kostkovaní",
}
# Hard and soft declension: nominative, accusative, genitive, dative, instrumental, locative.
CZECH_PARADIGMS = {
    ("červený", "ma", False): "červený červeného červeného červenému červeným červeném",
    ("červený", "mi", False): "červený červený červeného červenému červeným červeném",
    ("červený", "f", False): "červená červenou červené červené červenou červené",
    ("červený", "n", False): "červené červené červeného červenému červeným červeném",
    ("červený", "ma", True): "červení červené červených červeným červenými červených",
    ("červený", "mi", True): "červené červené červených červeným červenými červených",
    ("červený", "f", True): "červené červené červených červeným červenými červených",
    ("červený", "n", True): "červená červená červených červeným červenými červených",
    ("obří", "ma", False): "obří obřího obřího obřímu obřím obřím",
    ("obří", "mi", False): "obří obří obřího obřímu obřím obřím",
    ("obří", "f", False): "obří obří obří obří obří obří",
    ("obří", "n", False): "obří obří obřího obřímu obřím obřím",
    ("obří", "ma", True): "obří obří obřích obřím obřími obřích",
    ("obří", "n", True): "obří obří obřích obřím obřími obřích",
}


def test_czech_lexicon_genders_and_case_forms():
    nouns = {n.lemma: n for ns in czech.KIND_NOUNS.values() for n in ns}
    assert set(nouns) == set(CZECH_KIND_NOUNS)
    for lemma, (gender, sg, pl) in CZECH_KIND_NOUNS.items():
        noun = nouns[lemma]
        assert noun.gender == gender, lemma
        for plural, forms in ((False, sg), (True, pl)):
            assert [noun.form(plural=plural, case=c) for c in ("nom", "acc", "gen", "ins")] == forms.split()
    for bg, colours in ((b, v.colours) for b, v in content.BACKGROUNDS.items()):
        for i in range(len(czech.BACKGROUNDS[bg])):
            phrases = tuple(czech.czech_background(BackgroundMention(i, True, adj), background=bg,
                                                   background_colour=colours[0])
                            for adj in (False, True))
            assert phrases == CZECH_BACKGROUNDS[(bg, i)]
    used = [*czech.COLOURS.values(), *czech.TEXTURES.values()]
    used += [a for adjs in czech.SIZES.values() for a in adjs]
    assert {a.base for a in used} == set(CZECH_ADJECTIVES)
    for adj in used:
        assert adj.form(gender="ma", plural=True, case="nom") == CZECH_ADJECTIVES[adj.base]


@pytest.mark.parametrize("key", sorted(CZECH_PARADIGMS))
def test_czech_adjective_declension(key):
    base, gender, plural = key
    forms = [CzechAdjective(base).form(gender=gender, plural=plural, case=c)
             for c in ("nom", "acc", "gen", "dat", "ins", "loc")]
    assert forms == CZECH_PARADIGMS[key].split()


@pytest.mark.parametrize("args, expected", [
    # numerals 2-4: gender in the nominative/accusative, nominative/accusative plural
    (("ball", "red", 2, "number", "nom"), "dva červené míče"),
    (("box", "red", 2, "number", "nom"), "dvě červené krabice"),
    (("egg", "red", 2, "number", "acc"), "dvě červená vejce"),
    (("kite", "red", 2, "number", "nom"), "dva červení draci"),
    (("kite", "red", 2, "number", "acc"), "dva červené draky"),
    (("kite", "red", 3, "number", "gen"), "tří červených draků"),
    (("kite", "red", 4, "number", "ins"), "čtyřmi červenými draky"),
    (("box", "red", 2, "number", "gen"), "dvou červených krabic"),
    (("box", "red", 2, "number", "ins"), "dvěma červenými krabicemi"),
    (("egg", "white", 3, "number", "gen"), "tří bílých vajec"),
    # five and more, quantifiers: genitive plural in the nominative/accusative
    (("ball", "red", 5, "number", "nom"), "pět červených míčů"),
    (("egg", "white", 6, "number", "acc"), "šest bílých vajec"),
    (("house", None, 9, "number", "gen"), "devíti domů"),
    (("house", None, 7, "number", "ins"), "sedmi domy"),
    (("star", "yellow", 2, "několik", "nom"), "několik žlutých hvězd"),
    (("star", "yellow", 2, "několik", "ins"), "několika žlutými hvězdami"),
    (("bottle", "green", 3, "pár", "nom"), "pár zelených láhví"),
    (("bottle", "green", 3, "pár", "ins"), "pár zelenými láhvemi"),
    # singular: animate accusative = genitive; inanimate accusative = nominative
    (("kite", "yellow", 1, "none", "acc"), "žlutého draka"),
    (("ball", "yellow", 1, "none", "acc"), "žlutý míč"),
    (("box", "yellow", 1, "none", "acc"), "žlutou krabici"),
    (("house", "black", 1, "none", "gen"), "černého domu"),
    (("bottle", "black", 1, "none", "ins"), "černou láhví"),
    (("ring", "black", 1, "none", "ins"), "černým kroužkem"),
])
def test_czech_object_phrase_agreement(args, expected):
    kind, colour, count, quantity, case = args
    assert czech_object_phrase(kind, colour=colour, count=count, quantity=quantity, case=case) == expected


def test_czech_sizes_textures_and_errors():
    assert czech_object_phrase("kite", colour="purple", size="large", texture="checkered", count=3,
                               quantity="number") == "tři velcí fialoví kostkovaní draci"
    assert czech_object_phrase("kite", size="small", size_variant=2, count=2,
                               quantity="number") == "dva malincí draci"
    assert czech_object_phrase("egg", size="large", size_variant=2, case="ins") == "obřím vejcem"
    assert czech_object_phrase("tent", texture="plain") == "stan"
    with pytest.raises(ValueError, match="gender"):
        czech.CzechNoun("věc", "x", {}, {})
    with pytest.raises(ValueError, match="no singular loc form"):
        czech_object_phrase("ball", case="loc")
    with pytest.raises(ValueError, match="hard"):
        CzechAdjective("rosa")
    assert [czech.vocalise(p, w) for p, w in (("s", "stany"), ("s", "dvěma"), ("s", "třemi"),
                                              ("s", "míčem"), ("v", "sněhu"), ("v", "bílém"),
                                              ("v", "vodě"), ("k", "krabici"))] == [
        "se", "se", "se", "s", "ve", "v", "ve", "ke"]


# ---------------------------------------------------------------------------------- sentences

GROUPS = (ObjectGroup("box", "red", "large", "striped", 2),      # boîte f / krabice f
          ObjectGroup("ball", "red", "large", "dotted", 1),      # ballon m / míč mi
          ObjectGroup("tent", "green", "small", "striped", 2),   # tente f / stan mi
          ObjectGroup("kite", "purple", "small", "checkered", 3),  # cerf-volant m / drak ma
          ObjectGroup("egg", "white", "large", "dotted", 6),     # œuf m / vejce n, six
          ObjectGroup("star", "yellow", "small", "plain", 1),    # étoile f / hvězda f
          ObjectGroup("egg", "yellow", "small", "plain", 1))


def M(group, quantity="a", noun=0, size=None, colour=False, texture=False):
    return Mention(group, quantity, noun, size, colour, texture)


BG = BackgroundMention
HAND_CHECKED = [
    (CaptionSpec("fragment", 0, (M(0, "number", size=0, colour=True, texture=True),), BG(0, False, True)),
     "lawn", "green", "Deux grandes boîtes rouges rayées sur une pelouse verte.",
     "Dvě velké červené pruhované krabice na zeleném trávníku."),
    (CaptionSpec("fragment", 0, (M(6),), BG(0, True, True)), "water", "blue",
     "Un œuf sur l'eau bleue.", "Vejce na modré vodě."),
    (CaptionSpec("fragment", 0, (M(5),), BG(0, True, False)), "snow", "white",
     "Une étoile dans la neige.", "Hvězda ve sněhu."),
    (CaptionSpec("exist", 0, (M(1, colour=True), M(2, "number")), BG(0, True, True)), "sky", "blue",
     "Il y a un ballon rouge et deux tentes dans le ciel bleu.",
     "Je tu červený míč a dva stany na modré obloze."),
    (CaptionSpec("exist", 0, (M(0, "number"), M(1)), None), "sky", "blue",
     "Il y a deux boîtes et un ballon.", "Jsou tu dvě krabice a míč."),
    (CaptionSpec("exist", 1, (M(3, "number", colour=True),), None), "sky", "blue",
     "On voit trois cerfs-volants violets.", "Je vidět tři fialové draky."),
    (CaptionSpec("exist", 1, (M(4, "number", size=2),), None), "lawn", "green",
     "On voit six énormes œufs.", "Je vidět šest obřích vajec."),
    (CaptionSpec("verb", 0, (M(5, colour=True),), BG(0, True, False)), "beach", "yellow",
     "Une étoile jaune est sur la plage.", "Žlutá hvězda je na pláži."),
    (CaptionSpec("verb", 1, (M(0, "several", noun=1), M(5, size=1)), BG(0, True, True)), "snow", "white",
     "Plusieurs caisses et une petite étoile sont posées dans la neige blanche.",
     "Několik beden a malá hvězda leží v bílém sněhu."),
    (CaptionSpec("verb", 1, (M(4, "number", colour=True, texture=True),), BG(1, True, False)), "lawn", "green",
     "Six œufs blancs à pois sont posés sur l'herbe.", "Šest bílých puntíkovaných vajec leží na trávě."),
    (CaptionSpec("verb", 1, (M(1),), BG(0, False, False)), "road", "grey",
     "Un ballon est posé sur une route.", "Míč leží na silnici."),
    (CaptionSpec("verb", 2, (M(3, "some", size=2),), BG(0, True, False)), "sky", "blue",
     "Quelques minuscules cerfs-volants sont visibles dans le ciel.",
     "Pár malinkých draků je vidět na obloze."),
    (CaptionSpec("verb", 2, (M(5),), BG(1, False, False)), "water", "blue",
     "Une étoile est visible sur un lac.", "Hvězda je vidět na jezeře."),
    (CaptionSpec("verb", 0, (M(3, "number"),), BG(1, True, False)), "wall", "red",
     "Trois cerfs-volants sont devant le mur.", "Tři draci jsou před zdí."),
    (CaptionSpec("picture", 0, (M(1, size=1, texture=True), M(0, "number", noun=2)), BG(1, True, False)),
     "floor", "brown", "Une image d'un gros ballon à pois et de deux boîtes sur le sol.",
     "Obrázek velkého puntíkovaného míče a dvou krabic na podlaze."),
    (CaptionSpec("picture", 1, (M(4, "number"),), None), "floor", "brown",
     "Une photo de six œufs.", "Fotografie šesti vajec."),
    (CaptionSpec("picture", 2, (M(2, "number", colour=True), M(3, "number")), BG(0, False, True)),
     "wall", "red", "Une scène avec deux tentes vertes et trois cerfs-volants devant un mur de briques rouge.",
     "Scéna se dvěma zelenými stany a třemi draky před červenou cihlovou zdí."),
    (CaptionSpec("next_to", 0, (M(1, colour=True), M(4, "several"), M(3, "number")), BG(1, True, True)),
     "carpet", "purple", "Un ballon rouge à côté de plusieurs œufs et de trois cerfs-volants sur la carpette violette.",
     "Červený míč vedle několika vajec a tří draků na fialovém koberečku."),
    (CaptionSpec("next_to", 0, (M(5), M(6, colour=True)), None), "lawn", "green",
     "Une étoile à côté d'un œuf jaune.", "Hvězda vedle žlutého vejce."),
    (CaptionSpec("next_to", 1, (M(5), M(1)), BG(1, False, False)), "road", "grey",
     "Une étoile se trouve à côté d'un ballon dans une rue.", "Hvězda je vedle míče na ulici."),
    (CaptionSpec("next_to", 1, (M(3, "number", size=0), M(5, colour=True)), BG(1, False, True)), "sky", "blue",
     "Trois petits cerfs-volants se trouvent à côté d'une étoile jaune devant un ciel bleu.",
     "Tři malí draci jsou vedle žluté hvězdy proti modré obloze."),
    (CaptionSpec("next_to", 1, (M(4, "number"), M(0, "number")), None), "lawn", "green",
     "Six œufs se trouvent à côté de deux boîtes.", "Šest vajec je vedle dvou krabic."),
    (CaptionSpec("bg_with", 0, (M(2, "several"),), BG(1, False, True)), "water", "blue",
     "Un lac bleu avec plusieurs tentes.", "Modré jezero s několika stany."),
    (CaptionSpec("bg_with", 0, (M(3, "number", colour=True), M(5)), BG(1, False, True)), "snow", "white",
     "Un champ de neige blanc avec trois cerfs-volants violets et une étoile.",
     "Bílá sněhová pláň se třemi fialovými draky a hvězdou."),
    (CaptionSpec("bg_with", 0, (M(1),), BG(0, False, False)), "beach", "yellow",
     "Une plage avec un ballon.", "Pláž s míčem."),
]


@pytest.mark.parametrize("spec, background, colour, fr, cs", HAND_CHECKED)
def test_realise_hand_checked(spec, background, colour, fr, cs):
    kw = dict(groups=GROUPS, background=background, background_colour=colour)
    assert (realise(spec, lang="fr", **kw), realise(spec, lang="cs", **kw)) == (fr, cs)


def test_hand_checked_cover_every_template_and_frame():
    assert {(s.template, s.frame) for s, *_ in HAND_CHECKED} == {
        (t, f) for t, n in TEMPLATES.items() for f in range(n)}


def test_languages_registered_and_aligned():
    assert {"en", "de", "fr", "cs"} <= set(LANGUAGES.names())
    with pytest.raises(RuntimeError, match="not aligned .noun variants per kind"):
        check_aligned("xx", nouns={**french.KIND_NOUNS, "box": french.KIND_NOUNS["box"][:2]},
                      colours=french.COLOURS, sizes=french.SIZES, textures=french.TEXTURES,
                      backgrounds=french.BACKGROUNDS)


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text))


def test_sampled_specs_are_well_formed():
    """Many sampled specs (counts up to nine): proper sentences in fr and cs, every mentioned
    group's noun present; the four realisations of one spec name the same kinds."""
    rng = np.random.default_rng(5)
    for i in range(400):
        scene = scenes.sample_scene(rng, corpus=("m30k", "coco")[i % 2], image_size=64,
                                    max_count=9, max_objects=12)
        spec = sample_caption_spec(rng, groups=scene.groups, background=scene.background)
        kw = dict(groups=scene.groups, background=scene.background,
                  background_colour=scene.background_colour)
        for lang in ("fr", "cs"):
            text = realise(spec, lang=lang, **kw)
            assert text[0].isupper() and text.endswith(".") and "  " not in text and ".." not in text
            assert "’" not in text and " '" not in text and "' " not in text
            for m in spec.mentions:
                assert _words(text) & kind_words(scene.groups[m.group].kind, lang), (text, m)
            kinds = {k for k in {g.kind for g in scene.groups} if _words(text) & kind_words(k, lang)}
            assert kinds == {scene.groups[m.group].kind for m in spec.mentions}, text


def test_moses_preparation_keeps_elisions():
    """Moses preparation (lang fr / cs) of sampled captions: élisions stay attached to their
    article (``l&apos;`` ``œuf``, never ``l`` ``&apos;œuf``), hyphenated nouns stay one token,
    Czech words keep their diacritics."""
    rng = np.random.default_rng(11)
    elided, hyphenated = set(), set()
    for i in range(300):
        scene = scenes.sample_scene(rng, corpus=("m30k", "coco")[i % 2], image_size=64)
        spec = sample_caption_spec(rng, groups=scene.groups, background=scene.background)
        kw = dict(groups=scene.groups, background=scene.background,
                  background_colour=scene.background_colour)
        fr = prepare_line(realise(spec, lang="fr", **kw), lang="fr").split()
        assert fr[-1] == "." and all(t == t.lower() for t in fr)
        for tok in fr:
            assert tok in ("l&apos;", "d&apos;") or "&apos;" not in tok, fr
            assert tok not in ("l", "d"), fr
            if tok.endswith("&apos;"):
                elided.add(tok)
            if "-" in tok:
                hyphenated.add(tok)
        cs = prepare_line(realise(spec, lang="cs", **kw), lang="cs").split()
        assert cs[-1] == "." and all(re.fullmatch(r"[a-záčďéěíňóřšťúůýž]+|[.,]", t) for t in cs), cs
        for m in spec.mentions:
            assert set(cs) & kind_words(scene.groups[m.group].kind, "cs"), cs
    assert elided == {"l&apos;", "d&apos;"}
    assert hyphenated <= {"cerf-volant", "cerfs-volants"} and hyphenated


# ---------------------------------------------------------------------------------- world files

SETTINGS = {"seed": 5, "image_size": 32, "captions_per_image": 2,
            "images": {"m30k": {"train": 5, "val": 2, "test": 2}}}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("w")
    generate.build_world(SETTINGS, root)
    return root


def test_task1_table_has_four_aligned_languages(world):
    cfg = WorldSettings.from_dict(SETTINGS)
    assert generate.TASK1_LANGS == ("cs", "de", "en", "fr")
    for split, n in SETTINGS["images"]["m30k"].items():
        table = pd.read_parquet(world / f"captions/raw/m30k_task1/{split}.parquet")
        images = [f"m30k_{split}_{i:06d}" for i in range(n)]
        assert list(zip(table["image_id"], table["lang"], table["caption_idx"])) == [
            (i, lang, 0) for i in images for lang in ("cs", "de", "en", "fr")]
        for index, image in enumerate(images):
            rows = table[table["image_id"] == image].set_index("lang")["raw"]
            item = generate.generate_image(cfg, "m30k", split, index)
            rng = scenes.image_rng(5, "m30k", split, index, "task1")
            spec, texts = generate.parallel_captions(item.scene, rng=rng)
            assert dict(rows) == texts == dict(item.task1)
            kw = dict(groups=item.scene.groups, background=item.scene.background,
                      background_colour=item.scene.background_colour)
            assert all(realise(spec, lang=lang, **kw) == texts[lang] for lang in texts)
            # the En/De pair is the one the MT model's text is made of, unchanged
            _, en, de = generate.parallel_caption(item.scene, rng=scenes.image_rng(5, "m30k", split,
                                                                                   index, "task1"))
            assert (en, de) == (rows["en"], rows["de"])
            for m in spec.mentions:  # one spec: each language names each mentioned kind
                kind = item.scene.groups[m.group].kind
                assert all(_words(rows[lang]) & kind_words(kind, lang) for lang in texts)
    comparable = pd.read_parquet(world / "captions/raw/m30k/train.parquet")
    assert set(comparable["lang"]) == {"de", "en"}  # comparable captions: En and De only


def test_more_languages_draw_nothing_more():
    """Realising one spec in more languages consumes no randomness: the generator is left in the
    same state, so every other caption and image of the world stays the same."""
    scene = scenes.sample_scene(np.random.default_rng(2), corpus="m30k", image_size=64)
    a, b = np.random.default_rng(9), np.random.default_rng(9)
    spec_a, en, de = generate.parallel_caption(scene, rng=a)
    spec_b, texts = generate.parallel_captions(scene, rng=b, langs=("en", "de", "fr", "cs"))
    assert spec_a == spec_b and (en, de) == (texts["en"], texts["de"])
    assert a.random() == b.random()

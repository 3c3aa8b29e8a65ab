"""Caption text preparation: the Multi30K recipe, reproduced line for line in Python.

The upstream Multi30K repository prepares every caption file with a Moses snapshot of
12 December 2017 (commit 3a0631a)::

    lowercase.perl | normalize-punctuation.perl -l L | tokenizer.perl -l L

so the order is **lowercase → punctuation normalisation → tokenisation** (with Moses XML
escaping: ``&`` → ``&amp;``, ``'`` → ``&apos;``, ``"`` → ``&quot;`` …). :func:`prepare_line`
does the same with sacremoses, plus a handful of corrections where sacremoses 0.2.0 does not
behave like those 2017 perl scripts. Each correction mirrors the perl behaviour:

1. ``lowercase.perl`` is perl ``lc``: it maps every capital sigma to ``σ``; Python's
   ``str.lower`` picks the word-final ``ς`` by context. We map ``Σ`` → ``σ`` first.
   (``İ`` → ``i̇`` and ``ẞ`` → ``ß`` agree in both.)
2. ``normalize-punctuation.perl`` reads each line *with its trailing newline*. Its rule
   ``s/(\\.+)\\"(\\s*[^<])/\\"$1$2/g`` (every language but en and cs) therefore also moves a
   quote that ends the line (``…tür."`` → ``…tür".``); sacremoses sees no newline and does
   not. We normalise ``line + "\\n"``.
3. The 2017 script maps ``‘`` and ``‚`` to ``"`` (sacremoses: ``'``) and ``’`` to ``"``
   (sacremoses only with ``perl_parity=True``); the French-quote rules keep their spaces
   (``perl_parity=True``).
4. The 2017 script has no ``use utf8``: it works on bytes, so ``\\d`` is ``[0-9]``.
5. For languages other than en/de/es/fr/cs the perl script applies the German/French
   quotation-comma rule too; sacremoses applies it only to de/es/fr.
6. ``tokenizer.perl`` first turns perl whitespace into spaces, deletes ``[\\000-\\037]``, then
   squeezes spaces; Python's ``\\s`` also covers ``\\x1c-\\x1f`` and sacremoses does not squeeze
   again. We do the perl clean-up first.
7. Non-breaking prefixes: perl splits the line on single spaces (empty words included) and
   reads the prefix files into a hash (``word #NUMERIC_ONLY#`` → 2, other lines → 1, later
   lines win). We mirror that instead of sacremoses' list look-up.
8. Final dots: the 2017 tokenizer splits the period of the *last* word only if it is not a
   non-breaking prefix (``… bus a.`` stays in French only if ``a`` were a prefix). The
   unconditional split came with Moses PR #204 in November 2018; sacremoses keeps the old
   behaviour, as do we.
9. A whitespace-only line is printed unchanged by ``tokenizer.perl``; we return ``""`` (the
   same, empty, token list).
10. ``tokenizer.perl`` uses perl's Unicode properties ``\\p{IsAlpha}``, ``\\p{IsAlnum}``,
    ``\\p{IsN}``, ``\\p{IsLower}``; sacremoses' tables of them are incomplete (no CJK, Hangul,
    letter numbers …; it adds viramas and nuktas). We build the full sets from ``unicodedata``
    (:func:`perl_property_sets`), equal to perl 5.36's on every code point.

Checked against those perl scripts on every line of Multi30K ``task1/raw`` and ``task2/raw``
(52 files, 442,863 lines, none differs), and against the upstream tokenised release: lines of it
(``tests/data/text/multi30k_upstream_sample.jsonl``) and the exact line, character and word
counts of 22 of its files (``tests/data/text/multi30k_upstream_sizes.json``), which the final-dot
and prefix-list rules above would change. The perl reference in the tests is the ``mosestokenizer``
package's ``tokenizer-v1.1.perl`` (an older Moses snapshot) with the two rules it lacks compared
with December 2017 added (a comma after a final number; a final ``.'``), its
``normalize-punctuation.perl`` (as of 2017), and sacremoses' prefix lists.

Languages Moses has no rules for (Japanese, Chinese, Thai, Korean, …) get the tokenizer the config
names for them (:mod:`pseudopairs.data.tokenizers`: ICU word boundaries or a SentencePiece model
trained on the run's text) in place of normalisation and tokenisation; case is handled the same.

With ``case="truecase"`` the text is not lowercased; it is normalised and tokenised as above,
then a Moses truecaser (sacremoses ``MosesTruecaser``, trained on the training split only) is
applied, as ``truecase.perl`` does (known surface forms are kept, other words take their most
frequent casing, sentence-initial words always take it).
"""

from __future__ import annotations

import functools
import gzip
import logging
import re
import sys
import unicodedata
from pathlib import Path
from typing import Callable, Iterable

from sacremoses import MosesPunctNormalizer, MosesTokenizer, MosesTruecaser
from sacremoses.corpus import NonbreakingPrefixes

from pseudopairs.data.tokenizers import CASES, MOSES_LANGS
from pseudopairs.core.io import atomic_path, read_captions

Tokenize = Callable[[str], str]
log = logging.getLogger(__name__)

# Perl's \s on character strings (Unicode White_Space). Python's \s adds \x1c-\x1f, which perl
# does not count as whitespace (tokenizer.perl deletes them as control characters instead).
_PERL_WS = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_PERL_WS_RUN = re.compile(f"[{_PERL_WS}]+")
_PERL_WS_ONLY = re.compile(f"[{_PERL_WS}]*")
_CONTROL = re.compile(r"[\x00-\x1f]")
_SPACES = re.compile(r" +")
_ENDS_WITH_PERIOD = re.compile(r"^(\S+)\.$")
_STARTS_WITH_DIGITS = re.compile(r"^[0-9]+")
_NUMERIC_ONLY_LINE = re.compile(r"(.*)\s+#NUMERIC_ONLY#")

# Perl's Unicode properties, which tokenizer.perl uses (\p{IsAlpha}, \p{IsAlnum}, \p{IsN},
# \p{IsLower}). sacremoses 0.2.0 ships incomplete tables of them (no CJK ideographs, no Hangul,
# no Nl letters, many recent scripts missing; viramas and nuktas added), so any caption with such
# characters would be tokenised differently from perl. We derive the full sets from Python's
# unicodedata instead: IsN = general category N*, IsLower = the Lowercase property (what
# str.islower tests for one character), IsAlpha = Alphabetic = L* + Nl + Other_Alphabetic, and
# IsAlnum = Alphabetic + Nd. Other_Alphabetic is not in unicodedata; these are its code point
# ranges (hex) in Unicode 14.0 (PropList.txt), the Unicode version of Python 3.11's unicodedata and
# of perl 5.36. Checked against perl on every assigned code point (tests/test_text.py).
_OTHER_ALPHABETIC = (
    "345 5B0-5BD 5BF 5C1-5C2 5C4-5C5 5C7 610-61A 64B-657 659-65F 670 6D6-6DC 6E1-6E4 6E7-6E8 6ED "
    "711 730-73F 7A6-7B0 816-817 81B-823 825-827 829-82C 8D4-8DF 8E3-8E9 8F0-903 93A-93B 93E-94C "
    "94E-94F 955-957 962-963 981-983 9BE-9C4 9C7-9C8 9CB-9CC 9D7 9E2-9E3 A01-A03 A3E-A42 A47-A48 "
    "A4B-A4C A51 A70-A71 A75 A81-A83 ABE-AC5 AC7-AC9 ACB-ACC AE2-AE3 AFA-AFC B01-B03 B3E-B44 "
    "B47-B48 B4B-B4C B56-B57 B62-B63 B82 BBE-BC2 BC6-BC8 BCA-BCC BD7 C00-C03 C3E-C44 C46-C48 "
    "C4A-C4C C55-C56 C62-C63 C81-C83 CBE-CC4 CC6-CC8 CCA-CCC CD5-CD6 CE2-CE3 D00-D03 D3E-D44 "
    "D46-D48 D4A-D4C D57 D62-D63 D81-D83 DCF-DD4 DD6 DD8-DDF DF2-DF3 E31 E34-E3A E4D EB1 EB4-EB9 "
    "EBB-EBC ECD F71-F81 F8D-F97 F99-FBC 102B-1036 1038 103B-103E 1056-1059 105E-1060 1062-1064 "
    "1067-106D 1071-1074 1082-108D 108F 109A-109D 1712-1713 1732-1733 1752-1753 1772-1773 "
    "17B6-17C8 1885-1886 18A9 1920-192B 1930-1938 1A17-1A1B 1A55-1A5E 1A61-1A74 1ABF-1AC0 "
    "1ACC-1ACE 1B00-1B04 1B35-1B43 1B80-1B82 1BA1-1BA9 1BAC-1BAD 1BE7-1BF1 1C24-1C36 1DE7-1DF4 "
    "24B6-24E9 2DE0-2DFF A674-A67B A69E-A69F A802 A80B A823-A827 A880-A881 A8B4-A8C3 A8C5 A8FF "
    "A926-A92A A947-A952 A980-A983 A9B4-A9BF A9E5 AA29-AA36 AA43 AA4C-AA4D AA7B-AA7D AAB0 "
    "AAB2-AAB4 AAB7-AAB8 AABE AAEB-AAEF AAF5 ABE3-ABEA FB1E 10376-1037A 10A01-10A03 10A05-10A06 "
    "10A0C-10A0F 10D24-10D27 10EAB-10EAC 11000-11002 11038-11045 11073-11074 11082 110B0-110B8 "
    "110C2 11100-11102 11127-11132 11145-11146 11180-11182 111B3-111BF 111CE-111CF 1122C-11234 "
    "11237 1123E 112DF-112E8 11300-11303 1133E-11344 11347-11348 1134B-1134C 11357 11362-11363 "
    "11435-11441 11443-11445 114B0-114C1 115AF-115B5 115B8-115BE 115DC-115DD 11630-1163E 11640 "
    "116AB-116B5 1171D-1172A 1182C-11838 11930-11935 11937-11938 1193B-1193C 11940 11942 "
    "119D1-119D7 119DA-119DF 119E4 11A01-11A0A 11A35-11A39 11A3B-11A3E 11A51-11A5B 11A8A-11A97 "
    "11C2F-11C36 11C38-11C3E 11C92-11CA7 11CA9-11CB6 11D31-11D36 11D3A 11D3C-11D3D 11D3F-11D41 "
    "11D43 11D47 11D8A-11D8E 11D90-11D91 11D93-11D96 11EF3-11EF6 16F4F 16F51-16F87 16F8F-16F92 "
    "16FF0-16FF1 1BC9E 1E000-1E006 1E008-1E018 1E01B-1E021 1E023-1E024 1E026-1E02A 1E947 "
    "1F130-1F149 1F150-1F169 1F170-1F189 "
)
_ALPHA_CATEGORIES = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Nl"})


def _class_ranges(codepoints: Iterable[int]) -> str:
    """A regex character-class body (``\\UXXXXXXXX`` escapes and ranges) for sorted code points."""
    parts: list[str] = []
    start = prev = None
    for cp in codepoints:
        if prev is not None and cp == prev + 1:
            prev = cp
            continue
        if start is not None:
            parts.append(f"\\U{start:08x}" if start == prev else f"\\U{start:08x}-\\U{prev:08x}")
        start = prev = cp
    if start is not None:
        parts.append(f"\\U{start:08x}" if start == prev else f"\\U{start:08x}-\\U{prev:08x}")
    return "".join(parts)


@functools.lru_cache(maxsize=None)
def perl_property_sets() -> dict[str, frozenset[str]]:
    """The characters of perl's ``\\p{IsAlpha}``, ``\\p{IsAlnum}``, ``\\p{IsN}`` and
    ``\\p{IsLower}`` (computed once, about half a second)."""
    other_alpha: set[int] = set()
    for item in _OTHER_ALPHABETIC.split():
        low, _, high = item.partition("-")
        other_alpha.update(range(int(low, 16), int(high or low, 16) + 1))
    alpha, alnum, numbers, lower = [], [], [], []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        category = unicodedata.category(ch)
        is_alpha = category in _ALPHA_CATEGORIES or cp in other_alpha
        if is_alpha:
            alpha.append(ch)
        if is_alpha or category == "Nd":
            alnum.append(ch)
        if category[0] == "N":
            numbers.append(ch)
        if ch.islower():
            lower.append(ch)
    return {"IsAlpha": frozenset(alpha), "IsAlnum": frozenset(alnum), "IsN": frozenset(numbers),
            "IsLower": frozenset(lower)}


@functools.lru_cache(maxsize=None)
def perl_property_classes() -> dict[str, str]:
    """:func:`perl_property_sets` as regex character-class bodies."""
    return {name: _class_ranges(sorted(map(ord, chars)))
            for name, chars in perl_property_sets().items()}


def perl_lowercase(text: str) -> str:
    """``lowercase.perl`` (perl ``lc`` on UTF-8 text): like ``str.lower`` without final sigma."""
    return text.replace("\u03a3", "\u03c3").lower()


class Moses2017PunctNormalizer(MosesPunctNormalizer):
    """``normalize-punctuation.perl -l LANG`` as of the Moses snapshot of December 2017."""

    # Perl maps these to a double quote; sacremoses 0.2.0 (even with perl_parity) to "'".
    _PERL_TARGETS = {"‘": '"', "‚": '"', "’": '"'}

    def __init__(self, lang: str):
        super().__init__(
            lang=lang,
            penn=True,  # sacremoses' name is inverted: True adds the perl default ` → ', '' → " "
            norm_quote_commas=True,
            norm_numbers=True,
            pre_replace_unicode_punct=False,  # replace-unicode-punctuation.perl is not in the recipe
            post_remove_control_chars=False,  # nor is remove-non-printing-char.perl
            perl_parity=True,
        )
        substitutions = []
        for pattern, replacement in self.substitutions:
            replacement = self._PERL_TARGETS.get(pattern, replacement)
            substitutions.append((pattern.replace(r"\d", "[0-9]"), replacement))
        if lang not in ("en", "cs", "cz", "de", "es", "fr"):
            # perl: if en … elsif cs/cz (nothing) … else the German/Spanish/French rule
            substitutions[-1:-1] = self.DE_ES_FR_QUOTATION_FOLLOWED_BY_COMMA
        self.substitutions = substitutions

    def normalize(self, text: str, *, newline: bool = True) -> str:  # type: ignore[override]
        # The perl script sees each line with its newline (see the module docstring, point 2).
        return super().normalize(text + "\n" if newline else text)


class Moses2017Tokenizer(MosesTokenizer):
    """``tokenizer.perl -l LANG`` (escaping on, no aggressive hyphen splitting) as of December
    2017."""

    def __init__(self, lang: str):
        super().__init__(lang=lang)
        prefixes: dict[str, int] = {}
        for line in NonbreakingPrefixes().words(lang):  # falls back to English, as perl does
            match = _NUMERIC_ONLY_LINE.search(line)
            if match:
                prefixes[match.group(1)] = 2
            else:
                prefixes[line] = 1
        self.prefix_kind = prefixes
        # tokenizer.perl's rules with perl's complete Unicode properties (see perl_property_sets)
        sets, classes = perl_property_sets(), perl_property_classes()
        self._lower, self._alpha = sets["IsLower"], sets["IsAlpha"]
        alnum, alpha, isn = classes["IsAlnum"], classes["IsAlpha"], classes["IsN"]
        self.PAD_NOT_ISALNUM = re.compile(rf"([^{alnum}\s\.'\`\,\-])"), r" \1 "
        self.AGGRESSIVE_HYPHEN_SPLIT = re.compile(rf"([{alnum}])\-(?=[{alnum}])"), r"\1 @-@ "
        self.COMMA_SEPARATE_1 = re.compile(rf"([^{isn}])[,]"), r"\1 , "
        self.COMMA_SEPARATE_2 = re.compile(rf"[,]([^{isn}])"), r" , \1"
        self.COMMA_SEPARATE_3 = re.compile(rf"([{isn}])[,]$"), r"\1 , "
        self.ENGLISH_SPECIFIC_APOSTROPHE = [
            (re.compile(rf"([^{alpha}])[']([^{alpha}])"), r"\1 ' \2"),
            (re.compile(rf"([^{alpha}{isn}])[']([{alpha}])"), r"\1 ' \2"),
            (re.compile(rf"([{alpha}])[']([^{alpha}])"), r"\1 ' \2"),
            (re.compile(rf"([{alpha}])[']([{alpha}])"), r"\1 '\2"),
            (re.compile(rf"([{isn}])[']([s])"), r"\1 '\2"),  # "1990's"
        ]
        self.FR_IT_SPECIFIC_APOSTROPHE = [
            (re.compile(rf"([^{alpha}])[']([^{alpha}])"), r"\1 ' \2"),
            (re.compile(rf"([^{alpha}])[']([{alpha}])"), r"\1 ' \2"),
            (re.compile(rf"([{alpha}])[']([^{alpha}])"), r"\1 ' \2"),
            (re.compile(rf"([{alpha}])[']([{alpha}])"), r"\1' \2"),
        ]

    def handles_nonbreaking_prefixes(self, text: str) -> str:
        words = text.split(" ")
        while words and words[-1] == "":  # perl's split drops trailing empty fields only
            words.pop()
        last = len(words) - 1
        for i, word in enumerate(words):
            match = _ENDS_WITH_PERIOD.match(word)
            if not match:
                continue
            pre = match.group(1)
            kind = self.prefix_kind.get(pre, 0)
            following = words[i + 1] if i < last else ""
            if (
                ("." in pre and any(ch in self._alpha for ch in pre))
                or kind == 1
                or (following[:1] != "" and following[0] in self._lower)
            ):
                continue
            if kind == 2 and _STARTS_WITH_DIGITS.match(following):
                continue
            words[i] = pre + " ."
        return " ".join(words)

    def tokenize_line(self, text: str, *, aggressive_dash_splits: bool = False,
                      escape: bool = True) -> str:
        # tokenizer.perl's opening clean-up, with perl's notion of whitespace.
        text = _PERL_WS_RUN.sub(" ", f" {text} ")
        text = _CONTROL.sub("", text)
        text = _SPACES.sub(" ", text).strip(" ")
        if not text:
            return ""
        return self.tokenize(text, aggressive_dash_splits=aggressive_dash_splits,
                             return_str=True, escape=escape)


@functools.lru_cache(maxsize=None)
def get_normalizer(lang: str) -> Moses2017PunctNormalizer:
    """One cached normaliser per language."""
    return Moses2017PunctNormalizer(lang)


@functools.lru_cache(maxsize=None)
def get_tokenizer(lang: str) -> Moses2017Tokenizer:
    """One cached tokeniser per language."""
    if lang not in NonbreakingPrefixes().available_langs:
        log.warning("no Moses non-breaking prefixes for language %r; using the English ones "
                    "(as tokenizer.perl does)", lang)
    return Moses2017Tokenizer(lang)


def _check_lang(lang: str) -> str:
    if not isinstance(lang, str) or not re.fullmatch(r"[a-z]{2,3}", lang):
        raise ValueError(f"language code must be 2-3 lowercase letters (e.g. en, de), got {lang!r}")
    return lang


def normalize_tokenize(raw: str, *, lang: str, aggressive_dash_splits: bool = False,
                       escape: bool = True, newline: bool = True) -> str:
    """Moses punctuation normalisation then tokenisation, case untouched. ``newline=False``
    only for a file's last line when it has no final newline (perl then sees none)."""
    normalized = get_normalizer(_check_lang(lang)).normalize(raw, newline=newline)
    if _PERL_WS_ONLY.fullmatch(normalized):
        return ""  # tokenizer.perl copies whitespace-only lines; no tokens either way
    return get_tokenizer(lang).tokenize_line(
        normalized, aggressive_dash_splits=aggressive_dash_splits, escape=escape)


def prepare_line(raw: str, *, lang: str, case: str = "lowercase",
                 truecaser: MosesTruecaser | None = None, aggressive_dash_splits: bool = False,
                 escape: bool = True, newline: bool = True, tokenizer: Tokenize | None = None) -> str:
    """Prepare one caption: tokens joined by single spaces.

    ``case="lowercase"``: ``lowercase.perl | normalize-punctuation.perl -l L | tokenizer.perl
    -l L`` exactly (the Multi30K recipe). ``case="truecase"``: normalise and tokenise without
    lowercasing, then apply ``truecaser`` (from :func:`train_truecaser` / :func:`load_truecaser`).
    ``tokenizer`` (a language Moses lacks; :mod:`pseudopairs.data.tokenizers`): it replaces
    normalisation and tokenisation, after lowercasing or before truecasing as above.
    """
    if "\n" in raw:
        raise ValueError(f"prepare_line takes one line; got text with a newline: {raw[:60]!r}")
    if tokenizer is not None:
        return _prepare_tokenized(raw, case=case, truecaser=truecaser, tokenizer=tokenizer)
    if case == "lowercase":
        if truecaser is not None:
            raise ValueError("a truecaser was given but case='lowercase'")
        return normalize_tokenize(perl_lowercase(raw), lang=lang, newline=newline,
                                  aggressive_dash_splits=aggressive_dash_splits, escape=escape)
    if case == "truecase":
        if truecaser is None:
            raise ValueError("case='truecase' needs a truecaser (train one with train-truecaser)")
        tokens = normalize_tokenize(raw, lang=lang, newline=newline,
                                    aggressive_dash_splits=aggressive_dash_splits, escape=escape)
        return truecase_tokens(tokens, truecaser=truecaser)
    raise ValueError(f"text.case must be one of {list(CASES)}, got {case!r}")


def _prepare_tokenized(raw: str, *, case: str, truecaser: MosesTruecaser | None,
                      tokenizer: Tokenize) -> str:
    if case == "lowercase":
        if truecaser is not None:
            raise ValueError("a truecaser was given but case='lowercase'")
        return tokenizer(perl_lowercase(raw))
    if case == "truecase":
        if truecaser is None:
            raise ValueError("case='truecase' needs a truecaser (train one with train-truecaser)")
        return truecase_tokens(tokenizer(raw), truecaser=truecaser)
    raise ValueError(f"text.case must be one of {list(CASES)}, got {case!r}")


# --------------------------------------------------------------------------------------------
# Truecasing


def truecase_tokens(tokens: str, *, truecaser: MosesTruecaser) -> str:
    """Truecase an already tokenised line like ``truecase.perl`` (known forms kept)."""
    if not tokens:
        return ""
    return truecaser.truecase(tokens, return_str=True, use_known=True)


def train_truecaser(texts: Iterable[str], *, lang: str, tokenizer: Tokenize | None = None) -> MosesTruecaser:
    """Train a Moses truecaser on raw *training* captions of one language: each is normalised
    and tokenised (not lowercased) first, as ``train-truecaser.perl`` expects (``tokenizer``: the
    language's own tokenizer instead of Moses)."""
    _check_lang(lang)
    documents = []
    for text in texts:
        tokens = normalize_tokenize(text, lang=lang) if tokenizer is None else tokenizer(text)
        if tokens:
            documents.append(tokens.split(" "))
    if not documents:
        raise ValueError(f"no non-empty training text to train a truecaser for {lang!r}")
    truecaser = MosesTruecaser()
    truecaser.train(documents, possibly_use_first_token=False)
    return truecaser


def save_truecaser(truecaser: MosesTruecaser, path: str | Path) -> None:
    """Write the model in Moses' ``truecase-model`` format, atomically."""
    if getattr(truecaser, "model", None) is None:
        raise ValueError("the truecaser has no model to save")
    with atomic_path(path) as tmp:
        truecaser.save_model(str(tmp))


def load_truecaser(path: str | Path) -> MosesTruecaser:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"truecase model not found: {path}")
    return MosesTruecaser(load_from=str(path))


# --------------------------------------------------------------------------------------------
# Files


def _open_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise FileNotFoundError(f"input text file not found: {path}")
    if path.suffix == ".gz":
        try:
            with gzip.open(path, "rb") as handle:
                return handle.read()
        except (OSError, EOFError) as err:
            raise ValueError(f"{path}: not a readable gzip file ({err})") from err
    return path.read_bytes()


def read_lines(path: str | Path) -> tuple[list[str], bool]:
    """Lines of a UTF-8 text file (plain or ``.gz``), split on ``\\n`` only, as perl reads them.
    Returns the lines and whether the last one ended with a newline. Invalid UTF-8 raises a
    ``ValueError`` naming the file and the line."""
    path = Path(path)
    data = _open_bytes(path)
    if not data:
        return [], True
    parts = data.split(b"\n")
    final_newline = parts[-1] == b""
    if final_newline:
        parts.pop()
    lines = []
    for number, part in enumerate(parts, 1):
        try:
            lines.append(part.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise ValueError(
                f"{path}: line {number}: invalid UTF-8 at byte {err.start} "
                f"({part[err.start:err.start + 4]!r})") from None
    return lines, final_newline


def _progress(iterable, *, total: int, desc: str):
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="line", file=sys.stderr,
                mininterval=2.0, disable=total < 1000)


def prepare_file(input_path: str | Path, output_path: str | Path, *, lang: str,
                 case: str = "lowercase", truecaser: MosesTruecaser | None = None,
                 tokenizer: Tokenize | None = None) -> int:
    """Prepare a text file line by line (one output line per input line); returns the count."""
    lines, final_newline = read_lines(input_path)
    out = []
    last = len(lines) - 1
    for i, line in enumerate(_progress(lines, total=len(lines), desc=f"prepare {lang}")):
        out.append(prepare_line(line, lang=lang, case=case, truecaser=truecaser,
                                newline=final_newline or i < last, tokenizer=tokenizer))
    payload = "".join(line + "\n" for line in out).encode("utf-8")
    output_path = Path(output_path)
    with atomic_path(output_path) as tmp:
        if output_path.suffix == ".gz":
            with open(tmp, "wb") as raw_handle:
                with gzip.GzipFile(fileobj=raw_handle, mode="wb", mtime=0, filename="") as gz:
                    gz.write(payload)
        else:
            tmp.write_bytes(payload)
    return len(out)


def parse_truecase_models(specs: Iterable[str] | None) -> dict[str, Path]:
    """``["en=path", "de=path"]`` → ``{"en": Path, "de": Path}``."""
    models: dict[str, Path] = {}
    for spec in specs or []:
        lang, sep, path = spec.partition("=")
        if not sep or not lang or not path:
            raise ValueError(f"--truecase-model expects LANG=PATH, got {spec!r}")
        if lang in models:
            raise ValueError(f"--truecase-model given twice for language {lang!r}")
        models[_check_lang(lang)] = Path(path)
    return models


def prepare_captions(frame, *, case: str = "lowercase",
                     truecasers: dict[str, MosesTruecaser] | None = None, source: str = "captions",
                     tokenizers: dict[str, Tokenize | None] | None = None):
    """Add the ``text`` column to a raw caption table (per row, with the row's ``lang``).
    ``tokenizers``: a language's tokenize function (None or absent: Moses, for the languages it
    has rules for, :data:`~pseudopairs.data.tokenizers.MOSES_LANGS`; any other needs one)."""
    if case not in CASES:
        raise ValueError(f"text.case must be one of {list(CASES)}, got {case!r}")
    truecasers = truecasers or {}
    tokenizers = tokenizers or {}
    langs = sorted(set(frame["lang"]))
    for lang in langs:
        _check_lang(lang)
        if lang not in tokenizers and lang not in MOSES_LANGS:
            raise ValueError(f"{source}: Moses has no rules for language {lang!r} and no tokenizer is "
                             f"given for it (--tokenizer {lang}=icu|sentencepiece:MODEL; config key "
                             f"'text.tokenizers.{lang}')")
        if case == "truecase" and lang not in truecasers:
            raise ValueError(f"{source}: case=truecase but no truecase model for language {lang!r} "
                             f"(give --truecase-model {lang}=PATH)")
    texts = []
    rows = zip(frame["raw"].tolist(), frame["lang"].tolist())
    for i, (raw, lang) in enumerate(_progress(rows, total=len(frame), desc="prepare captions")):
        if not isinstance(raw, str):
            raise ValueError(f"{source}: row {i}: 'raw' is not a string ({raw!r})")
        if "\n" in raw:
            raise ValueError(f"{source}: row {i}: caption contains a newline")
        texts.append(prepare_line(raw, lang=lang, case=case,
                                  truecaser=truecasers.get(lang) if case == "truecase" else None,
                                  tokenizer=tokenizers.get(lang)))
    out = frame.copy()
    out["text"] = texts
    return out


def training_texts(paths: Iterable[str | Path], *, lang: str) -> list[str]:
    """Raw captions of ``lang`` from the ``train`` split of the given raw caption tables."""
    texts: list[str] = []
    for path in paths:
        frame = read_captions(path, lang=lang)
        texts.extend(frame.loc[frame["split"] == "train", "raw"].tolist())
    return texts

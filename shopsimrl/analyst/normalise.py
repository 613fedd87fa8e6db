"""Normal forms for the firewall: one canonical token sequence per text, however it is written.

    normal_tokens("Size ＭＥＤＩＵＭ, two-packs of gray t‑shirts for $68,50").texts
    # ['size', 'm', '2', 'pack', 'of', 'grey', 't', 'shirt', 'for', '$', '68.5']

Steps, in order (each one a library where one exists):
1. Unicode: NFKC (`unicodedata`: full-width forms, ligatures, compatibility digits), format
   characters (category Cf: zero-width spaces and joiners, soft hyphens) dropped, every dash
   (category Pd, the minus sign) to "-", every quote to "'", every space (Z*) to " ", letters that
   only look Latin (Cyrillic "Р", Greek "Ο") to the Latin letter they imitate
   (`confusable_homoglyphs`, Unicode's confusables data), remaining accents dropped, case folded.
2. Number words to digits (`text_to_num.alpha2digit`: "sixty-eight point five" -> 68.5).
3. Tokens: runs of letters, runs of digits (with "." and "," inside: thousands separators and
   decimal marks are parsed, "1,234.50" -> 1234.5, "68,50" -> 68.5), currency marks.
4. Words folded: plural -> singular (`inflect`), spelling variants (grey/gray, colour/color,
   litre/liter), units ("l", "ltr", "liters" after a number -> "litre"; "millimetres" -> "mm"),
   size names -> letters ("extra large", "x-large", "2XL" -> "xl"/"xxl"; "medium" -> "m").

Terms are compared on the *joined* canonical text of a window of tokens, so "slip-resistant",
"slip resistant" and "slipresistant" are one key.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache

import inflect
from confusable_homoglyphs import confusables
from text_to_num import alpha2digit

CURRENCY_MARKS = frozenset("$€£¥")
CURRENCY_WORDS = frozenset({"dollar", "usd", "buck", "eur", "euro", "gbp", "pound", "cent"})
_QUOTES = frozenset("'`´ʹʻʼʽ‘’‚‛′")
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_]+|[$€£¥]")
# "I'm", "it's", "don't": the clitic is dropped, so the "m" of "I'm" is never the size M.
_CLITIC = re.compile(r"(?<=[^\W\d_])'(?:s|m|t|re|ll|ve|d)\b", re.IGNORECASE)
_WORD_HYPHEN = re.compile(r"(?<=[^\W\d_])-(?=[^\W\d_])")
_SIZE_LETTERS = re.compile(r"(?<![\w'])(?:[2-4]?X{1,3}[SL]|[SML])(?![\w'])")

# Spelling variants of the shop's vocabulary (British spelling is the catalog's); a dictionary of
# US/UK pairs would fold these too, but none that is kept up fits in a dependency this small.
_SPELLING = {
    "gray": "grey",
    "color": "colour",
    "liter": "litre",
    "ltr": "litre",
    "meter": "metre",
    "millimeter": "mm",
    "millimetre": "mm",
    "canceling": "cancelling",
    "sized": "size",
}
# Size names -> the letters the catalog uses; longest phrase first.
_SIZE_PHRASES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("double", "extra", "large"), "xxl"),
    (("extra", "extra", "large"), "xxl"),
    (("xx", "large"), "xxl"),
    (("2", "xl"), "xxl"),
    (("extra", "large"), "xl"),
    (("x", "large"), "xl"),
    (("extra", "small"), "xs"),
    (("x", "small"), "xs"),
    (("small",), "s"),
    (("medium",), "m"),
    (("large",), "l"),
)
_UNIT_AFTER_NUMBER = {"l": "litre", "lt": "litre", "millimetre": "mm"}

_inflect = inflect.engine()


@dataclass(frozen=True)
class Token:
    text: str  # canonical form: "grey", "xl", "68.5", "$"
    value: float | None = None  # the number, for a numeric token

    @property
    def is_number(self) -> bool:
        return self.value is not None


@dataclass
class Tokens:
    """The canonical tokens of a text and the size letters it wrote in capitals ("M", "XL")."""

    tokens: list[Token]
    capital_sizes: set[str] = field(default_factory=set)

    @property
    def texts(self) -> list[str]:
        return [t.text for t in self.tokens]


def fold(text: str) -> str:
    """Step 1: NFKC, format characters dropped, dashes/quotes/spaces folded, look-alikes to Latin;
    case is kept (the caller folds it once it has read the capital size letters)."""
    out: list[str] = []
    for ch in unicodedata.normalize("NFKC", text):
        category = unicodedata.category(ch)
        if category == "Cf":
            continue
        if category == "Pd" or ch == "−":
            out.append("-")
        elif ch in _QUOTES or category in ("Pi", "Pf"):
            out.append("'")
        elif category.startswith("Z") or ch in "\t\r\n":
            out.append(" ")
        elif ord(ch) > 127 and ch not in CURRENCY_MARKS:
            out.append(_latin(ch))
        else:
            out.append(ch)
    return "".join(out)


@lru_cache(maxsize=4096)
def _latin(ch: str) -> str:
    """The ASCII letter or digit a character imitates, or the character without its accents."""
    if ch.isalnum():
        found = confusables.is_confusable(ch, preferred_aliases=["latin"], greedy=True) or []
        for entry in found:
            for glyph in entry["homoglyphs"]:
                if glyph["c"].isascii() and glyph["c"].isalnum():
                    return glyph["c"]
    stripped = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))
    return stripped or ch


def parse_number(text: str) -> float:
    """"1,234.50" -> 1234.5, "68,50" -> 68.5 (a comma before 1-2 digits is a decimal mark),
    "1.234,5" -> 1234.5, "5.3" -> 5.3."""
    if "," in text and "." in text:
        decimal = "." if text.rfind(".") > text.rfind(",") else ","
        thousands = "," if decimal == "." else "."
        return float(text.replace(thousands, "").replace(decimal, "."))
    if "," in text:
        parts = text.split(",")
        if len(parts) == 2 and len(parts[1]) <= 2:
            return float(f"{parts[0]}.{parts[1]}")
        return float(text.replace(",", ""))
    parts = text.split(".")
    if len(parts) > 2:  # "1.234.567": dots as thousands separators
        return float("".join(parts))
    return float(text)


def number_text(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


@lru_cache(maxsize=65536)
def fold_word(word: str) -> str:
    """Plural -> singular, then the spelling variant. Both sides of a comparison go through this,
    so a stem that inflect gets wrong ("canvas" -> "canva") is the same stem on both sides."""
    if len(word) >= 4 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        singular = _inflect.singular_noun(word)
        if singular:
            word = singular
    if word.endswith("ie") and len(word) >= 4:  # "hoodies" -> "hoody" (inflect), so "hoodie" -> "hoody"
        word = word[:-2] + "y"
    return _SPELLING.get(word, word)


def normal_tokens(text: str) -> Tokens:
    folded = _CLITIC.sub("", fold(text))
    capital_sizes = {m.group(0).casefold() for m in _SIZE_LETTERS.finditer(folded)}
    # "two-pack", "sixty-eight": a hyphen between words is a space to the number parser (tokens
    # split there anyway).
    lowered = _WORD_HYPHEN.sub(" ", folded.casefold())
    try:
        lowered = alpha2digit(lowered, "en", threshold=0)
    except (ValueError, IndexError):  # the parser gave up on odd text: keep the words as they are
        pass
    raw: list[Token] = []
    for piece in _TOKEN.findall(lowered):
        if piece[0].isdigit():
            value = parse_number(piece)
            raw.append(Token(number_text(value), value))
        elif piece in CURRENCY_MARKS:
            raw.append(Token("$"))
        else:
            raw.append(Token(fold_word(piece)))
    tokens = _fold_phrases(raw)
    return Tokens(tokens=tokens, capital_sizes={_size_letter(s) for s in capital_sizes})


def _size_letter(written: str) -> str:
    return "xxl" if written == "2xl" else written


def _fold_phrases(raw: list[Token]) -> list[Token]:
    out: list[Token] = []
    i = 0
    while i < len(raw):
        texts = tuple(t.text for t in raw[i : i + 3])
        for phrase, letter in _SIZE_PHRASES:
            if texts[: len(phrase)] == phrase:
                out.append(Token(letter))
                i += len(phrase)
                break
        else:
            token = raw[i]
            if out and out[-1].is_number and token.text in _UNIT_AFTER_NUMBER:
                token = Token(_UNIT_AFTER_NUMBER[token.text])
            out.append(token)
            i += 1
    return out


def term_key(text: str) -> str:
    """The joined canonical form of a term: "Slip-Resistant" and "slip resistants" -> "slipresistant"."""
    return "".join(term_tokens(text))


@lru_cache(maxsize=65536)  # gold values come from a closed vocabulary: thousands of cards, few values
def term_tokens(text: str) -> tuple[str, ...]:
    return tuple(normal_tokens(text).texts)

"""The firewall: candidate skill text must not carry privileged facts, however it is written.

Every text is normalised first (`shopsimrl.analyst.normalise`: Unicode, look-alike letters, case,
hyphens and joined forms, plurals, spelling variants, units, size names, number words), then
rejected, with every leak found, when it carries
1. a product id, any product's, through separators, zero-width characters and look-alike
   characters ("P 000-123", "Р00O123"), or the six digits of an evidence task's product id;
2. a gold value *of the cards the text was built from* (`check(text, evidence=card_ids)`): the
   product type, attribute and option values; close misspellings of the longer ones (rapidfuzz);
3. a price of those cards (the ceiling, a purchased product's price) written in any form
   (decimals, thousands separators, currency marks before or after, number words, "68 dollars 43
   cents") and within 5% (at least 1.00) of it;
4. the title of a product their episodes bought;
5. text of a validation or test task: a run of `shingle_words` content words (filler words
   dropped, numbers replaced by "#") that a held-out instruction has and no train instruction has;
   or, however worded, a held-out task's product type with two of its attribute/option values (or
   with one and a price near its ceiling);
6. a term of `firewall.banned_terms`.

A gold value is "weak" when it is short (a size letter, a number) or a common word ("down",
"natural"): it counts only with corroboration, i.e. written as a capital size letter ("M", "XL"),
or next to its option's name or unit ("size m", "pack of 2", "42 millimetres"), or in a text that
carries another leak of the same task. So the size "10" of one card never blocks "wait 10 turns".

Reasons name the kind of leak, whose it is and a hash of the matched gold value, never the value:
"gold option value of card-0-0 [sha256:1f0e...]" (`value_digest` gives the hash of a value).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import Any

from rapidfuzz import fuzz, process

from shopsimrl.analyst.cards import FailureCard
from shopsimrl.analyst.normalise import (
    CURRENCY_WORDS,
    Token,
    Tokens,
    fold,
    normal_tokens,
    term_key,
    term_tokens,
)
from shopsimrl.shop import Catalog, Split, load_split

DIGEST_CHARS = 12
PRICE_TOLERANCE = 0.05  # relative; at least PRICE_TOLERANCE_ABS
PRICE_TOLERANCE_ABS = 1.0
FUZZY_MIN_CHARS = 6  # terms shorter than this match only exactly (after normalisation)
FUZZY_SCORE = 88.0  # rapidfuzz ratio: "waterprof" ~ "waterproof" (95), "feather" !~ "leather" (86)
_WINDOW_EXTRA = 1  # a window may hold one token more than its term: "wi fi" for "wifi"
_CONTEXT_SPAN = 3  # tokens either side of a weak value where its option name or unit counts
# Common words that are also attribute or option values: they leak only with corroboration.
COMMON_VALUES = frozenset({"down", "natural", "smart", "modern", "portable", "wired", "gold", "led", "glass",
                           "metal", "white", "black", "set"})  # fmt: skip
# Words after or before a common-word value that make it a product's property: "down products".
PRODUCT_NOUNS = frozenset({"product", "item", "one", "option", "material", "version", "model", "kind", "type",
                           "fill", "filled", "choice", "variant"})  # fmt: skip
PRICE_WORDS = frozenset({"price", "priced", "cost", "budget", "limit", "under", "below", "pay", "spend", "ceiling",
                         "max", "maximum", "most", "cheaper", "over", "above", "expensive", "around", "about"})  # fmt: skip
# Filler words dropped before held-out shingles are cut: the shingles are of content words.
STOPWORDS = frozenset("""a an the and or of in on at to for from with by it its this that these those i me my
you your we our is are be was were am do does did have has had will would can could should must
need want please find buy get look looking some any one no not than then so as if but also just
very really only what which who whom whose there here up out into""".split())  # fmt: skip
_ID_SEP = r"[\s\-_.:#/|,]{0,2}"
_ID_DIGIT = "[0-9oil]"  # o -> 0, i and l -> 1 once folded: "P00O123", "P0001l3"
_ANY_ID = re.compile(rf"(?<![a-z0-9])p{_ID_SEP}((?:{_ID_DIGIT}{_ID_SEP}){{5}}{_ID_DIGIT})(?![0-9])")
_SHARED_CACHE = 4096  # texts whose evidence-free leaks are kept
_DIGIT_RUN = re.compile(rf"(?<![0-9])(?=((?:{_ID_DIGIT}{_ID_SEP}){{5}}{_ID_DIGIT})(?![0-9]))")
_ID_DIGITS = str.maketrans({"o": "0", "i": "1", "l": "1"})


class LeakKind(StrEnum):
    PRODUCT_ID = "product id"
    GOLD_PRODUCT_ID = "gold product id"
    GOLD_PRODUCT_TYPE = "gold product type"
    GOLD_ATTRIBUTE = "gold attribute value"
    GOLD_OPTION = "gold option value"
    PRICE_CEILING = "price ceiling"
    PURCHASED_PRICE = "price of a purchased product"
    PURCHASED_TITLE = "title of a purchased product"
    HELD_OUT_TEXT = "text of a validation/test task"
    HELD_OUT_TASK = "product of a validation/test task"
    BANNED_TERM = "banned term"


@lru_cache(maxsize=65536)
def _digest(canonical: str) -> str:
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def value_digest(value: object) -> str:
    """The hash a reason carries for a matched value: of its canonical form, so a test (or an
    auditor holding the gold) can tell which value matched without the record naming it."""
    return _digest(term_key(str(value)))


@dataclass(frozen=True)
class Leak:
    kind: LeakKind
    source: str  # a card id, "validation"/"test", "any product", "the config"
    digest: str

    @property
    def reason(self) -> str:
        return f"{self.kind.value} of {self.source} [sha256:{self.digest}]"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reasons: tuple[str, ...] = ()
    leaks: tuple[Leak, ...] = ()

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(leak.kind.value for leak in self.leaks))


@dataclass(frozen=True)
class Term:
    key: str  # joined canonical form
    size: int  # canonical tokens
    kind: LeakKind
    digest: str
    weak: bool = False
    context: frozenset[str] = frozenset()  # option name and unit tokens that corroborate a weak term
    head: bool = False  # a product type's head noun ("boot" of "hiking boots"): held-out rule only


@dataclass
class _View:
    """A text, normalised once, with every window of tokens keyed by its joined form."""

    text: str
    tokens: Tokens
    windows: dict[str, list[tuple[int, int]]]
    numbers: list[tuple[float, bool]]  # (value, written as a price)
    folded: str
    _ids: set[str] | None = None  # computed on first use
    _keys: list[str] | None = None

    @classmethod
    def of(cls, text: str, longest: int) -> _View:
        toks = normal_tokens(text)
        texts = toks.texts
        windows: dict[str, list[tuple[int, int]]] = {}
        for n in range(1, longest + _WINDOW_EXTRA + 1):
            for i in range(len(texts) - n + 1):
                windows.setdefault("".join(texts[i : i + n]), []).append((i, i + n))
        return cls(text, toks, windows, _numbers(toks.tokens), fold(text).casefold())

    @property
    def id_digits(self) -> set[str]:
        """Every run of six digits in the text, however separated, look-alikes read as digits
        ("000-l23" -> "000123"); overlapping runs too, so no earlier run hides a later one."""
        if self._ids is None:
            self._ids = set()
            for match in _DIGIT_RUN.finditer(self.folded):
                run = match.group(1)
                if sum(c.isdigit() for c in run) >= 4:
                    self._ids.add(re.sub(r"[^0-9]", "", run.translate(_ID_DIGITS)))
        return self._ids

    def spans(self, term: Term) -> list[tuple[int, int]]:
        found = self.windows.get(term.key)
        if found:
            return found
        if len(term.key) >= FUZZY_MIN_CHARS and not term.key.isdigit():
            near = process.extractOne(term.key, self._fuzzy_keys(), scorer=fuzz.ratio, score_cutoff=FUZZY_SCORE)
            if near is not None:
                return self.windows[near[0]]
        return []

    def _fuzzy_keys(self) -> list[str]:
        if self._keys is None:
            self._keys = [k for k in self.windows if len(k) >= FUZZY_MIN_CHARS - 1 and not k.isdigit()]
        return self._keys

    def corroborated(self, term: Term, spans: list[tuple[int, int]]) -> bool:
        if term.key in self.tokens.capital_sizes:
            return True
        texts = self.tokens.texts
        for i, j in spans:
            around = texts[max(0, i - _CONTEXT_SPAN) : i] + texts[j : j + _CONTEXT_SPAN]
            if term.context & set(around):
                return True
        return False


def _numbers(tokens: list[Token]) -> list[tuple[float, bool]]:
    """Every number of a text, and whether it is written as a price (a currency mark or word next
    to it, decimals, a price word near it); "68 dollars 43 cents" is also 68.43."""
    texts = [t.text for t in tokens]
    out: list[tuple[float, bool]] = []
    for i, token in enumerate(tokens):
        if token.value is None:
            continue
        before, after = texts[max(0, i - 1) : i], texts[i + 1 : i + 2]
        currency = "$" in before + after or bool(CURRENCY_WORDS & set(before + after))
        near = set(texts[max(0, i - 4) : i + 5])
        priced = currency or token.value != int(token.value) or bool(PRICE_WORDS & near)
        out.append((token.value, priced))
        if texts[i + 1 : i + 2] == ["dollar"]:
            rest = [t for t in tokens[i + 2 : i + 5] if t.text != "and"]
            if len(rest) >= 2 and rest[0].value is not None and rest[1].text == "cent":
                out.append((token.value + rest[0].value / 100, True))
    return out


def _price_matches(view: _View, price: float) -> bool:
    tolerance = max(PRICE_TOLERANCE_ABS, PRICE_TOLERANCE * price)
    return any(abs(value - price) <= tolerance and (priced or value >= 20) for value, priced in view.numbers)


@dataclass
class GoldFacts:
    """The privileged facts of one task (an evidence card's, or a held-out task's)."""

    source: str
    terms: list[Term] = field(default_factory=list)
    prices: list[tuple[float, LeakKind]] = field(default_factory=list)
    product_ids: list[str] = field(default_factory=list)
    titles: list[tuple[Term, Term]] = field(default_factory=list)  # (whole title, its brand)
    product_words: frozenset[str] = frozenset()  # the product type's words: context of weak values

    @classmethod
    def of_gold(cls, source: str, gold: Mapping[str, Any], purchased: Iterable[Mapping[str, Any]] = ()) -> GoldFacts:
        ptype = str(gold.get("product_type") or "")
        facts = cls(source, product_words=frozenset(term_tokens(ptype)))
        if ptype:
            facts.add(ptype, LeakKind.GOLD_PRODUCT_TYPE)
            words = term_tokens(ptype)
            if len(words) > 1:
                facts.terms.append(Term(words[-1], 1, LeakKind.GOLD_PRODUCT_TYPE, value_digest(ptype), head=True))
        for name, value in (gold.get("attributes") or {}).items():
            facts.add_value(name, value, LeakKind.GOLD_ATTRIBUTE)
        for name, value in (gold.get("options") or {}).items():
            facts.add_value(name, value, LeakKind.GOLD_OPTION)
        ceiling = gold.get("price_ceiling")
        if isinstance(ceiling, (int, float)):
            facts.prices.append((float(ceiling), LeakKind.PRICE_CEILING))
        ids = [*(gold.get("gold_product_ids") or []), *(gold.get("family_product_ids") or {}).values()]
        facts.product_ids = sorted({str(pid) for pid in ids})
        for line in purchased:
            if isinstance(line.get("price"), (int, float)):
                facts.prices.append((float(line["price"]), LeakKind.PURCHASED_PRICE))
            title = str(line.get("title") or "")
            if title:
                whole = Term(term_key(title), len(term_tokens(title)), LeakKind.PURCHASED_TITLE, value_digest(title))
                brand_words = term_tokens(title)[:1]  # catalog titles start with the brand
                brand = Term("".join(brand_words), 1, LeakKind.PURCHASED_TITLE, value_digest(title))
                facts.titles.append((whole, brand))
        return facts

    def add(self, value: object, kind: LeakKind, *, weak: bool = False, context: Iterable[str] = ()) -> None:
        words = term_tokens(str(value))
        if words:
            key = "".join(words)
            common = key in COMMON_VALUES
            weak = weak or len(key) <= 2 or key.replace(".", "").isdigit() or common
            around = {*context, *self.product_words, *(PRODUCT_NOUNS if common else ())}
            self.terms.append(Term(key, len(words), kind, value_digest(value), weak, frozenset(around)))

    def add_value(self, name: str, value: object, kind: LeakKind) -> None:
        """A value, and its bare core next to its name or unit: "2 pack" -> "2" near "pack";
        "42 mm" -> "42" near "mm" or "case"/"size"; "9" near "size"."""
        names = term_tokens(name)
        words = term_tokens(str(value))
        self.add(value, kind, context=names)
        core = [w for w in words if w not in names]
        units = [w for w in core if not w.replace(".", "").isdigit()]
        numbers = [w for w in core if w.replace(".", "").isdigit()]
        if numbers and (len(core) < len(words) or units):  # "2 pack", "42 mm"; not a bare "9"
            self.terms.append(Term("".join(numbers), len(numbers), kind, value_digest(value), True,
                                   frozenset([*names, *units, *self.product_words])))  # fmt: skip

    def longest(self) -> int:
        sizes = [t.size for t in self.terms] + [whole.size for whole, _ in self.titles]
        return max(sizes, default=1)

    def find(self, view: _View) -> list[Leak]:
        """Every leak of these facts in the text (no held-out rule: a card's values leak alone)."""
        leaks: dict[tuple[LeakKind, str], Leak] = {}
        weak: list[tuple[Term, list[tuple[int, int]]]] = []
        for term in self.terms:
            if term.head:
                continue
            spans = view.spans(term)
            if not spans:
                continue
            if term.weak and not view.corroborated(term, spans):
                weak.append((term, spans))
                continue
            leaks.setdefault((term.kind, term.digest), Leak(term.kind, self.source, term.digest))
        for price, kind in self.prices:
            if _price_matches(view, price):
                digest = value_digest(f"{price:.2f}")
                leaks.setdefault((kind, digest), Leak(kind, self.source, digest))
        for whole, brand in self.titles:
            if view.spans(whole) or (view.windows.get(brand.key) and len(leaks) > 0):
                leaks.setdefault((whole.kind, whole.digest), Leak(whole.kind, self.source, whole.digest))
        for pid in self.product_ids:
            if pid[1:] in view.id_digits:
                digest = value_digest(pid)
                leaks.setdefault((LeakKind.GOLD_PRODUCT_ID, digest), Leak(LeakKind.GOLD_PRODUCT_ID, self.source, digest))
        if leaks:  # a short or common value with another leak of the same task beside it
            for term, _ in weak:
                leaks.setdefault((term.kind, term.digest), Leak(term.kind, self.source, term.digest))
        return list(leaks.values())

    def held_out_match(self, view: _View) -> bool:
        """The held-out rule: the task's product type with two of its values, or with one and a
        price near its ceiling; the type's head noun alone ("boots") with two values; three of
        its values without the type."""
        full = any(view.spans(t) for t in self.terms if t.kind is LeakKind.GOLD_PRODUCT_TYPE and not t.head)
        head = any(view.windows.get(t.key) for t in self.terms if t.head)
        values = {
            t.digest for t in self.terms
            if t.kind in (LeakKind.GOLD_ATTRIBUTE, LeakKind.GOLD_OPTION) and (spans := view.spans(t))
            and (not t.weak or view.corroborated(t, spans) or t.key in COMMON_VALUES)
        }  # fmt: skip
        if not (full or head):  # three of its values, one of them neither short nor a common word
            strong = any(t.digest in values and not t.weak for t in self.terms)
            return len(values) >= 3 and strong
        priced = any(_price_matches(view, p) for p, kind in self.prices if kind is LeakKind.PRICE_CEILING)
        return len(values) >= 2 or (full and len(values) >= 1 and priced)


def content_shingles(text: str, n: int) -> set[tuple[str, ...]]:
    """Shingles of `n` content words: normalised, filler words dropped, every number is "#"."""
    words = ["#" if t.is_number else t.text for t in normal_tokens(text).tokens if t.text not in STOPWORDS]
    words = [w for w in words if w != "$"]
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def words(text: str) -> list[str]:
    """Canonical word tokens (the compiler's clusters compare these sets)."""
    return list(_words(text))


@lru_cache(maxsize=4096)  # the rules backend gives thousands of cards the same dozen lessons
def _words(text: str) -> tuple[str, ...]:
    return tuple(normal_tokens(text).texts)


@dataclass
class Firewall:
    evidence: dict[str, GoldFacts] = field(default_factory=dict)  # card id -> its task's facts
    held_out_tasks: list[GoldFacts] = field(default_factory=list)
    held_out: dict[tuple[str, ...], str] = field(default_factory=dict)  # content shingle -> its split
    banned: GoldFacts = field(default_factory=lambda: GoldFacts("the config"))
    shingle_words: int = 3
    # Per text, the evidence-free leaks and the normalised view: the rules backend gives thousands
    # of cards the same few lessons, and only the evidence part differs between them.
    _shared: dict[tuple[str, int], tuple[_View, list[Leak]]] = field(default_factory=dict, repr=False)

    @classmethod
    def for_evidence(
        cls,
        cards: Sequence[FailureCard],
        *,
        catalog: Catalog | None = None,
        banned_terms: Iterable[str] = (),
        shingle_words: int = 3,
    ) -> Firewall:
        wall = cls(shingle_words=shingle_words)
        for term in banned_terms:
            wall.banned.add(term, LeakKind.BANNED_TERM)
        for card in cards:
            wall.add_card(card)
        if catalog is not None:
            wall.add_held_out(catalog)
        return wall

    def add_card(self, card: FailureCard) -> None:
        purchased = [line for s in card.audit.get("siblings") or [] for line in s.get("purchased") or []]
        self.evidence[card.card_id] = GoldFacts.of_gold(card.card_id, card.audit.get("gold") or {}, purchased)

    def add_held_out(self, catalog: Catalog) -> None:
        train: set[tuple[str, ...]] = set()
        for task in load_split(catalog, Split.TRAIN):
            train |= content_shingles(task.instruction, self.shingle_words)
        for split in (Split.VALIDATION, Split.TEST):
            for task in load_split(catalog, split):
                facts = GoldFacts.of_gold(split.value, task.gold.model_dump())
                facts.product_ids = []  # any product id is rejected anyway
                self.held_out_tasks.append(facts)
                for shingle in content_shingles(task.instruction, self.shingle_words) - train:
                    self.held_out.setdefault(shingle, split.value)

    def _evidence_free(self, text: str, longest: int) -> tuple[_View, list[Leak]]:
        """The text's view and its leaks that need no evidence: product ids, banned terms,
        held-out text and tasks (cached per text)."""
        longest = max(longest, self.banned.longest(), *(f.longest() for f in self.held_out_tasks[:1]), 8)
        cached = self._shared.get((text, longest))
        if cached is not None:
            return cached
        view = _View.of(text, longest)
        leaks: list[Leak] = []
        for match in _ANY_ID.finditer(view.folded):
            digits = re.sub(r"[^0-9]", "", match.group(1).translate(_ID_DIGITS))
            if sum(c.isdigit() for c in match.group(1)) >= 4 and len(digits) == 6:
                leaks.append(Leak(LeakKind.PRODUCT_ID, "any product", value_digest(f"P{digits}")))
        leaks += self.banned.find(view)
        for shingle in sorted(content_shingles(text, self.shingle_words).intersection(self.held_out)):
            leaks.append(Leak(LeakKind.HELD_OUT_TEXT, self.held_out[shingle], value_digest(" ".join(shingle))))
        for facts in self.held_out_tasks:
            if facts.held_out_match(view):
                ptype = next(t for t in facts.terms if t.kind is LeakKind.GOLD_PRODUCT_TYPE)
                leaks.append(Leak(LeakKind.HELD_OUT_TASK, facts.source, ptype.digest))
        if len(self._shared) >= _SHARED_CACHE:
            self._shared.clear()
        self._shared[(text, longest)] = (view, leaks)
        return view, leaks

    def check(self, text: str, evidence: Iterable[str] = ()) -> Verdict:
        """Every leak in `text`; `evidence`: the ids of the cards the text was built from (their
        gold counts; other cards' gold does not, so a common word of theirs blocks nothing)."""
        sources = [self.evidence[c] for c in dict.fromkeys(evidence) if c in self.evidence]
        longest = max([f.longest() for f in sources], default=1)
        view, shared = self._evidence_free(text, longest)
        leaks = list(shared)
        for facts in sources:
            leaks += facts.find(view)
        unique = list(dict.fromkeys(sorted(leaks, key=lambda leak: _ORDER[leak.kind])))
        return Verdict(ok=not unique, reasons=tuple(leak.reason for leak in unique), leaks=tuple(unique))


_ORDER = {kind: rank for rank, kind in enumerate(LeakKind)}


def pool_problems(interventions: Iterable[Any], firewall: Firewall) -> list[str]:
    """One line per intervention of a candidate pool whose text carries privileged facts (the
    gate's own check of the pool it receives; the reasons carry hashes, never the values)."""
    problems = []
    for item in interventions:
        if item.text is None:
            continue
        verdict = firewall.check(item.text, item.evidence_card_ids)
        if not verdict.ok:
            problems.append(f"intervention {item.intervention_id} carries privileged facts: " + "; ".join(verdict.reasons))
    return problems

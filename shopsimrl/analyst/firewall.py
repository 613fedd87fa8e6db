"""The firewall: candidate skill text must not carry privileged facts.

A text is rejected, with every reason found, when it contains
1. a product id (`P` and six digits), any product's;
2. a gold value of an evidence task: its product type, attribute and option values, gold and
   family product ids, the titles of what its episodes bought;
3. a price of an evidence task: the price ceiling or a purchased product's price;
4. text of a validation or test task: a run of `shingle_words` words that occurs in a held-out
   task's instruction and in no train instruction (so the shared templates do not count);
5. a term of `firewall.banned_terms`.

Terms are matched as whole words; a term of one or two characters (a size such as "M" or "9")
only with its exact case, and a number only as a whole number ("9" does not match "19" or "9.5").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shopsimrl.analyst.cards import FailureCard
from shopsimrl.analyst.evidence import PRODUCT_ID
from shopsimrl.shop import Catalog, Split, load_split

_WORD = re.compile(r"[a-z0-9$][a-z0-9$.'-]*")
# Terms and texts are compared as token sequences: a term matches whole tokens only, so "9" does not
# match "19" or "9.5", and "M" does not match the "m" of "I'm".
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[.'-][A-Za-z0-9]+)*")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reasons: tuple[str, ...] = ()


def words(text: str) -> list[str]:
    return [w.rstrip(".") for w in _WORD.findall(text.lower())]


def shingles(text: str, n: int) -> set[tuple[str, ...]]:
    tokens = words(text)
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def held_out_shingles(catalog: Catalog, n: int) -> set[tuple[str, ...]]:
    """Word n-grams of validation and test instructions that no train instruction has."""
    held: set[tuple[str, ...]] = set()
    for split in (Split.VALIDATION, Split.TEST):
        for task in load_split(catalog, split):
            held |= shingles(task.instruction, n)
    for task in load_split(catalog, Split.TRAIN):
        held -= shingles(task.instruction, n)
    return held


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _key(term_tokens: list[str], case_sensitive: bool) -> tuple[str, ...]:
    return tuple(term_tokens) if case_sensitive else tuple(t.casefold() for t in term_tokens)


@dataclass
class Firewall:
    terms: dict[tuple[str, ...], str] = field(default_factory=dict)  # folded tokens -> why it is banned
    exact_terms: dict[tuple[str, ...], str] = field(default_factory=dict)  # terms of 1-2 characters
    held_out: set[tuple[str, ...]] = field(default_factory=set)
    shingle_words: int = 5
    longest: int = 0  # tokens of the longest term

    @classmethod
    def for_evidence(
        cls,
        cards: Sequence[FailureCard],
        *,
        catalog: Catalog | None = None,
        banned_terms: Iterable[str] = (),
        shingle_words: int = 5,
    ) -> Firewall:
        wall = cls(shingle_words=shingle_words)
        for term in banned_terms:
            wall.ban(term, "banned term")
        for card in cards:
            wall.ban_card(card)
        if catalog is not None:
            wall.held_out = held_out_shingles(catalog, shingle_words)
        return wall

    def ban(self, term: object, why: str) -> None:
        text = str(term).strip()
        found = tokens(text)
        if not found:
            return
        short = len(text) <= 2  # a size such as "M" or "XL": only with its exact case
        table = self.exact_terms if short else self.terms
        table.setdefault(_key(found, case_sensitive=short), why)
        self.longest = max(self.longest, len(found))

    def ban_card(self, card: FailureCard) -> None:
        gold = card.audit.get("gold") or {}
        where = f"of {card.card_id}"
        self.ban(gold.get("product_type", ""), f"gold product type {where}")
        for value in (gold.get("attributes") or {}).values():
            self.ban(value, f"gold attribute value {where}")
        for value in (gold.get("options") or {}).values():
            self.ban(value, f"gold option value {where}")
        for pid in [*(gold.get("gold_product_ids") or []), *(gold.get("family_product_ids") or {}).values()]:
            self.ban(pid, f"gold product id {where}")
        ceiling = gold.get("price_ceiling")
        if isinstance(ceiling, (int, float)):
            for text in _price_texts(ceiling):
                self.ban(text, f"price ceiling {where}")
        for sibling in card.audit.get("siblings") or []:
            for line in sibling.get("purchased") or []:
                self.ban(line.get("title", ""), f"title of a purchased product {where}")
                if isinstance(line.get("price"), (int, float)):
                    for text in _price_texts(line["price"]):
                        self.ban(text, f"price of a purchased product {where}")

    def check(self, text: str) -> Verdict:
        reasons: list[str] = []
        for pid in dict.fromkeys(PRODUCT_ID.findall(text)):
            reasons.append(f"product id {pid!r}")
        found = tokens(text)
        folded = [t.casefold() for t in found]
        seen: set[tuple[str, ...]] = set()
        for n in range(self.longest, 0, -1):  # longest first: "matte black" is reported, then "black"
            for i in range(len(found) - n + 1):
                why = self.terms.get(tuple(folded[i : i + n])) or self.exact_terms.get(tuple(found[i : i + n]))
                gram = tuple(found[i : i + n])
                if why is None or gram in seen or (n == 1 and PRODUCT_ID.fullmatch(gram[0])):
                    continue  # product ids are reported above
                seen.add(gram)
                reasons.append(f"{why}: {' '.join(gram)!r}")
        if self.held_out:
            for shingle in sorted(shingles(text, self.shingle_words) & self.held_out):
                reasons.append(f"text of a validation/test task: {' '.join(shingle)!r}")
        return Verdict(ok=not reasons, reasons=tuple(reasons))


def _price_texts(price: float) -> list[str]:
    texts = [f"{price:.2f}", f"{price:g}"]  # 68.00 and 68; 12.50 and 12.5
    return list(dict.fromkeys(texts))

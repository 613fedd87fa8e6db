"""The mutable state of one episode, and its deterministic hash."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum


class Finish(StrEnum):
    IN_PROGRESS = "in_progress"
    CHECKOUT = "checkout"
    TURN_LIMIT = "turn_limit"


@dataclass(frozen=True)
class CartLine:
    product: int  # catalog index
    options: tuple[tuple[str, str], ...]  # selected (option, value) pairs, in the category's order

    def options_dict(self) -> dict[str, str]:
        return dict(self.options)


@dataclass(frozen=True)
class SearchRecord:
    keywords: str
    category: str | None
    max_price: float | None
    min_rating: float | None
    page: int
    pages: int
    results: tuple[int, ...]  # catalog indices on this page, in order


@dataclass
class EpisodeState:
    task_id: str
    seed: int
    turn: int = 0
    last_search: SearchRecord | None = None
    searched: bool = False
    viewed: list[int] = field(default_factory=list)  # in order of first view
    current: int | None = None  # the product page on screen
    selections: dict[int, dict[str, str]] = field(default_factory=dict)
    cart: list[CartLine] = field(default_factory=list)
    finish: Finish = Finish.IN_PROGRESS
    policy_failures: int = 0

    @property
    def done(self) -> bool:
        return self.finish is not Finish.IN_PROGRESS

    def state_hash(self) -> str:
        """A hex digest of everything that can influence future observations or the reward.

        Built from a canonical tuple (dicts as sorted item tuples), so it is the same in every
        process and Python version with the same actions.
        """
        canonical = (
            self.task_id,
            self.seed,
            self.turn,
            self.searched,
            None
            if self.last_search is None
            else (
                self.last_search.keywords,
                self.last_search.category,
                self.last_search.max_price,
                self.last_search.min_rating,
                self.last_search.page,
                self.last_search.results,
            ),
            tuple(self.viewed),
            self.current,
            tuple(sorted((k, tuple(sorted(v.items()))) for k, v in self.selections.items())),
            tuple((line.product, line.options) for line in self.cart),
            self.finish.value,
            self.policy_failures,
        )
        return hashlib.blake2b(repr(canonical).encode(), digest_size=16).hexdigest()

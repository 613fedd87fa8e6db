"""Difficulty levels: named task profiles of the shop (docs/environment.md "Difficulty levels").

A level says how many constraints a task states (attribute dimensions, option dimensions, a price
ceiling), which near-miss distractors a catalog family holds, and the catalog size used when a
config does not name one. `full` is the production profile: every attribute and option, the
family's price ceiling, all three near misses, 2,000 products; its catalogs, task ids and gold are
exactly those of the generator before levels existed (tests/shop/test_levels.py pins them).

A level is part of the catalog config (`catalog: {seed, num_products, level}`), so a round names
its level as `train.shopsim.catalog.level`; other levels' task ids carry the level's name as a
prefix (`easy-train-0-00012`), so they never collide with production ids.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

# The near-miss roles of a family, in generation order (catalog.FamilyRole.NAMES after "base").
DISTRACTOR_ROLES = ("attribute_swap", "option_missing", "over_budget")
_SPLIT_NAMES = ("train", "validation", "test")


@dataclass(frozen=True)
class Level:
    """One difficulty profile. `None` for `attributes`/`options` means every dimension of the category."""

    name: str
    description: str
    attributes: int | None  # attribute dimensions a task names (chosen per family, seeded)
    options: int | None  # option dimensions a task names; 0: no option to select
    price_ceiling: bool  # whether a task states the family's price ceiling
    distractors: tuple[str, ...]  # near-miss roles each family holds, in DISTRACTOR_ROLES order
    num_products: int  # catalog size when the config does not give one

    def __post_init__(self) -> None:
        problems = []
        if not self.name.isalnum() or not self.name.islower() or self.name in _SPLIT_NAMES:
            # task ids are "<level>-<split>-<seed>-<number>": the name must not contain "-" or be a split
            problems.append("name must be lower-case letters/digits and not a split name")
        if self.attributes is not None and self.attributes < 1:
            problems.append("attributes must be at least 1 (a task names at least one attribute)")
        if self.options is not None and self.options < 0:
            problems.append("options must be at least 0")
        if tuple(r for r in DISTRACTOR_ROLES if r in self.distractors) != self.distractors:
            problems.append(f"distractors must be distinct roles of {DISTRACTOR_ROLES}, in that order")
        # A near miss must break a constraint the task states; otherwise it would be a gold product.
        if "option_missing" in self.distractors and self.options == 0:
            problems.append("option_missing needs at least one option")
        if "over_budget" in self.distractors and not self.price_ceiling:
            problems.append("over_budget needs a price ceiling")
        if self.num_products < 50:
            problems.append("num_products must be at least 50")
        if problems:
            raise ValueError(f"level {self.name!r}: " + "; ".join(problems))

    @property
    def is_production(self) -> bool:
        return self.name == FULL.name

    @property
    def family_size(self) -> int:
        return 1 + len(self.distractors)

    @property
    def task_id_prefix(self) -> str:
        """ "" for production ids ("train-0-00012"), "<name>-" for the others ("easy-train-0-00012")."""
        return "" if self.is_production else f"{self.name}-"

    @property
    def stream(self) -> int:
        """A stable number of the name (not Python's salted hash): it seeds the level's own draws."""
        return zlib.crc32(self.name.encode())


FULL = Level(
    name="full",
    description="production: every attribute and option, the price ceiling, three near misses",
    attributes=None,
    options=None,
    price_ceiling=True,
    distractors=DISTRACTOR_ROLES,
    num_products=2000,
)
MEDIUM = Level(
    name="medium",
    description="one attribute, one option, the price ceiling; near misses on the attribute and the price",
    attributes=1,
    options=1,
    price_ceiling=True,
    distractors=("attribute_swap", "over_budget"),
    num_products=1000,
)
EASY = Level(
    name="easy",
    description="one attribute, no option, no price ceiling; one near miss on the attribute",
    attributes=1,
    options=0,
    price_ceiling=False,
    distractors=("attribute_swap",),
    num_products=500,
)
BUDGET = Level(
    name="budget",
    description="one attribute and the price ceiling, no option; near misses on the attribute and the price "
    "(the CPU demo's level: the warm-started 135M policy both succeeds and fails)",
    attributes=1,
    options=0,
    price_ceiling=True,
    distractors=("attribute_swap", "over_budget"),
    num_products=1000,
)

# Ordered from the easiest (a curriculum walks this order).
LEVELS: dict[str, Level] = {level.name: level for level in (EASY, BUDGET, MEDIUM, FULL)}
DEFAULT_LEVEL = FULL.name


def unknown_level_message(name: object) -> str:
    return f"unknown level {name!r}; known levels: {', '.join(LEVELS)}"


def get_level(level: str | Level) -> Level:
    """The registered level of that name (a `Level` is returned as is). Raises ValueError."""
    if isinstance(level, Level):
        return level
    try:
        return LEVELS[level]
    except (KeyError, TypeError):
        raise ValueError(unknown_level_message(level)) from None

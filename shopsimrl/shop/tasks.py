"""Tasks with hidden gold, in fixed train / validation / test splits.

A task is built from one catalog family: the instruction asks for the base product's type, its
attributes and target option values, under the family's price ceiling (at a difficulty level other
than `full`, only the attributes and options the family names, and a ceiling only if the level has
one: levels.py). The gold (privileged) also lists every product that satisfies all constraints,
since another family can match by chance.

Splits are a pure function of the catalog: families are shuffled with a generator seeded from the
catalog seed (and, off production, its level) and cut into test, validation and train, so task ids
never overlap across splits.
Validation tasks feed the gate and must never reach the Failure Analyst: every task carries its
split, and `Task.split` is what downstream code checks.
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache

import numpy as np
from pydantic import BaseModel, ConfigDict

from shopsimrl.shop.catalog import NO_CEILING, NO_VALUE, Catalog, FamilyRole, product_id
from shopsimrl.shop.categories import CATEGORIES
from shopsimrl.shop.levels import FULL, LEVELS

SPLIT_SALT = 0x5EED_5917  # separates the split shuffle's random stream from catalog generation
MAX_HELD_OUT = 200  # tasks per held-out split (validation, test) at most


class Split(StrEnum):
    TRAIN = "train"
    VALIDATION = "validation"
    TEST = "test"


class Gold(BaseModel):
    """Privileged: never shown to the policy, never put into prompts or skills."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    category: str
    product_type: str
    attributes: dict[str, str]
    options: dict[str, str]
    price_ceiling: float | None  # None: the level states no ceiling (never at production)
    gold_product_ids: list[str]
    family_product_ids: dict[str, str]  # role -> product id (base, attribute_swap, ...)


class Task(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    task_id: str  # "[<level>-]<split>-<catalog seed>-<number>": "train-0-00012", "easy-train-0-00012"
    split: Split
    instruction: str
    gold: Gold

    @property
    def is_validation(self) -> bool:
        return self.split is Split.VALIDATION


_TEMPLATES = (
    "I'm looking for {attrs} {ptype}{options}, priced lower than ${ceiling}.",
    "Find me {attrs} {ptype}{options}. My budget is ${ceiling} at most.",
    "Please buy {attrs} {ptype}{options} that costs no more than ${ceiling}.",
    "I need {attrs} {ptype}{options}, and it must be under ${ceiling}.",
)
_TEMPLATES_WITHOUT_CEILING = (  # same openings, for levels without a price ceiling
    "I'm looking for {attrs} {ptype}{options}.",
    "Find me {attrs} {ptype}{options}.",
    "Please buy {attrs} {ptype}{options}.",
    "I need {attrs} {ptype}{options}.",
)


def _options_phrase(options: dict[str, str]) -> str:
    if not options:
        return ""
    parts = [f"{name} {value}" for name, value in options.items()]
    return " in " + " and ".join(parts) if len(parts) <= 2 else " in " + ", ".join(parts)


def split_sizes(num_families: int) -> dict[Split, int]:
    """Held-out splits get an eighth of the families each (at most MAX_HELD_OUT); train the rest."""
    held = max(1, min(MAX_HELD_OUT, num_families // 8))
    return {Split.TEST: held, Split.VALIDATION: held, Split.TRAIN: max(0, num_families - 2 * held)}


def _complete_families(catalog: Catalog) -> np.ndarray:
    # The last family is cut short when num_products % family_size != 0; it has missing near misses.
    complete = catalog.num_products // catalog.family_size
    return np.arange(complete)


@lru_cache(maxsize=8)
def _split_families(catalog: Catalog) -> dict[Split, np.ndarray]:
    families = _complete_families(catalog)
    level = catalog.level
    entropy = [catalog.seed, SPLIT_SALT] if level.is_production else [catalog.seed, SPLIT_SALT, level.stream]
    rng = np.random.Generator(np.random.PCG64(entropy))
    shuffled = rng.permutation(families)
    sizes = split_sizes(int(families.shape[0]))
    test = shuffled[: sizes[Split.TEST]]
    validation = shuffled[sizes[Split.TEST] : sizes[Split.TEST] + sizes[Split.VALIDATION]]
    train = shuffled[sizes[Split.TEST] + sizes[Split.VALIDATION] :]
    return {Split.TRAIN: train, Split.VALIDATION: validation, Split.TEST: test}


def _gold_products(catalog: Catalog, family: int) -> list[int]:
    """Every product that satisfies the family's task: type, attributes, offered options, price."""
    base = int(catalog.family_base[family])
    ok = catalog.type_id == catalog.type_id[base]
    named = catalog.family_named_attributes[family]
    ok &= np.all(catalog.attrs[:, named] == catalog.attrs[base, named], axis=1)
    if catalog.family_ceiling_cents[family] != NO_CEILING:
        ok &= catalog.price_cents <= catalog.family_ceiling_cents[family]
    for d, target in enumerate(catalog.family_target_options[family]):
        if target != NO_VALUE:
            ok &= (catalog.option_masks[:, d] >> int(target)) & 1 == 1
    return np.flatnonzero(ok).tolist()


def _family_members(catalog: Catalog, family: int) -> dict[str, str]:
    members = np.flatnonzero(catalog.family == family)
    return {FamilyRole.NAMES[int(catalog.role[i])]: product_id(int(i)) for i in members}


def make_task(catalog: Catalog, split: Split, number: int, family: int) -> Task:
    base = int(catalog.family_base[family])
    spec = CATEGORIES[int(catalog.category_id[base])]
    named = catalog.family_named_attributes[family]
    attributes = {k: v for d, (k, v) in enumerate(catalog.attributes_of(base).items()) if named[d]}
    targets = catalog.family_target_options[family]
    options = {
        name: values[int(targets[d])]
        for d, (name, values) in enumerate(spec.options)
        if targets[d] != NO_VALUE
    }
    cents = int(catalog.family_ceiling_cents[family])
    ceiling = None if cents == NO_CEILING else cents / 100.0
    ptype = catalog.type_name(int(catalog.type_id[base]))
    # The phrasing is chosen from the family number so that it is stable under re-generation.
    templates = _TEMPLATES if ceiling is not None else _TEMPLATES_WITHOUT_CEILING
    instruction = templates[family % len(templates)].format(
        attrs=" ".join(attributes.values()),
        ptype=ptype,
        options=_options_phrase(options),
        ceiling=f"{ceiling:.2f}" if ceiling is not None else "",
    )
    gold = Gold(
        category=spec.name,
        product_type=ptype,
        attributes=attributes,
        options=options,
        price_ceiling=ceiling,
        gold_product_ids=[product_id(i) for i in _gold_products(catalog, family)],
        family_product_ids=_family_members(catalog, family),
    )
    return Task(
        task_id=f"{catalog.level.task_id_prefix}{split.value}-{catalog.seed}-{number:05d}",
        split=split,
        instruction=instruction,
        gold=gold,
    )


def load_split(catalog: Catalog, split: Split | str, limit: int | None = None) -> list[Task]:
    """The tasks of one split, in a fixed order. `limit` takes a prefix (the same tasks every time)."""
    try:
        split = Split(split)
    except ValueError:
        raise ValueError(f"unknown split {split!r}; expected one of: train, validation, test") from None
    families = _split_families(catalog)[split]
    if limit is not None:
        families = families[:limit]
    return [make_task(catalog, split, number, int(f)) for number, f in enumerate(families)]


def split_of_task_id(task_id: str) -> str | None:
    """The split a task id names: "train-0-00012" and "budget-train-0-00012" -> "train"; None when the
    id has neither shape (a level prefix counts only when it is a registered level)."""
    parts = str(task_id).split("-")
    if len(parts) == 4 and parts[0] in LEVELS and parts[0] != FULL.name:
        parts = parts[1:]
    if len(parts) == 3 and parts[0] in {s.value for s in Split}:
        return parts[0]
    return None


def get_task(catalog: Catalog, task_id: str) -> Task:
    """Look a task up by id, e.g. "validation-0-00003" (production) or "easy-validation-0-00003"."""
    parts = task_id.split("-")
    # Production ids have three parts; other levels' ids start with the level's name.
    id_level = parts.pop(0) if len(parts) == 4 and parts[0] != FULL.name else FULL.name
    problem = None
    if len(parts) != 3 or not parts[2].isdigit():
        problem = f"expected {catalog.level.task_id_prefix}<split>-<catalog seed>-<number>"
    elif id_level != catalog.level.name:
        problem = f"the task belongs to level {id_level!r}, this catalog has level {catalog.level.name!r}"
    elif parts[0] not in {s.value for s in Split}:
        problem = f"unknown split {parts[0]!r}"
    elif parts[1] != str(catalog.seed):
        problem = f"the task belongs to catalog seed {parts[1]}, this catalog has seed {catalog.seed}"
    if problem is None:
        families = _split_families(catalog)[Split(parts[0])]
        number = int(parts[2])
        if number >= families.shape[0]:
            problem = f"split {parts[0]} has {families.shape[0]} tasks"
        else:
            return make_task(catalog, Split(parts[0]), number, int(families[number]))
    raise ValueError(f"unknown task id {task_id!r}: {problem}")

"""Difficulty levels (docs/environment.md "Difficulty levels").

The production profile (`full`) is pinned: the hashes below were computed from the generator as it
was before levels existed, so any change to production task ids, instructions, gold or catalog
columns fails here.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from shopsimrl.config.options import CatalogOptions, validate_options
from shopsimrl.errors import ConfigError
from shopsimrl.evaluation.config import load_eval_config
from shopsimrl.gate.config import CatalogConfig as GateCatalogConfig
from shopsimrl.shop import (
    CATEGORIES,
    ExpertPolicy,
    ShopEnv,
    ToolCall,
    format_tool_call,
    generate_catalog,
    get_task,
    load_split,
    partial_credit,
)
from shopsimrl.shop.catalog import FamilyRole
from shopsimrl.shop.levels import DISTRACTOR_ROLES, FULL, LEVELS, Level

SPLITS = ("train", "validation", "test")
# sha256 of the canonical JSON of every task (id, split, instruction, gold) of all three splits
PINNED_TASKS = {
    2000: "cd17dae9e1a263d335f127fdfb18d2649d23e24a796bdec42085fbee7d15769d",
    200: "ad8030302ba33f83a28e817d69e2ea1dcf2b218637f16169d61d8e00cb91c8d4",
}
# sha256 of the catalog's columns, in the order below
PINNED_COLUMNS = {
    2000: "67a736203855c2b3f7be67b0ebee68638688821f00a44586ac0d25b942a21285",
    200: "cd2ef403abfbca214a1842ddd788eb308fed6a0d17a6ca2dd14dd41d84ba6978",
}


def _tasks_sha256(catalog) -> tuple[str, int]:
    dump = [task.model_dump(mode="json") for split in SPLITS for task in load_split(catalog, split)]
    text = json.dumps(dump, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest(), len(dump)


def _columns_sha256(catalog) -> str:
    digest = hashlib.sha256()
    for column in (catalog.type_id, catalog.category_id, catalog.brand, catalog.attrs, catalog.option_masks,
                   catalog.price_cents, catalog.rating_tenths, catalog.role, catalog.family, catalog.family_base,
                   catalog.family_ceiling_cents, catalog.family_target_options):  # fmt: skip
        digest.update(np.ascontiguousarray(column).tobytes())
    return digest.hexdigest()


def test_production_tasks_and_catalog_are_pinned(catalog):
    small = generate_catalog(seed=0, num_products=200)
    assert _tasks_sha256(catalog) == (PINNED_TASKS[2000], 500)
    assert _tasks_sha256(small) == (PINNED_TASKS[200], 50)
    assert _columns_sha256(catalog) == PINNED_COLUMNS[2000]
    assert _columns_sha256(small) == PINNED_COLUMNS[200]


def test_production_tasks_spelled_out(catalog):
    first = {split: load_split(catalog, split)[0] for split in SPLITS}
    assert first["train"].task_id == "train-0-00000"
    assert first["train"].instruction == (
        "Find me steel band water resistant analog watch in case size 44 mm and colour silver. "
        "My budget is $129.00 at most."
    )
    assert first["train"].gold.gold_product_ids == ["P000191"]
    assert first["train"].gold.family_product_ids == {
        "base": "P000191", "option_missing": "P001368", "over_budget": "P001466", "attribute_swap": "P001967",
    }  # fmt: skip
    assert first["validation"].task_id == "validation-0-00000"
    assert first["validation"].instruction == (
        "I need linen relaxed fit t-shirt in size XL and colour navy, and it must be under $59.00."
    )
    assert first["validation"].gold.gold_product_ids == ["P000291"]
    assert first["test"].task_id == "test-0-00000"
    assert first["test"].instruction == (
        "Find me ceramic insulated coffee mug in colour brown and pack 2 pack. My budget is $85.00 at most."
    )
    last = get_task(catalog, "train-0-00375")
    assert (
        last.instruction
        == "I need recycled polyester 35 litre backpack in colour red, and it must be under $197.00."
    )
    assert last.gold.gold_product_ids == ["P000026", "P000990", "P001129"]


# -- levels ----------------------------------------------------------------------------------


def test_full_is_the_default_level_and_the_production_profile():
    explicit = generate_catalog(seed=0, num_products=200, level="full")
    assert explicit.level is FULL and explicit.family_size == 4
    assert _tasks_sha256(explicit) == (PINNED_TASKS[200], 50)
    assert generate_catalog(seed=0).num_products == 2000
    assert list(LEVELS) == ["easy", "budget", "medium", "full"]  # easiest first: the order a curriculum walks


@pytest.fixture(scope="module", params=list(LEVELS))
def level_catalog(request):
    return generate_catalog(seed=0, num_products=200, level=request.param)


def _expert_episode(env, task):
    env.reset(task=task, seed=0)
    expert = ExpertPolicy(noise=0.0)
    while True:
        _, _, terminated, truncated, _ = env.step(expert.next_action(env))
        if terminated or truncated:
            return env.outcome(), env.state.turn


def test_the_noiseless_expert_solves_every_task_of_every_level(level_catalog):
    env = ShopEnv(level_catalog)
    for split in SPLITS:
        for task in load_split(level_catalog, split):
            outcome, turns = _expert_episode(env, task)
            assert (outcome.reward, outcome.success, outcome.breakdown["policy_failures"]) == (1.0, True, 0)
            assert turns == 4 + len(task.gold.options), task.task_id  # search, view, selects, add, checkout


def _brute_force_gold(catalog, gold) -> list[str]:
    """The slow obvious reference: every product of the type with the stated values, under the ceiling."""
    out = []
    for i in range(catalog.num_products):
        p = catalog.product(i)
        if (p.product_type == gold.product_type
                and all(p.attributes[k] == v for k, v in gold.attributes.items())
                and all(v in p.options[k] for k, v in gold.options.items())
                and (gold.price_ceiling is None or p.price <= gold.price_ceiling)):  # fmt: skip
            out.append(p.product_id)
    return out


def test_gold_satisfies_the_level_and_every_near_miss_breaks_a_stated_constraint(level_catalog):
    level = level_catalog.level
    for split in SPLITS:
        for task in load_split(level_catalog, split):
            gold, spec = task.gold, next(c for c in CATEGORIES if c.name == task.gold.category)
            n_attr, n_opt = len(spec.attributes), len(spec.options)
            assert len(gold.attributes) == (
                n_attr if level.attributes is None else min(level.attributes, n_attr)
            )
            assert len(gold.options) == (n_opt if level.options is None else min(level.options, n_opt))
            assert (gold.price_ceiling is not None) == level.price_ceiling
            assert gold.gold_product_ids == _brute_force_gold(level_catalog, gold)
            assert set(gold.family_product_ids) == {"base", *level.distractors}
            for role, pid in gold.family_product_ids.items():
                assert (pid in gold.gold_product_ids) == (role == "base"), (task.task_id, role)
            text = task.instruction
            assert gold.product_type in text and all(v in text for v in gold.attributes.values())
            assert all(f"{k} {v}" in text for k, v in gold.options.items())
            assert ("$" in text) == level.price_ceiling
            if gold.price_ceiling is not None:
                assert f"${gold.price_ceiling:.2f}" in text


def test_level_splits_are_disjoint_deterministic_and_prefixed(level_catalog):
    level = level_catalog.level
    by_split = {split: load_split(level_catalog, split) for split in SPLITS}
    ids = [t.task_id for tasks in by_split.values() for t in tasks]
    assert len(ids) == len(set(ids))
    bases = [t.gold.family_product_ids["base"] for tasks in by_split.values() for t in tasks]
    assert len(bases) == len(set(bases))
    for split, tasks in by_split.items():
        assert [t.task_id for t in tasks] == [
            f"{level.task_id_prefix}{split}-0-{n:05d}" for n in range(len(tasks))
        ]
        assert all(t.split.value == split for t in tasks)
    again = generate_catalog(seed=0, num_products=200, level=level.name)
    assert [t.model_dump() for s in SPLITS for t in load_split(again, s)] == [
        t.model_dump() for tasks in by_split.values() for t in tasks
    ]
    other_seed = generate_catalog(seed=1, num_products=200, level=level.name)
    assert load_split(other_seed, "train")[0].instruction != by_split["train"][0].instruction
    task = by_split["validation"][3]
    assert get_task(level_catalog, task.task_id) == task


def test_level_task_counts_and_ids_never_collide_with_production():
    counts, ids = {}, {}
    for name in LEVELS:
        catalog = generate_catalog(seed=0, level=name)
        by_split = [load_split(catalog, s) for s in SPLITS]
        counts[name] = (catalog.num_products, *(len(tasks) for tasks in by_split))
        ids[name] = {t.task_id for tasks in by_split for t in tasks}
    assert counts == {"easy": (500, 188, 31, 31), "budget": (1000, 251, 41, 41), "medium": (1000, 251, 41, 41),
                      "full": (2000, 376, 62, 62)}  # fmt: skip
    names = list(ids)
    assert all(not ids[a] & ids[b] for i, a in enumerate(names) for b in names[i + 1 :])
    easy = generate_catalog(seed=0, num_products=200, level="easy")
    assert load_split(easy, "train")[0].task_id == "easy-train-0-00000"
    assert load_split(easy, "train")[0].instruction == "Please buy incandescent desk lamp."
    medium = generate_catalog(seed=0, num_products=200, level="medium")
    assert load_split(medium, "train")[0].instruction == (
        "Please buy smart ceiling light in finish chrome that costs no more than $170.00."
    )


def test_get_task_names_the_level_it_expected(catalog):
    easy = generate_catalog(seed=0, num_products=200, level="easy")
    for cat, bad, why in [
        (easy, "train-0-00001", "the task belongs to level 'full', this catalog has level 'easy'"),
        (easy, "medium-train-0-00001", "the task belongs to level 'medium', this catalog has level 'easy'"),
        (easy, "easy-train-0-first", "expected easy-<split>-<catalog seed>-<number>"),
        (easy, "easy-dev-0-00001", "unknown split 'dev'"),
        (easy, "easy-train-9-00001", "the task belongs to catalog seed 9, this catalog has seed 0"),
        (catalog, "easy-train-0-00001", "the task belongs to level 'easy', this catalog has level 'full'"),
        (catalog, "full-train-0-00001", "expected <split>-<catalog seed>-<number>"),
    ]:
        with pytest.raises(ValueError) as err:
            get_task(cat, bad)
        assert str(err.value) == f"unknown task id {bad!r}: {why}"


def _seeded_actions(env, seed: int, n: int) -> list:
    """Run a fixed mix of expert and noisy actions (ToolCalls and texts); the trace of each step."""
    trace = []
    for k in range(n):
        action = ExpertPolicy(noise=0.0 if k % 3 else 1.0, seed=seed + k).next_action(env)
        if k % 2:
            action = format_tool_call(action)
        obs, reward, terminated, truncated, _ = env.step(action)
        trace.append((env.state_hash(), obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    return trace


def test_same_seed_same_actions_same_state_hash_on_every_level(level_catalog):
    level = level_catalog.level.name
    for split in SPLITS:
        for i, task in enumerate(load_split(level_catalog, split, limit=4)):
            traces = []
            for catalog in (level_catalog, generate_catalog(seed=0, num_products=200, level=level)):
                env = ShopEnv(catalog)
                env.reset(task=task, seed=i)
                traces.append(_seeded_actions(env, 100 * i, 14))
            assert traces[0] == traces[1]
            assert len({h for h, *_ in traces[0]}) == len(traces[0])


def test_reward_without_a_ceiling_has_no_price_term():
    easy = generate_catalog(seed=0, num_products=200, level="easy")
    task = load_split(easy, "train")[0]
    env = ShopEnv(easy)
    env.reset(task=task, seed=0)
    swap = task.gold.family_product_ids["attribute_swap"]
    for call in [ToolCall("search", {"keywords": ExpertPolicy.query(env)}),
                 ToolCall("view_product", {"product_id": swap}),
                 ToolCall("add_to_cart", {"product_id": swap}),
                 ToolCall("checkout", {})]:  # fmt: skip
        env.step(call)
    assert (env.outcome().reward, env.outcome().success) == (0.0, False)  # its one stated attribute is wrong
    assert env.outcome().breakdown["lines"][0]["price_ok"] is True
    assert partial_credit(0.5, 1, 0, True, 1, 0, has_ceiling=False) == 0.5
    assert partial_credit(1.0, 1, 1, False, 1, 1, has_ceiling=False) == 1.0
    assert partial_credit(1.0, 1, 1, True, 1, 1) == 1.0 and partial_credit(1.0, 1, 1, False, 1, 1) == 2 / 3


def test_noisy_expert_on_a_level_with_near_misses_of_one_role():
    easy = generate_catalog(seed=0, num_products=200, level="easy")
    env = ShopEnv(easy, max_turns=20)
    rewards = []
    for i, task in enumerate(load_split(easy, "train", limit=20)):
        env.reset(task=task, seed=i)
        expert = ExpertPolicy(noise=0.3, seed=i)
        while not (env.step(expert.next_action(env))[2] or env.state.done):
            pass
        rewards.append(env.outcome().reward)
    assert sum(r == 1.0 for r in rewards) >= 15


# -- config ----------------------------------------------------------------------------------


def test_a_bad_level_is_a_config_error_naming_the_key_and_the_known_levels(tmp_path):
    with pytest.raises(ConfigError) as err:
        validate_options({"run_dir": "runs/x/train", "catalog": {"level": "hard"}}, "train.yaml")
    assert err.value.problems == [
        "shopsim.catalog.level: unknown level 'hard'; known levels: easy, budget, medium, full"
    ]
    with pytest.raises(ConfigError) as err:
        load_eval_config(None, {"checkpoint": "demo", "mask": "none", "catalog.level": "expert"})
    assert err.value.problems == ["catalog.level: unknown level 'expert'; known levels: easy, budget, medium, full"]
    with pytest.raises(ValueError, match=r"^unknown level 'hard'; known levels: easy, budget, medium, full$"):
        generate_catalog(seed=0, level="hard")


def test_the_catalog_size_defaults_to_the_level_and_an_explicit_size_wins():
    assert CatalogOptions().model_dump() == {"seed": 0, "num_products": 2000, "level": "full", "tools": "dynamic"}
    assert CatalogOptions(level="easy").num_products == 500
    assert CatalogOptions(level="medium", num_products=300).num_products == 300
    assert (
        load_eval_config(
            None, {"checkpoint": "demo", "mask": "none", "catalog.level": "easy"}
        ).catalog.num_products
        == 500
    )
    assert GateCatalogConfig is CatalogOptions  # one definition for training, the gate and eval


def test_a_level_states_what_its_near_misses_need():
    with pytest.raises(ValueError) as err:
        Level(name="odd", description="", attributes=0, options=0, price_ceiling=False,
              distractors=("over_budget", "option_missing"), num_products=10)  # fmt: skip
    assert str(err.value) == (
        "level 'odd': attributes must be at least 1 (a task names at least one attribute); distractors must be "
        "distinct roles of ('attribute_swap', 'option_missing', 'over_budget'), in that order; option_missing "
        "needs at least one option; over_budget needs a price ceiling; num_products must be at least 50"
    )
    with pytest.raises(ValueError, match="name must be lower-case letters/digits and not a split name"):
        Level(name="train", description="", attributes=1, options=0, price_ceiling=False, distractors=(),
              num_products=50)  # fmt: skip
    assert FamilyRole.NAMES[1:] == DISTRACTOR_ROLES


@pytest.mark.parametrize(("task_id", "split"), [
    ("train-0-00012", "train"), ("validation-3-00001", "validation"), ("budget-train-0-00228", "train"),
    ("easy-test-0-00002", "test"), ("budget-validation-0-00001", "validation"),
    ("hard-train-0-00001", None), ("full-train-0-00001", None), ("validation-0", None), ("", None),
])  # fmt: skip
def test_the_split_a_task_id_names_on_every_level(task_id, split):
    from shopsimrl.analyst.sidecar import ValidationTaskRefused, refuse_held_out
    from shopsimrl.shop.tasks import split_of_task_id

    assert split_of_task_id(task_id) == split
    if split == "train":  # a level's train task reaches the Analyst (the demo's budget level did not)
        refuse_held_out(task_id, "train", "triage")
    else:
        with pytest.raises(ValidationTaskRefused):
            refuse_held_out(task_id, "train", "triage")

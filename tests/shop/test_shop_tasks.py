"""Fixed splits: disjoint, deterministic, explicit on every task; gold ids against brute force."""

from __future__ import annotations

import pytest

from shopsimrl.shop import Split, generate_catalog, get_task, load_split


def test_splits_are_disjoint_fixed_and_carry_their_split(catalog):
    by_split = {s: load_split(catalog, s) for s in ("train", "validation", "test")}
    assert {s: len(t) for s, t in by_split.items()} == {"train": 376, "validation": 62, "test": 62}
    ids = [t.task_id for tasks in by_split.values() for t in tasks]
    assert len(ids) == len(set(ids))
    bases = [t.gold.family_product_ids["base"] for tasks in by_split.values() for t in tasks]
    assert len(bases) == len(set(bases))  # no family (and so no gold) is shared between splits
    for name, tasks in by_split.items():
        assert all(t.split is Split(name) and t.task_id.startswith(f"{name}-0-") for t in tasks)
    assert all(t.is_validation for t in by_split["validation"])
    again = load_split(generate_catalog(seed=0, num_products=2000), "validation")
    assert [t.model_dump() for t in again] == [t.model_dump() for t in by_split["validation"]]
    assert load_split(catalog, "test", limit=5) == by_split["test"][:5]


def test_gold_ids_equal_brute_force_over_the_catalog(catalog):
    for task in load_split(catalog, "test", limit=25):
        gold = task.gold
        expected = []
        for i in range(catalog.num_products):
            p = catalog.product(i)
            if (p.product_type == gold.product_type and p.attributes == gold.attributes and p.price <= gold.price_ceiling
                    and all(v in p.options[k] for k, v in gold.options.items())):  # fmt: skip
                expected.append(p.product_id)
        assert gold.gold_product_ids == expected


def test_instruction_states_every_constraint_but_no_product_id(catalog):
    for task in load_split(catalog, "train", limit=30):
        text = task.instruction
        assert task.gold.product_type in text and f"${task.gold.price_ceiling:.2f}" in text
        assert all(v in text for v in task.gold.attributes.values())
        assert all(f"{k} {v}" in text for k, v in task.gold.options.items())
        assert "P0" not in text


def test_get_task_round_trip_and_errors(catalog):
    task = load_split(catalog, "validation")[3]
    assert get_task(catalog, "validation-0-00003") == task
    for bad, why in [
        ("validation-3", "expected <split>-<catalog seed>-<number>"),
        ("dev-0-00001", "unknown split 'dev'"),
        ("train-9-00001", "the task belongs to catalog seed 9, this catalog has seed 0"),
        ("test-0-00999", "split test has 62 tasks"),
    ]:
        with pytest.raises(ValueError) as err:
            get_task(catalog, bad)
        assert str(err.value) == f"unknown task id {bad!r}: {why}"
    with pytest.raises(ValueError, match="unknown split 'dev'; expected one of: train, validation, test"):
        load_split(catalog, "dev")

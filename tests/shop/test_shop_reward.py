"""The reward formula on hand-computed cases, and end to end on real purchases of near misses."""

from __future__ import annotations

import pytest

from shopsimrl.shop import ShopEnv, ToolCall, load_split, partial_credit


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((1.0, 2, 2, True, 2, 2), 1.0),  # everything right: 5/5
        ((1.0, 1, 2, True, 2, 2), 0.8),  # one attribute wrong: 4/5
        ((1.0, 2, 1, True, 2, 2), 0.8),  # one option wrong: 4/5
        ((1.0, 2, 2, False, 2, 2), 0.8),  # over budget: 4/5
        ((1.0, 2, 0, True, 2, 1), 0.75),  # one-option category, option not selected: 3/4
        ((0.5, 2, 2, True, 2, 2), 0.5),  # other type of the same category: 0.5 * 5/5
        ((0.1, 0, 0, False, 2, 2), 0.0),  # wrong everything: 0.1 * 0/5
        ((0.1, 1, 1, True, 2, 2), 0.1 * 3 / 5),
    ],
)
def test_partial_credit_formula(args, expected):
    assert partial_credit(*args) == pytest.approx(expected, abs=1e-12)


def _two_option_task(catalog):
    return next(
        t for t in load_split(catalog, "train") if len(t.gold.options) == 2 and len(t.gold.attributes) == 2
    )


def _buy(catalog, task, pid, options, extra=()):
    env = ShopEnv(catalog, max_turns=30)
    env.reset(task=task, seed=0)
    env.step(ToolCall("search", {"keywords": task.gold.product_type}))
    for p in (pid, *extra):
        env.step(ToolCall("view_product", {"product_id": p}))
        for name, value in options.items():
            _, _, _, _, info = env.step(
                ToolCall("select_option", {"product_id": p, "option": name, "value": value})
            )
            assert info["policy_failure"] is None
        env.step(ToolCall("add_to_cart", {"product_id": p}))
    _, reward, terminated, _, _ = env.step(ToolCall("checkout", {}))
    assert terminated
    return env, reward


def test_buying_each_near_miss_scores_as_hand_computed(catalog):
    task = _two_option_task(catalog)
    fam, gold = task.gold.family_product_ids, task.gold
    env, reward = _buy(catalog, task, fam["base"], gold.options)
    assert (reward, env.outcome().strict_reward, env.outcome().success) == (1.0, 1.0, True)
    assert env.gold_audit()["failed_constraints"] == []

    env, reward = _buy(catalog, task, fam["attribute_swap"], gold.options)
    assert reward == pytest.approx(4 / 5)  # 1 of 2 attributes, 2 of 2 options, price ok
    assert (env.outcome().strict_reward, env.outcome().success) == (0.0, False)
    assert len(env.gold_audit()["failed_constraints"]) == 1
    assert env.gold_audit()["failed_constraints"][0].startswith(f"{fam['attribute_swap']}: attribute ")

    env, reward = _buy(catalog, task, fam["over_budget"], gold.options)
    assert reward == pytest.approx(4 / 5)
    over_price = catalog.price(int(fam["over_budget"][1:]))
    assert env.gold_audit()["failed_constraints"] == [
        f"{fam['over_budget']}: price: {over_price:.2f} is over the ceiling {gold.price_ceiling:.2f}"
    ]

    # the option-missing near miss cannot take the target value; buy it with another offered value
    miss = catalog.product(int(fam["option_missing"][1:]))
    options = {k: (v if v in miss.options[k] else miss.options[k][0]) for k, v in gold.options.items()}
    env, reward = _buy(catalog, task, fam["option_missing"], options)
    assert reward == pytest.approx(4 / 5)

    env, reward = _buy(catalog, task, fam["base"], {})  # nothing selected: 2 + 0 + 1 of 5
    assert reward == pytest.approx(3 / 5)


def test_two_lines_average_and_are_never_strict(catalog):
    task = _two_option_task(catalog)
    fam = task.gold.family_product_ids
    env, reward = _buy(catalog, task, fam["base"], task.gold.options, extra=(fam["over_budget"],))
    assert reward == pytest.approx((1.0 + 0.8) / 2)
    assert (env.outcome().strict_reward, env.outcome().success) == (0.0, False)
    assert env.outcome().breakdown["purchased_lines"] == 2
    assert "bought 2 lines; the task asks for exactly one product" in env.gold_audit()["failed_constraints"]


def test_wrong_type_same_category_and_other_category(catalog):
    task = _two_option_task(catalog)
    spec = next(c for c in catalog.categories if c.name == task.gold.category)
    other_type = next(t for t in spec.product_types if t != task.gold.product_type)
    same_cat = next(i for i in range(catalog.num_products) if catalog.type_of(i) == other_type)
    other_cat = next(
        i for i in range(catalog.num_products) if catalog.category_of(i).name != task.gold.category
    )
    for index, r_type in ((same_cat, 0.5), (other_cat, 0.1)):
        env, reward = _buy(catalog, task, f"P{index:06d}", {})
        line = env.outcome().breakdown["lines"][0]
        assert line["r_type"] == r_type
        expected = partial_credit(r_type, line["attributes_matched"], 0, line["price_ok"], 2, 2)
        assert reward == pytest.approx(expected)


def test_no_purchase_is_zero_and_breakdown_has_no_gold_values(catalog):
    task = _two_option_task(catalog)
    env = ShopEnv(catalog)
    env.reset(task=task, seed=0)
    outcome = env.outcome()
    assert (outcome.reward, outcome.strict_reward, outcome.success) == (0.0, 0.0, False)
    env, _ = _buy(catalog, task, task.gold.family_product_ids["attribute_swap"], task.gold.options)
    text = str(env.outcome().to_dict())
    for value in [*task.gold.attributes.values(), *task.gold.options.values()]:
        assert f"'{value}'" not in text
    audit = env.gold_audit()
    assert audit["schema_version"] == 1 and audit["privileged"] is True and audit["split"] == "train"

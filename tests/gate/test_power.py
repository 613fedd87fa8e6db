"""The budget from K: the planning model's standard error, the power it implies, the fewest pairs."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from shopsimrl.gate.config import DesignConfig
from shopsimrl.gate.power import (
    PLANNING,
    OutcomeModel,
    pairs_for_power,
    planned_pairs,
    selection_power,
    standard_error,
)
from shopsimrl.gate.sequential import (
    crossing_probability,
    futility_bounds,
    higher_bounds,
    nominal_levels,
    trend_futility_bounds,
)

SEQUENTIAL = {"pairing": "complement", "alpha": 0.025, "min_effect": 0.10, "looks": 5, "rho": 2.0, "futility": 0.4,
              "futility_trend": 0.05}


def test_standard_error_is_the_planning_formula():
    model = OutcomeModel(pair_variance=0.44, effect_sd=0.12)
    assert standard_error(pairs=600, tasks=200, pairing="complement", model=model) == pytest.approx(
        math.sqrt(0.44 / 600 + 0.12**2 / 200), rel=1e-12)
    assert standard_error(pairs=600, tasks=200, pairing="bare", model=model) == pytest.approx(
        math.sqrt(0.44 / (600 * 0.25) + 0.12**2 / 200), rel=1e-12)  # a 1/0 indicator: a quarter of the variance
    assert standard_error(pairs=50, tasks=200, pairing="complement", model=model) == pytest.approx(
        math.sqrt(0.44 / 50 + 0.12**2 / 50), rel=1e-12)  # 50 pairs reach only 50 tasks


@pytest.mark.parametrize("k", [1, 4, 8])
def test_one_look_without_futility_is_the_textbook_power_of_the_first_holm_step(k):
    se = standard_error(pairs=600, tasks=200, pairing="complement")
    textbook = stats.norm.cdf(0.10 / se - stats.norm.isf(0.025 / k))
    power = selection_power(pairs=600, candidates=k, tasks=200, **(SEQUENTIAL | {"looks": 1, "futility": 0.0}))
    assert power == pytest.approx(textbook, abs=1e-6)


@pytest.mark.parametrize("k", [1, 4, 8])
def test_the_budget_is_the_fewest_pairs_reaching_the_target(k):
    pairs = pairs_for_power(candidates=k, tasks=200, **SEQUENTIAL)
    assert selection_power(pairs=pairs, candidates=k, tasks=200, **SEQUENTIAL) >= 0.8
    assert selection_power(pairs=pairs - 1, candidates=k, tasks=200, **SEQUENTIAL) < 0.8


def test_budgets_grow_with_k_and_with_fewer_tasks():
    on_200 = [pairs_for_power(candidates=k, tasks=200, **SEQUENTIAL) for k in (1, 2, 4, 8)]
    on_62 = [pairs_for_power(candidates=k, tasks=62, **SEQUENTIAL) for k in (1, 2, 4, 8)]
    assert on_200 == sorted(on_200) and on_62 == sorted(on_62)
    assert all(a < b for a, b in zip(on_200, on_62, strict=True))  # the effect's task spread needs tasks


def test_an_unreachable_budget_is_refused_naming_the_cause():
    with pytest.raises(ValueError) as info:
        pairs_for_power(candidates=3, tasks=3, **SEQUENTIAL)
    assert str(info.value) == ("no budget reaches power 0.8 at +0.1 for K=3 with 3 tasks (even 64 replicates): the "
                               "task-to-task spread of an effect needs more tasks")


def test_planned_pairs_follow_the_config():
    assert planned_pairs(DesignConfig(replicates=3), candidates=4, tasks=200) == 600
    assert planned_pairs(DesignConfig(), candidates=0, tasks=200) == 0
    sequential = planned_pairs(DesignConfig(), candidates=4, tasks=200)
    assert sequential == pairs_for_power(candidates=4, tasks=200, **SEQUENTIAL)  # the shipped defaults
    fixed = planned_pairs(DesignConfig(looks=1), candidates=4, tasks=200)
    one_look = pairs_for_power(candidates=4, tasks=200, **(SEQUENTIAL | {"looks": 1}))
    assert fixed == 200 * math.ceil(one_look / 200)  # a fixed gate runs whole replicates


def test_the_planning_model_is_the_benchs_worst_case():
    """0.5 is the ceiling of a paired 0/1 delta's variance (the bench's `half`), 0.14 the task spread of a
    `some` effect: planned for 0.44 / 0.12, `spread-some` and `half` measured power 0.74-0.79 (docs/gate.md)."""
    assert PLANNING == OutcomeModel(pair_variance=0.5, effect_sd=0.14)
    assert pairs_for_power(candidates=4, tasks=200, **SEQUENTIAL) > pairs_for_power(
        candidates=4, tasks=200, **SEQUENTIAL, model=OutcomeModel(pair_variance=0.44, effect_sd=0.12))


def test_the_power_includes_the_trend_rule_exactly():
    """selection_power is the crossing probability with the higher of the two futility bounds at each look."""
    fractions = (0.2, 0.4, 0.6, 0.8, 1.0)
    levels = nominal_levels(fractions, 0.025 / 4, 2.0)
    drift = 0.10 / standard_error(pairs=700, tasks=200, pairing="complement")
    design = futility_bounds(fractions, levels[-1], drift, 0.4)
    trend = trend_futility_bounds(fractions, levels[-1], 0.05)
    expected = crossing_probability(fractions, levels, drift, higher_bounds(design, trend))
    with_trend = selection_power(pairs=700, candidates=4, tasks=200, **SEQUENTIAL)
    assert with_trend == pytest.approx(expected, abs=1e-12)
    without = selection_power(pairs=700, candidates=4, tasks=200, **(SEQUENTIAL | {"futility_trend": 0.0}))
    assert with_trend < without  # the trend rule stops some helpful candidates: it costs power ...
    assert pairs_for_power(candidates=4, tasks=200, **SEQUENTIAL) > pairs_for_power(
        candidates=4, tasks=200, **(SEQUENTIAL | {"futility_trend": 0.0}))  # ... which the budget buys back

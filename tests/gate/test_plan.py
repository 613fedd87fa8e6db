"""The gate's plan: the fixed gate's design is unchanged, the sequential one is listed replicate by replicate."""

from __future__ import annotations

import json

import pytest

from shopsimrl.errors import ConfigError
from shopsimrl.gate.config import DesignConfig
from shopsimrl.gate.design import build_design
from shopsimrl.gate.plan import plan_gate
from shopsimrl.gate.power import planned_pairs

TASKS = [f"validation-0-{i:05d}" for i in range(200)]
CANDIDATES = ["i1", "i2", "i3", "i4"]


def test_a_fixed_gate_with_explicit_replicates_is_the_design_as_before():
    plan = plan_gate(DesignConfig(replicates=3, looks=1, seed=5), TASKS, CANDIDATES)
    before = build_design(TASKS, candidates=CANDIDATES, replicates=3, pairing="complement", seed=5)
    assert json.dumps(plan.design.to_json()) == json.dumps(before.to_json())
    assert [(look.pairs, look.alpha) for look in plan.looks] == [(600, 0.025)] and not plan.sequential


def test_a_sequential_gate_lists_replicate_by_replicate_and_stops_at_its_budget():
    config = DesignConfig(seed=5)
    plan = plan_gate(config, TASKS, CANDIDATES)
    budget = planned_pairs(config, candidates=4, tasks=200)
    assert len(plan.design.pairs) == budget == plan.looks[-1].pairs and len(plan.looks) == 5
    first = plan.design.pairs[: plan.looks[0].pairs]
    assert len({pair.task_id for pair in first}) == len(first)  # an early look sees as many tasks as it can
    assert [pair.replicate for pair in plan.design.pairs] == sorted(pair.replicate for pair in plan.design.pairs)
    whole = build_design(TASKS, candidates=CANDIDATES, replicates=4, pairing="complement", seed=5)
    assert set(plan.design.pairs) <= set(whole.pairs)  # the same pairs (seeds, masks), in another order


def test_replicate_order_is_a_permutation_of_task_order():
    by_task = build_design(TASKS[:9], candidates=CANDIDATES, replicates=3, pairing="complement", seed=2)
    by_replicate = build_design(TASKS[:9], candidates=CANDIDATES, replicates=3, pairing="complement", seed=2,
                                order="replicate")
    assert sorted(by_task.pairs, key=lambda p: p.pair_id) == sorted(by_replicate.pairs, key=lambda p: p.pair_id)
    assert [p.pair_id for p in by_replicate.pairs[:3]] == [f"{t}/r0" for t in TASKS[:3]]
    with pytest.raises(ValueError, match="pairs=28: between 1 and tasks x replicates = 27"):
        build_design(TASKS[:9], candidates=CANDIDATES, replicates=3, pairing="complement", seed=2, pairs=28)


def test_a_budget_out_of_reach_is_a_config_error_before_any_evaluation():
    with pytest.raises(ConfigError) as info:
        plan_gate(DesignConfig(), TASKS[:3], CANDIDATES[:3])
    assert info.value.problems == ["replicates: power: no budget reaches power 0.8 at +0.1 for K=3 with 3 tasks "
                                   "(even 64 replicates): the task-to-task spread of an effect needs more tasks"]


def test_the_plan_carries_the_trend_rule_of_the_config():
    plan = plan_gate(DesignConfig(seed=5), TASKS, CANDIDATES)
    assert DesignConfig().futility_trend == 0.05
    assert [look.trend_futility for look in plan.looks] == [0.0, 0.05, 0.05, 0.05, 0.0]
    off = plan_gate(DesignConfig(seed=5, futility_trend=0.0), TASKS, CANDIDATES)
    assert [look.trend_futility for look in off.looks] == [0.0] * 5
    assert len(off.design.pairs) < len(plan.design.pairs)  # the rule's cost in power is budgeted

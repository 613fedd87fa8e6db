"""The pre-registered design: balance, complement/bare arms, shared seeds, determinism."""

from __future__ import annotations

from collections import Counter

import pytest

from shopsimrl.gate.design import Design, build_design

TASKS = [f"validation-0-{i:05d}" for i in range(9)]
CANDIDATES = ["i1", "i2", "i3", "i4"]


@pytest.mark.parametrize("replicates", [2, 4])
def test_even_replicates_split_each_candidate_evenly_within_every_task(replicates):
    design = build_design(TASKS, candidates=CANDIDATES, replicates=replicates, pairing="complement", seed=3)
    for candidate in CANDIDATES:
        per_task = Counter(pair.task_id for pair in design.pairs if candidate in pair.mask_a)
        assert per_task == {task: replicates // 2 for task in TASKS}


def test_odd_replicates_balance_the_odd_one_across_tasks():
    design = build_design(TASKS, candidates=CANDIDATES, replicates=3, pairing="complement", seed=3)
    for candidate in CANDIDATES:
        on = sum(candidate in pair.mask_a for pair in design.pairs)
        assert abs(2 * on - len(design.pairs)) <= 1  # 27 pairs: 13 or 14 on
        per_task = Counter(pair.task_id for pair in design.pairs if candidate in pair.mask_a)
        assert set(per_task.values()) <= {1, 2}


def test_complement_arm_b_runs_exactly_the_other_candidates_and_indicators_are_plus_minus_one():
    design = build_design(TASKS, candidates=CANDIDATES, replicates=2, pairing="complement", seed=1)
    for pair in design.pairs:
        assert set(pair.mask_a) | set(pair.mask_b) == set(CANDIDATES)
        assert not set(pair.mask_a) & set(pair.mask_b)
        assert set(design.indicators(pair)) <= {-1, 1}


def test_bare_arm_b_runs_no_candidate():
    design = build_design(TASKS, candidates=CANDIDATES, replicates=2, pairing="bare", seed=1)
    assert all(pair.mask_b == () for pair in design.pairs)
    assert {d for pair in design.pairs for d in design.indicators(pair)} == {0, 1}


def test_both_arms_share_the_pair_seeds_and_pairs_differ_from_each_other():
    design = build_design(TASKS, candidates=CANDIDATES, replicates=3, pairing="complement", seed=0)
    seeds = [pair.sampling_seed for pair in design.pairs]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= s < 2**31 for s in seeds)
    assert design.evaluation_keys()[:2] == [(design.pairs[0].pair_id, "a"), (design.pairs[0].pair_id, "b")]


def test_design_is_a_pure_function_of_its_arguments_and_round_trips_through_json():
    first = build_design(TASKS, candidates=CANDIDATES, replicates=2, pairing="complement", seed=5)
    again = build_design(TASKS, candidates=CANDIDATES, replicates=2, pairing="complement", seed=5)
    other = build_design(TASKS, candidates=CANDIDATES, replicates=2, pairing="complement", seed=6)
    assert first == again
    assert [p.mask_a for p in first.pairs] != [p.mask_a for p in other.pairs]
    assert Design.from_json(first.to_json()) == first


def test_no_candidates_gives_pairs_with_empty_masks():
    design = build_design(TASKS[:2], candidates=[], replicates=1, pairing="complement", seed=0)
    assert [(p.mask_a, p.mask_b) for p in design.pairs] == [((), ()), ((), ())]

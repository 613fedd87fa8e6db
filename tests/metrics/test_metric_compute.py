"""Every rollout/shopsim metric on hand-built groups, with the arithmetic written out."""

from __future__ import annotations

import pytest
from scenario_groups import ACCEPTED, RHO, scenario_groups

from shopsimrl.contract import Arm, RetryInfo
from shopsimrl.metrics import (
    RetryOutcome,
    RolloutMetricsInput,
    TriageCounts,
    compute_shopsim_metrics,
    shopsim_specs,
    summarize_group,
)
from shopsimrl.metrics import names as m
from shopsimrl.metrics.synthetic import Traj, make_group

P = "rollout/shopsim/"


def _compute(groups=None, **overrides):
    summaries = [summarize_group(g) for g in (groups if groups is not None else scenario_groups())]
    data = dict(
        completed_groups=summaries,
        accepted_group_indices=frozenset(ACCEPTED),
        drop_counts={"zero_std_0.2": 1, "technical_error": 1},
        q=0.5,
        rho=RHO,
    )
    data.update(overrides)
    return compute_shopsim_metrics(RolloutMetricsInput(**data))


@pytest.fixture(scope="module")
def metrics():
    return _compute(
        retry_outcomes=[
            RetryOutcome(source_group_index=2, scorable=True, success=True, technical_error=False),
            RetryOutcome(source_group_index=7, scorable=True, success=False, technical_error=False),
            RetryOutcome(source_group_index=9, scorable=False, success=None, technical_error=True),
        ],
        triage=TriageCounts(all_wrong_groups=4, with_failure_card=1),
    )


def test_configured_values(metrics):
    assert metrics[P + "q"] == 0.5
    assert metrics[P + "chunk/c1/target_rho"] == 0.5
    assert metrics[P + "chunk/c2/target_rho"] == 0.25
    assert metrics[P + "source_all_samples"] == 1.0


def test_outcome_means_count_each_trajectory_once_and_skip_the_unscorable(metrics):
    # 24 trajectories (segments do not count), 23 scorable (group 4 has one technical error).
    # reward sum: g1 1+0+0.5+0=1.5, g2 0.8, g3 4, g4 0+0.4+0=0.4 (its scorable siblings count), g5 1, g6 2 -> 9.7
    assert metrics[P + "reward_mean"] == pytest.approx(9.7 / 23)
    # reward == 1.0 trajectories: g1 1, g3 4, g5 1, g6 1 -> 7; success and strict reward coincide here.
    assert metrics[P + "strict_reward_mean"] == pytest.approx(7 / 23)
    assert metrics[P + "success_rate"] == pytest.approx(7 / 23)
    # Had segments been counted, g1's 1.0 would weigh 3 and g3's 1.0s 2 each: (9.7 + 2 + 4) / 30 != 9.7 / 23.
    assert metrics[P + "reward_mean"] != pytest.approx(15.7 / 30)


def test_scored_rate(metrics):
    assert metrics[P + "scored_rate"] == pytest.approx(23 / 24)


def test_skill_free_rate_and_inclusion_denominator(metrics):
    # skill-free: g1, g6 of 6 completed groups.
    assert metrics[P + "skill_free_group_rate"] == pytest.approx(2 / 6)
    # inclusion denominator: assisted g2, g4, g5 + assisted-empty g3 = 4 (skill-free g1, g6 are outside).
    assert metrics[P + "assisted_group_count"] == 4
    assert metrics[P + "chunk/c1/inclusion_rate"] == pytest.approx(3 / 4)  # g2, g4, g5
    assert metrics[P + "chunk/c2/inclusion_rate"] == pytest.approx(1 / 4)  # g2
    assert metrics[P + "completed_group_count"] == 6


def test_all_wrong_needs_every_sibling_scorable(metrics):
    # g2: all scorable, none succeeded. g4 has no success either, but a technical sibling: not all-wrong.
    assert metrics[P + "all_wrong_group_rate"] == pytest.approx(1 / 6)


def test_zero_std_occurrence_vs_drop_rate(metrics):
    # occurrence over completed groups: g2 (0.2 x4) and g3 (1.0 x4); g4's scorable 0, 0.4, 0 differ.
    assert metrics[P + "zero_std_group_rate"] == pytest.approx(2 / 6)
    # really dropped: only g2 (g3 was kept when insufficient); over accepted groups g1, g3, g5.
    assert metrics[P + "zero_std_group_drop_rate"] == pytest.approx(1 / 3)


def test_technical_drops_share_the_accepted_denominator(metrics):
    assert metrics[P + "technical_group_drop_count"] == 1
    assert metrics[P + "technical_group_drop_rate"] == pytest.approx(1 / 3)


def test_runtime_errors_cover_training_and_retry(metrics):
    # g4 (training technical error) + the retry of group 9 that hit a technical error -> 2 of 6.
    assert metrics[P + "runtime_error_group_rate"] == pytest.approx(2 / 6)


def test_runtime_error_group_counted_once():
    out = _compute(retry_outcomes=[RetryOutcome(4, scorable=False, success=None, technical_error=True)])
    # g4 errs in training and in its retry: still one group -> 1/6.
    assert out[P + "runtime_error_group_rate"] == pytest.approx(1 / 6)


def test_full_skill_retry_success_rate(metrics):
    # 3 finished retries, 2 scorable (the technical one is not a verdict on the skills), 1 succeeded.
    assert metrics[P + "full_skill_retry_success_rate"] == pytest.approx(1 / 2)


def test_pending_analysis_rate(metrics):
    # 4 triaged all-wrong groups this round, 1 has a failure card -> 3/4 pending.
    assert metrics[P + "pending_analysis_rate"] == pytest.approx(3 / 4)


def test_train_metrics_cover_accepted_groups_only(metrics):
    # accepted g1, g3, g5: 12 trajectories, rewards 1.5 + 4 + 1 = 6.5; successes 1 + 4 + 1 = 6.
    assert metrics[P + "train_group_count"] == 3
    assert metrics[P + "train_reward_mean"] == pytest.approx(6.5 / 12)
    assert metrics[P + "train_strict_reward_mean"] == pytest.approx(6 / 12)
    assert metrics[P + "train_success_rate"] == pytest.approx(6 / 12)


def test_every_declared_shopsim_metric_is_produced(metrics):
    produced = {m.spec_for_key(k).name for k in metrics}
    declared = {s.name for s in shopsim_specs()}
    assert produced == declared


def test_zero_denominators_leave_rates_out():
    out = _compute(groups=[], accepted_group_indices=frozenset(), drop_counts={})
    assert out == {
        P + "q": 0.5,
        P + "source_all_samples": 1.0,
        P + "completed_group_count": 0.0,
        P + "assisted_group_count": 0.0,
        P + "chunk/c1/target_rho": 0.5,
        P + "chunk/c2/target_rho": 0.25,
        P + "technical_group_drop_count": 0.0,
        P + "train_group_count": 0.0,
    }


def test_retry_groups_are_not_training_generations():
    retry = RetryInfo(source_group_key="key-task-2", source_group_index=2)
    groups = [*scenario_groups(), make_group(50, [Traj(1.0)] * 4, arm=Arm.ASSISTED, mask=("c1", "c2"), rho=RHO, retry=retry)]
    out = _compute(groups=groups)
    assert out[P + "completed_group_count"] == 6
    assert out[P + "reward_mean"] == pytest.approx(9.7 / 23)


def test_reward_key_strict_changes_zero_std():
    # Two groups, rewards 0.2/0.6 (differ) but strict rewards all 0 (equal).
    groups = [make_group(1, [Traj(0.2), Traj(0.6)]), make_group(2, [Traj(1.0), Traj(0.0)])]
    by_reward = _compute(groups=groups, accepted_group_indices=frozenset({1, 2}), drop_counts={})
    by_strict = _compute(groups=groups, accepted_group_indices=frozenset({1, 2}), drop_counts={},
                         reward_key="strict_reward")
    assert by_reward[P + "zero_std_group_rate"] == 0.0
    assert by_strict[P + "zero_std_group_rate"] == pytest.approx(1 / 2)


def test_segments_with_different_outcomes_are_rejected():
    group = make_group(8, [Traj(1.0, segments=2)])
    group[1].metadata["shopsim"]["outcome"]["reward"] = 0.0
    with pytest.raises(ValueError, match=r"group_index=8 rollout_id=800: segments carry different outcomes \(sample index=8001\)"):
        summarize_group(group)

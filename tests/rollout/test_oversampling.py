"""A replay of slime's over-sampling loop (32 groups per wave, batch of 16) over scripted outcomes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shopsimrl.contract import call_dynamic_filter
from shopsimrl.metrics import RolloutMetricsInput, compute_shopsim_metrics, summarize_group
from shopsimrl.metrics.synthetic import Traj, make_group
from shopsimrl.rollout.filters import dynamic_sampling_filter
from shopsimrl.rollout.oversampling import Decision, OverSampler

P = "rollout/shopsim/"

# Outcome of each group id (ids are handed out in submission order, wave after wave).
#   G: mixed rewards -> keep;  Z: all 0.0 -> zero-std;  T: mixed rewards plus a technical error -> always dropped.
OUTCOMES = {**{i: "Z" for i in range(0, 4)}, 4: "T", **{i: "G" for i in range(5, 15)},
            **{i: "Z" for i in range(15, 28)}, 28: "T", **{i: "G" for i in range(29, 32)},
            32: "Z", 33: "G", 34: "Z", 35: "G"}
OUTCOMES.update({i: "G" for i in range(36, 64)})  # the rest of wave 2: still in flight at the end
# Completion schedule: each inner list is what one `asyncio.wait(FIRST_COMPLETED)` returns.
SCHEDULE = [[i] for i in range(0, 33)] + [[33, 34, 35]]


def _group(group_id):
    kind = OUTCOMES[group_id]
    trajs = {"G": [Traj(1.0), Traj(0.0)], "Z": [Traj(0.0), Traj(0.0)], "T": [Traj(1.0), Traj(0.0), Traj(None, error="environment")]}[kind]
    return make_group(group_id, trajs)


def _replay(tmp_path):
    """slime's generate_rollout_async, reduced to its decisions (reference/slime.md 4.3)."""
    args = SimpleNamespace(shopsim={"run_dir": str(tmp_path)})
    sampler = OverSampler(target=16, over_sampling_batch_size=32)
    next_id, in_flight, completed, decisions = 0, [], [], {}
    batches = iter(SCHEDULE)
    while not sampler.done:
        wave = sampler.next_wave()
        in_flight += list(range(next_id, next_id + wave))
        next_id += wave
        for group_id in next(batches):
            in_flight.remove(group_id)
            group = _group(group_id)
            completed.append(group)  # all_data: every completed group, whatever the decision
            decisions[group_id] = sampler.on_group_completed(group_id, dynamic_sampling_filter(args, group))
    return sampler, completed, decisions, in_flight


def test_waves_remaining_and_decisions(tmp_path):
    sampler, completed, decisions, in_flight = _replay(tmp_path)
    # Wave 1 (ids 0-31): remaining starts at 32.
    #   0-3 Z: remaining 32 > 16 -> dropped, remaining 28;  4 T: dropped, 27;  5-14 G: accepted (10)
    #   15-25 Z: dropped while remaining > 16 -> 27..16 (11 drops);  26-27 Z: remaining 16 <= 16 -> kept (12)
    #   28 T: dropped, remaining 15 < 16 -> wave 2 (ids 32-63), remaining 47;  29-31 G: accepted (15)
    # Wave 2: 32 Z: dropped, 46;  one wait returns 33, 34, 35: 33 G fills the batch (16),
    #   34 Z is still filtered and dropped (46 > 16), 35 G passes the filter but the batch is full: surplus.
    assert sampler.waves == [32, 32]
    assert sampler.remaining == 45
    assert [i for i, d in decisions.items() if d is Decision.ACCEPTED] == [*range(5, 15), 26, 27, 29, 30, 31, 33]
    assert [i for i, d in decisions.items() if d is Decision.SURPLUS] == [35]
    assert sampler.drop_counts() == {"zero_std_0.0": 17, "technical_error": 2}
    assert sampler.drop_metrics() == {"rollout/dynamic_filter/drop_zero_std_0.0": 17,
                                      "rollout/dynamic_filter/drop_technical_error": 2}
    assert len(completed) == 36 and len(in_flight) == 28  # 36-63 were in flight: aborted, not completed


def test_zero_std_drop_rate_is_a_drop_rate_not_an_occurrence_rate(tmp_path):
    sampler, completed, _, _ = _replay(tmp_path)
    metrics = compute_shopsim_metrics(RolloutMetricsInput(
        completed_groups=[summarize_group(g) for g in completed],
        accepted_group_indices=frozenset(sampler.accepted),
        drop_counts=sampler.drop_counts(),
        q=0.5,
        rho={},
    ))
    # occurrence: zero-std groups 0-3, 15-27, 32, 34 = 4 + 13 + 2 = 19 of 36 completed groups
    assert metrics[P + "zero_std_group_rate"] == pytest.approx(19 / 36)
    # really dropped: 19 minus the 2 kept when insufficient (26, 27) = 17, over 16 accepted groups.
    # It can exceed 1: each accepted group may have cost more than one discarded generation.
    assert metrics[P + "zero_std_group_drop_rate"] == pytest.approx(17 / 16)
    assert metrics[P + "technical_group_drop_count"] == 2
    assert metrics[P + "technical_group_drop_rate"] == pytest.approx(2 / 16)
    # the accepted batch itself still holds 2 zero-std groups, which the drop rate does not see
    accepted = [summarize_group(g) for g in completed if g[0].group_index in set(sampler.accepted)]
    assert sum(s.is_zero_std("reward") for s in accepted) == 2


def test_small_waves_repeat_until_the_batch_can_be_filled():
    sampler = OverSampler(target=16, over_sampling_batch_size=6)
    assert sampler.next_wave() == 18  # 3 waves of 6: remaining 0 -> 18 >= 16
    assert sampler.waves == [6, 6, 6]
    assert sampler.next_wave() == 0


def test_legacy_bool_filter_output_and_reasonless_drops():
    sampler = OverSampler(target=1, over_sampling_batch_size=2)
    sampler.next_wave()
    # a legacy filter returns a bool; slime's call site wraps it
    assert sampler.on_group_completed("a", call_dynamic_filter(lambda: False)) is Decision.DROPPED
    assert sampler.drop_counts() == {}  # slime counts only drops with a reason
    assert sampler.on_group_completed("b", call_dynamic_filter(lambda: True)) is Decision.ACCEPTED
    assert sampler.done


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match=r"^over_sampling_batch_size must be >= 1, got 0$"):
        OverSampler(target=16, over_sampling_batch_size=0)

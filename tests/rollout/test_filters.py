"""The dynamic sampling filter on hand-built groups, flat and fan-out."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shopsimrl.contract import DynamicFilterOutput, RetryInfo
from shopsimrl.metrics.synthetic import Traj, make_group
from shopsimrl.rollout.filters import dynamic_sampling_filter


def _args(tmp_path, reward_key="reward"):
    return SimpleNamespace(shopsim={"run_dir": str(tmp_path), "reward_key": reward_key})


@pytest.mark.parametrize("fan_out", [False, True])
def test_mixed_rewards_are_kept(tmp_path, fan_out):
    group = make_group(1, [Traj(1.0, segments=3), Traj(0.0), Traj(0.5)], fan_out=fan_out)
    assert dynamic_sampling_filter(_args(tmp_path), group) == DynamicFilterOutput(keep=True)


@pytest.mark.parametrize("fan_out", [False, True])
def test_technical_failure_is_always_dropped(tmp_path, fan_out):
    group = make_group(1, [Traj(1.0), Traj(0.0), Traj(None, error="model_service")], fan_out=fan_out)
    assert dynamic_sampling_filter(_args(tmp_path), group) == DynamicFilterOutput(
        keep=False, reason="technical_error", keep_when_insufficient=False
    )


def test_technical_wins_over_zero_std(tmp_path):
    group = make_group(1, [Traj(0.0), Traj(0.0), Traj(None, error="parser")])
    assert dynamic_sampling_filter(_args(tmp_path), group).reason == "technical_error"


@pytest.mark.parametrize("fan_out", [False, True])
def test_zero_std_is_dropped_but_kept_when_insufficient(tmp_path, fan_out):
    # 3 trajectories of 0.25 -> one value after dedup, whatever the segment counts; reason rounds to 1 decimal.
    group = make_group(1, [Traj(0.25, segments=4), Traj(0.25), Traj(0.25, segments=2)], fan_out=fan_out)
    assert dynamic_sampling_filter(_args(tmp_path), group) == DynamicFilterOutput(
        keep=False, reason="zero_std_0.2", keep_when_insufficient=True
    )


def test_reward_key_is_configurable(tmp_path):
    # rewards differ (0.2 vs 0.6) but strict rewards are both 0.
    group = make_group(1, [Traj(0.2), Traj(0.6)])
    assert dynamic_sampling_filter(_args(tmp_path), group).keep is True
    assert dynamic_sampling_filter(_args(tmp_path, "strict_reward"), group) == DynamicFilterOutput(
        keep=False, reason="zero_std_0.0", keep_when_insufficient=True
    )


def test_diagnostic_retries_are_never_trained(tmp_path):
    retry = RetryInfo(source_group_key="k", source_group_index=1)
    group = make_group(2, [Traj(1.0), Traj(0.0)], retry=retry)
    assert dynamic_sampling_filter(_args(tmp_path), group) == DynamicFilterOutput(
        keep=False, reason="diagnostic_retry", keep_when_insufficient=False
    )


def test_missing_metadata_names_the_sample(tmp_path):
    group = make_group(1, [Traj(1.0), Traj(0.0)])
    del group[1].metadata["shopsim"]
    with pytest.raises(KeyError, match=r"sample index=1001 has no metadata\['shopsim'\]"):
        dynamic_sampling_filter(_args(tmp_path), group)

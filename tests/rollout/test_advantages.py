"""GRPO normalisation per group over unique trajectories, against a slow reference with torch."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from shopsimrl.contract import RetryInfo
from shopsimrl.metrics.groups import flatten_group
from shopsimrl.metrics.synthetic import Traj, make_group
from shopsimrl.rollout.advantages import reward_post_process


def _args(tmp_path, **slime_args):
    return SimpleNamespace(shopsim={"run_dir": str(tmp_path)}, **slime_args)


def test_hand_computed_group(tmp_path):
    # One group, trajectories 1.0 (3 segments), 0.0, 0.5 -> mean 0.5; unbiased std = sqrt((.25+.25+0)/2) = 0.5.
    # advantages: (1-0.5)/(0.5+1e-6), (0-0.5)/(0.5+1e-6), 0.
    samples = make_group(1, [Traj(1.0, segments=3), Traj(0.0), Traj(0.5)])
    raw, rewards = reward_post_process(_args(tmp_path), samples)
    assert raw == [1.0, 1.0, 1.0, 0.0, 0.5]
    a = 0.5 / (0.5 + 1e-6)
    assert rewards == pytest.approx([a, a, a, -a, 0.0], abs=1e-12)


def test_matches_torch_reference_in_shuffled_order(tmp_path):
    rng = random.Random(3)
    groups = [
        make_group(g, [Traj(rng.choice([0.0, 0.25, 0.5, 1.0]), segments=rng.randint(1, 4)) for _ in range(rng.randint(1, 6))])
        for g in range(12)
    ]
    samples = [s for group in groups for s in flatten_group(group)]
    rng.shuffle(samples)
    raw, rewards = reward_post_process(_args(tmp_path), samples)
    # Slow reference: one tensor per group of unique trajectories, torch's unbiased std.
    expected = {}
    for group in groups:
        by_rollout = {s.rollout_id: s.reward for s in group}
        ids = list(by_rollout)
        t = torch.tensor([by_rollout[i] for i in ids], dtype=torch.float64)
        centred = t - t.mean()
        adv = centred / (t.std() + 1e-6) if len(ids) > 1 else centred
        expected.update({(group[0].group_index, i): float(v) for i, v in zip(ids, adv, strict=True)})
    assert rewards == pytest.approx([expected[(s.group_index, s.rollout_id)] for s in samples], abs=1e-9)
    assert raw == [s.reward for s in samples]


def test_std_normalisation_switches(tmp_path):
    samples = make_group(1, [Traj(1.0), Traj(0.0), Traj(0.0), Traj(0.0)])
    # mean 0.25 -> centred 0.75, -0.25 x3
    for flags in ({"disable_grpo_std_normalization": True}, {"grpo_std_normalization": False}):
        _, rewards = reward_post_process(_args(tmp_path, **flags), samples)
        assert rewards == pytest.approx([0.75, -0.25, -0.25, -0.25])
    _, rewards = reward_post_process(_args(tmp_path, rewards_normalization=False), samples)
    assert rewards == [1.0, 0.0, 0.0, 0.0]
    _, rewards = reward_post_process(_args(tmp_path, advantage_estimator="reinforce_plus_plus_baseline"), samples)
    assert rewards == pytest.approx([0.75, -0.25, -0.25, -0.25])
    _, rewards = reward_post_process(_args(tmp_path, advantage_estimator="ppo"), samples)
    assert rewards == [1.0, 0.0, 0.0, 0.0]


def test_single_trajectory_group_is_only_centred(tmp_path):
    _, rewards = reward_post_process(_args(tmp_path), make_group(1, [Traj(0.7, segments=2)]))
    assert rewards == [0.0, 0.0]


def test_zero_std_group_gets_zero_advantage(tmp_path):
    _, rewards = reward_post_process(_args(tmp_path), make_group(1, [Traj(0.5)] * 3))
    assert rewards == [0.0, 0.0, 0.0]


def test_strict_reward_key(tmp_path):
    args = SimpleNamespace(shopsim={"run_dir": str(tmp_path), "reward_key": "strict_reward"})
    raw, _ = reward_post_process(args, make_group(1, [Traj(0.5), Traj(1.0)]))
    assert raw == [0.0, 1.0]


def test_retry_samples_are_refused(tmp_path):
    samples = make_group(4, [Traj(1.0), Traj(0.0)], retry=RetryInfo(source_group_key="k", source_group_index=1))
    with pytest.raises(ValueError, match=r"sample index=4000 group_index=4 is a diagnostic retry"):
        reward_post_process(_args(tmp_path), samples)


def test_disagreeing_segments_are_refused(tmp_path):
    samples = make_group(5, [Traj(1.0, segments=2)])
    samples[1].metadata["shopsim"]["outcome"]["reward"] = 0.0
    with pytest.raises(ValueError, match=r"group_index=5 rollout_id=500: segments carry rewards 1.0 and 0.0"):
        reward_post_process(_args(tmp_path), samples)

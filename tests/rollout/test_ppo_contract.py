"""Our hooks under `--advantage-estimator ppo`, unchanged: what slime's critic path reads of our samples.

A critic run adds no field to slime's `Sample`: the critic computes `values` itself from the train
data slime builds out of each sample (tokens, response_length, loss_mask and the post-processed
reward), and GAE places that reward at the sample's last response token (`compute_advantages_and_returns`).
So the contract is: the dynamic filter decides as under GRPO, the reward post-process hands every
segment its trajectory's raw reward, and each segment's per-token fields have the response's length,
which slime's own `vanilla_gae` turns into returns equal to that reward at every token (gamma = lambd = 1).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from slime_source import requires_slime

from shopsimrl.metrics.groups import flatten_group
from shopsimrl.metrics.synthetic import Traj, make_group
from shopsimrl.rollout.advantages import reward_post_process
from shopsimrl.rollout.filters import dynamic_sampling_filter

GROUPS = [
    [Traj(1.0, segments=3), Traj(0.0), Traj(0.5, segments=2)],  # mixed: kept
    [Traj(0.5), Traj(0.5)],  # zero-std: dropped, kept when insufficient
    [Traj(1.0), Traj(None, error="model_service")],  # technical: always dropped
]


def _args(tmp_path, estimator: str) -> SimpleNamespace:
    return SimpleNamespace(shopsim={"run_dir": str(tmp_path)}, advantage_estimator=estimator)


@pytest.mark.parametrize("fan_out", [False, True])
def test_the_filter_decides_as_under_grpo(tmp_path, fan_out: bool) -> None:
    for index, trajectories in enumerate(GROUPS):
        group = make_group(index, trajectories, fan_out=fan_out)
        assert dynamic_sampling_filter(_args(tmp_path, "ppo"), group) == dynamic_sampling_filter(
            _args(tmp_path, "grpo"), group
        )


@requires_slime
def test_every_segment_reaches_slimes_gae_with_its_trajectorys_reward(tmp_path) -> None:
    from slime.utils.ppo_utils import vanilla_gae

    group = make_group(0, GROUPS[0], fan_out=True)
    samples = flatten_group(group)
    raw, rewards = reward_post_process(_args(tmp_path, "ppo"), samples)
    assert rewards == raw == [1.0, 1.0, 1.0, 0.0, 0.5, 0.5]  # raw, per segment: no group normalisation
    for sample, reward in zip(samples, rewards, strict=True):
        n = sample.response_length
        assert len(sample.loss_mask) == n and len(sample.tokens) > n  # slime's per-token fields line up
        token_rewards = torch.zeros(1, n)
        token_rewards[0, -1] = reward  # slime: `k[-1] += reward`
        values = torch.linspace(-0.5, 0.5, n).unsqueeze(0)  # any critic's values
        _, returns = vanilla_gae(token_rewards, values, 1.0, 1.0)
        assert torch.allclose(returns, torch.full((1, n), reward), atol=1e-6)  # float32 sums of n terms

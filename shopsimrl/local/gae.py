"""GAE advantages and returns of PPO, as slime v0.3.1 computes them (`compute_advantages_and_returns`).

Per sample (every segment of a trajectory is a sample, as in slime), over all response positions:

* token-level rewards: 0 everywhere and the sample's reward at the *last response token* (slime's
  `k[-1] += reward`, with `--kl-coef 0`: the local backend has no KL reward shaping);
* `delta_t = r_t + gamma * V_{t+1} - V_t` with `V_T = 0`, `A_t = delta_t + gamma * lambd * A_{t+1}`,
  returns `A + V` (slime's `vanilla_gae`; its default `chunked_gae` is the same recursion as a scan);
* `--normalize-advantages`: whitened over the loss-masked tokens of the whole rollout, with the
  Bessel-corrected variance and `eps = 1e-8` (slime's `distributed_masked_whiten`, one rank).

`rollout_statistics` gives slime's `rollout/values|returns|advantages` (its `log_rollout_data`
reducer) and our spreads and explained variance (`metrics.ppo_spread.ppo_spreads`, shared with the
slime hook).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shopsimrl.local.grpo import sum_of_sample_mean
from shopsimrl.metrics import names as m
from shopsimrl.metrics.ppo_spread import ppo_spreads

WHITEN_EPSILON = 1e-8


def gae(
    values: torch.Tensor, reward: float, gamma: float, lambd: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of one sample from its `[response_length]` values and its reward.

    The recursion runs on Python floats (float64): a multi-turn sample has thousands of response
    tokens, and float32 sums over them would leave returns that should equal the reward a few ulps
    apart, which the explained variance would read as spread. The results are float32, as slime's.
    """
    v = [float(x) for x in values.detach().tolist()]
    advantages = [0.0] * len(v)
    last = 0.0
    for t in reversed(range(len(v))):
        next_value = v[t + 1] if t + 1 < len(v) else 0.0
        delta = (reward if t == len(v) - 1 else 0.0) + gamma * next_value - v[t]
        last = delta + gamma * lambd * last
        advantages[t] = last
    returns = [a + x for a, x in zip(advantages, v, strict=True)]
    as_tensor = lambda xs: torch.tensor(xs, dtype=torch.float32, device=values.device)  # noqa: E731
    return as_tensor(advantages), as_tensor(returns)


def masked_whiten(advantages: Sequence[torch.Tensor], loss_masks: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Every sample's advantages whitened with the mean and variance of all loss-masked tokens."""
    flat, mask = torch.cat(list(advantages)), torch.cat(list(loss_masks))
    count = mask.sum()
    if count.item() == 0:
        raise ValueError("normalize_advantages: no loss-masked token in the rollout")
    mean = (flat * mask).sum() / count
    var = ((flat**2) * mask).sum() / count - mean**2
    if count.item() >= 2:
        var = var * count / (count - 1)
    whitened = (flat - mean) * torch.rsqrt(var + WHITEN_EPSILON)
    return list(whitened.split([a.shape[0] for a in advantages]))


def rollout_statistics(
    values: Sequence[torch.Tensor],
    returns: Sequence[torch.Tensor],
    advantages: Sequence[torch.Tensor],
    loss_masks: Sequence[torch.Tensor],
    mask_sums: Sequence[float],
    num_rollouts: int,
) -> dict[str, float]:
    """slime's three means (token mean per trajectory, averaged) and our pooled spreads (metrics/ppo_spread.py,
    the same function the slime hook calls)."""
    out = {
        m.ROLLOUT_VALUES.name: float(sum_of_sample_mean(values, loss_masks, mask_sums, num_rollouts)),
        m.ROLLOUT_RETURNS.name: float(sum_of_sample_mean(returns, loss_masks, mask_sums, num_rollouts)),
        m.ROLLOUT_ADVANTAGES.name: float(sum_of_sample_mean(advantages, loss_masks, mask_sums, num_rollouts)),
    }
    return out | ppo_spreads(values, returns, advantages, loss_masks)

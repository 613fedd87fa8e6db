"""The spread of a PPO rollout's values, returns and advantages, and the critic's explained variance.

One definition for both backends (metrics/names.py, "PPO"; docs/metrics.md): pooled over the
loss-masked response tokens of the rollout's trained samples, every token once, population
variance (verl's `compute_data_metrics`). The local backend calls `ppo_spreads` on its one
process; the slime hook (`shopsimrl.slime_metrics.add_ppo_spread_metrics`) calls it on every
data-parallel rank, each holding a disjoint part of the samples, with `sum_across` adding a vector
of sums over those ranks. Everything is a sum, so the result is the statistic of the whole rollout,
never an average of per-rank statistics: one round adds the token count and the sums, the second
adds the squared deviations from the global means (two passes, so no catastrophic cancellation).

Explained variance is `1 - Var(returns - values) / Var(returns)`, absent while the returns' std is
at most `EXPLAINED_VARIANCE_MIN_RETURNS_STD`: slime's GAE runs in float32, so returns that should
all equal one reward (every reward of the rollout equal, gamma = lambd = 1) differ by rounding
(measured with slime's own `chunked_gae`: up to 3e-6 at 1000 tokens), and dividing by that variance
would report a huge negative number that says nothing about the critic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from shopsimrl.metrics import names as m

if TYPE_CHECKING:
    import torch

# Return units (ShopSim rewards lie in [0, 1]): far above float32 GAE rounding, far below any
# reward difference the critic could learn from.
EXPLAINED_VARIANCE_MIN_RETURNS_STD = 1e-3

SumAcross = Callable[["torch.Tensor"], "torch.Tensor"]
"""Elementwise sum of a 1-D float64 CPU tensor over every process holding part of the rollout."""


def ppo_spreads(
    values: Sequence[torch.Tensor],
    returns: Sequence[torch.Tensor],
    advantages: Sequence[torch.Tensor],
    loss_masks: Sequence[torch.Tensor],
    sum_across: SumAcross | None = None,
) -> dict[str, float]:
    """`rollout/ppo/{values,returns,advantages}_std` and `rollout/ppo/explained_variance`.

    One `[response_length]` tensor per sample in each argument; values are the critic's before its
    update. Empty when no token is loss-masked (on every process): there is no spread to report.
    """
    import torch

    lists = {"values": values, "returns": returns, "advantages": advantages}
    counts = {name: len(xs) for name, xs in lists.items()}
    if any(n != len(loss_masks) for n in counts.values()):
        raise ValueError(f"ppo_spreads: {len(loss_masks)} loss masks but sample counts {counts}")
    pooled = []
    for name, xs in lists.items():
        for i, (x, mask) in enumerate(zip(xs, loss_masks, strict=True)):
            if x.shape != mask.shape:
                raise ValueError(
                    f"ppo_spreads: sample {i}: {name} has shape {tuple(x.shape)}, its loss mask {tuple(mask.shape)}"
                )
        if xs:
            keep = torch.cat([mask.detach() for mask in loss_masks]).bool()
            pooled.append(torch.cat([x.detach() for x in xs])[keep].to(device="cpu", dtype=torch.float64))
        else:
            pooled.append(torch.zeros(0, dtype=torch.float64))
    v, r, a = pooled
    columns = (v, r, a, r - v)
    add = sum_across if sum_across is not None else _this_process_only
    first = add(torch.stack([torch.tensor(float(v.numel()), dtype=torch.float64), *(c.sum() for c in columns)]))
    count = float(first[0])
    if count == 0:
        return {}
    means = first[1:] / count
    second = add(torch.stack([((c - mean) ** 2).sum() for c, mean in zip(columns, means, strict=True)]))
    var_v, var_r, var_a, var_d = (float(x) for x in second / count)
    out = {
        m.PPO_VALUES_STD.name: math.sqrt(var_v),
        m.PPO_RETURNS_STD.name: math.sqrt(var_r),
        m.PPO_ADVANTAGES_STD.name: math.sqrt(var_a),
    }
    if math.sqrt(var_r) > EXPLAINED_VARIANCE_MIN_RETURNS_STD:
        out[m.PPO_EXPLAINED_VARIANCE.name] = 1.0 - var_d / var_r
    return out


def _this_process_only(sums: torch.Tensor) -> torch.Tensor:
    return sums

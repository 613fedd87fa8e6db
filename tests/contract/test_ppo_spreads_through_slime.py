"""`rollout/ppo/*` on the slime backend: our rollout-data hook between slime's own GAE and slime's own log.

slime_ppo_spread_probe.py runs, on two data-parallel CPU ranks under Megatron's parallel state, slime v0.3.1's
`compute_advantages_and_returns` (PPO: GAE from the critic's values, optional whitening across the
ranks), then `shopsimrl.slime_metrics.add_ppo_spread_metrics` loaded by slime's `load_function`, then
slime's `log_rollout_data`, and records what slime hands its W&B sink. The expected numbers come
from numpy by hand (GAE, whitening and the pooled statistics of docs/metrics.md, "PPO"), not from
our code. The ranks hold different parts of the rollout on purpose: an average of per-rank numbers
would miss by far more than the tolerances.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from slime_source import requires_slime

from shopsimrl.metrics import names as m
from shopsimrl.metrics.ppo_spread import EXPLAINED_VARIANCE_MIN_RETURNS_STD
from shopsimrl.slime_metrics import add_ppo_spread_metrics

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("slime_ppo_spread_probe.py")
HOOK = "shopsimrl.slime_metrics.add_ppo_spread_metrics"  # what the launcher passes (tests/ops/test_slime_ppo.py)
SPREAD_KEYS = (m.PPO_VALUES_STD.name, m.PPO_RETURNS_STD.name, m.PPO_ADVANTAGES_STD.name)
# slime's GAE and whitening run in float32 over <= 6 tokens of magnitude <= 3; numpy in float64:
# a few float32 ulps (~1e-7 each) apart in each token, so the pooled statistics agree to 1e-5.
FLOAT32_VS_FLOAT64 = 1e-5
# The same float32 tokens summed in another order (ranks, then ranks' sums): float64 rounding only.
SUMMATION_ORDER = 1e-12

# Rank 0: low values, rank 1: high values and a masked-out token each (loss mask 0: not counted).
RANKS = [
    {"values": [[0.1, 0.2, 0.3], [0.5, -0.2], [0.0, 0.4, 0.4, 0.1, 0.9]],
     "rewards": [1.0, 0.0, 0.25], "loss_masks": [[1, 1, 0], [1, 1], [0, 1, 1, 1, 1]]},
    {"values": [[2.0, 2.5, 2.1, 1.9], [1.5, 3.0, 2.2, 2.8, 2.6, 1.1]],
     "rewards": [0.5, 1.0], "loss_masks": [[1, 0, 1, 1], [1, 1, 1, 1, 1, 1]]},
]  # fmt: skip


def _run_probe(tmp_path: Path, ranks: list[dict], **settings: object) -> tuple[dict, list[dict]]:
    # The probe's ranks run Megatron's own parallel state, not a stand-in of it.
    pytest.importorskip("megatron.core", reason="megatron-core is not installed (make setup installs it)")
    spec = tmp_path / "spec.json"
    out = tmp_path / "out"
    out.mkdir()
    spec.write_text(json.dumps({"hook": HOOK, "rollout_id": 3, "ranks": ranks, **settings}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    run = subprocess.run([sys.executable, str(PROBE), str(spec), str(out)], capture_output=True, text=True,
                         timeout=300, check=False, env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    (row,) = json.loads((out / "logged.json").read_text())  # slime's one rollout log call
    dumps = [json.loads((out / f"rank{r}.json").read_text()) for r in range(len(ranks))]
    return row, dumps


def _gae(values: list[float], reward: float, gamma: float, lambd: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE by hand: reward at the last response token, V after the last token = 0."""
    v = np.asarray(values, dtype=np.float64)
    advantages = np.zeros_like(v)
    last = 0.0
    for t in reversed(range(len(v))):
        next_value = v[t + 1] if t + 1 < len(v) else 0.0
        delta = (reward if t == len(v) - 1 else 0.0) + gamma * next_value - v[t]
        last = delta + gamma * lambd * last
        advantages[t] = last
    return advantages, advantages + v


def _pooled(values: np.ndarray, returns: np.ndarray, advantages: np.ndarray) -> dict[str, float]:
    """docs/metrics.md, "PPO": population std over the loss-masked tokens; EV = 1 - Var(R - V) / Var(R)."""
    out = {
        m.PPO_VALUES_STD.name: float(np.std(values)),
        m.PPO_RETURNS_STD.name: float(np.std(returns)),
        m.PPO_ADVANTAGES_STD.name: float(np.std(advantages)),
    }
    out[m.PPO_EXPLAINED_VARIANCE.name] = 1.0 - float(np.var(returns - values)) / float(np.var(returns))
    return out


def _by_hand(ranks: list[dict], gamma: float, lambd: float, normalize: bool) -> dict[str, float]:
    samples = [sample for rank in ranks
               for sample in zip(rank["values"], rank["rewards"], rank["loss_masks"], strict=True)]  # fmt: skip
    keep = np.concatenate([np.asarray(mask, dtype=bool) for _, _, mask in samples])
    values = np.concatenate([np.asarray(v, dtype=np.float64) for v, _, _ in samples])
    gae = [_gae(v, r, gamma, lambd) for v, r, _ in samples]
    advantages = np.concatenate([a for a, _ in gae])
    returns = np.concatenate([ret for _, ret in gae])
    if normalize:  # slime: whitened over every rank's loss-masked tokens, unbiased variance, eps 1e-8
        masked = advantages[keep]
        advantages = (advantages - masked.mean()) / math.sqrt(masked.var(ddof=1) + 1e-8)
    return _pooled(values[keep], returns[keep], advantages[keep])


def _from_slimes_tensors(dumps: list[dict]) -> dict[str, float]:
    """The pooled statistics of the tensors slime's ranks held after the hook, gathered in one place."""
    flat = {k: np.concatenate([np.asarray(t, dtype=np.float64) for d in dumps for t in d[k]])
            for k in ("values", "returns", "advantages", "loss_masks")}  # fmt: skip
    keep = flat["loss_masks"].astype(bool)
    return _pooled(flat["values"][keep], flat["returns"][keep], flat["advantages"][keep])


@requires_slime
@pytest.mark.parametrize(
    ("gamma", "lambd", "normalize"), [(1.0, 0.95, False), (0.99, 0.9, True)], ids=["raw", "normalized"]
)
def test_spreads_join_slimes_rollout_row_reduced_over_the_ranks(tmp_path, gamma, lambd, normalize) -> None:
    row, dumps = _run_probe(tmp_path, RANKS, gamma=gamma, lambd=lambd, normalize_advantages=normalize)
    # one row: slime's own rollout/values and ours, at slime's rollout/step for rollout 3
    assert row[m.ROLLOUT_STEP.name] == 3 and m.ROLLOUT_VALUES.name in row and m.ROLLOUT_RETURNS.name in row
    expected = _by_hand(RANKS, gamma, lambd, normalize)
    assert set(expected) <= set(row)
    for key, value in expected.items():
        assert row[key] == pytest.approx(value, abs=FLOAT32_VS_FLOAT64), key
    exact = _from_slimes_tensors(dumps)
    for key, value in exact.items():
        assert row[key] == pytest.approx(value, abs=SUMMATION_ORDER), key
    # what averaging each rank's own statistic would have logged: far off
    per_rank = [_from_slimes_tensors([d]) for d in dumps]
    assert abs(np.mean([s[m.PPO_VALUES_STD.name] for s in per_rank]) - exact[m.PPO_VALUES_STD.name]) > 0.5
    if normalize:  # whitened: population std of the whitened tokens = sqrt((n-1)/n), n = 17 masked tokens
        assert row[m.PPO_ADVANTAGES_STD.name] == pytest.approx(math.sqrt(16 / 17), abs=FLOAT32_VS_FLOAT64)


@requires_slime
def test_equal_rewards_leave_explained_variance_out(tmp_path) -> None:
    """slime's float32 GAE leaves returns that should all be 1.0 a few ulps apart: no spread to explain."""
    rng = np.random.default_rng(0)
    ranks = [{"values": [rng.normal(size=n).tolist()], "rewards": [1.0], "loss_masks": [[1] * n]}
             for n in (700, 900)]  # fmt: skip
    row, dumps = _run_probe(tmp_path, ranks, gamma=1.0, lambd=1.0, normalize_advantages=False)
    naive = _from_slimes_tensors(dumps)
    assert 0 < naive[m.PPO_RETURNS_STD.name] < 1e-5  # float32 rounding of 1.0, not zero
    assert naive[m.PPO_EXPLAINED_VARIANCE.name] < -1e6  # what dividing by that variance would report
    assert row[m.PPO_RETURNS_STD.name] == pytest.approx(naive[m.PPO_RETURNS_STD.name], abs=SUMMATION_ORDER)
    assert row[m.PPO_RETURNS_STD.name] < EXPLAINED_VARIANCE_MIN_RETURNS_STD
    assert m.PPO_EXPLAINED_VARIANCE.name not in row
    assert row[m.PPO_VALUES_STD.name] == pytest.approx(naive[m.PPO_VALUES_STD.name], abs=SUMMATION_ORDER)


def test_the_hook_refuses_a_run_without_a_critic() -> None:
    with pytest.raises(ValueError, match=r"needs --advantage-estimator ppo, got 'grpo': without a critic"):
        add_ppo_spread_metrics(SimpleNamespace(advantage_estimator="grpo"), 0, {})

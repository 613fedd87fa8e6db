"""`ppo_spreads` alone: the explained-variance floor, masking, and its errors (its reduction over slime's
data-parallel ranks runs in tests/contract/test_ppo_spreads_through_slime.py)."""

from __future__ import annotations

import math

import pytest
import torch

from shopsimrl.metrics import names as m
from shopsimrl.metrics.ppo_spread import EXPLAINED_VARIANCE_MIN_RETURNS_STD, ppo_spreads


def _returns_with_std(std: float) -> list[torch.Tensor]:
    return [torch.tensor([1.0 - std, 1.0 + std], dtype=torch.float64)]  # population std = std


@pytest.mark.parametrize(("std", "reported"), [(0.5 * EXPLAINED_VARIANCE_MIN_RETURNS_STD, False),
                                                (2 * EXPLAINED_VARIANCE_MIN_RETURNS_STD, True)])  # fmt: skip
def test_explained_variance_only_above_the_returns_std_floor(std: float, reported: bool) -> None:
    returns = _returns_with_std(std)
    values = [torch.tensor([1.0, 1.0], dtype=torch.float64)]  # the returns' mean: explains nothing
    out = ppo_spreads(values, returns, returns, [torch.ones(2)])
    assert out[m.PPO_RETURNS_STD.name] == pytest.approx(std, rel=1e-9)  # float64 arithmetic on 2 tokens
    assert (m.PPO_EXPLAINED_VARIANCE.name in out) is reported
    if reported:
        assert out[m.PPO_EXPLAINED_VARIANCE.name] == pytest.approx(0.0, abs=1e-9)


def test_only_loss_masked_tokens_count() -> None:
    values = [torch.tensor([0.0, 100.0]), torch.tensor([2.0])]
    masks = [torch.tensor([1, 0]), torch.tensor([1])]
    out = ppo_spreads(values, values, values, masks)
    assert out[m.PPO_VALUES_STD.name] == pytest.approx(1.0, abs=1e-12)  # std of 0 and 2; 100 is masked out
    assert out[m.PPO_EXPLAINED_VARIANCE.name] == 1.0
    assert ppo_spreads(values, values, values, [torch.zeros(2), torch.zeros(1)]) == {}


def test_mismatched_shapes_are_named() -> None:
    x = [torch.zeros(3)]
    with pytest.raises(ValueError, match=r"sample 0: returns has shape \(2,\), its loss mask \(3,\)"):
        ppo_spreads(x, [torch.zeros(2)], x, [torch.ones(3)])
    with pytest.raises(ValueError, match=r"2 loss masks but sample counts"):
        ppo_spreads(x, x, x, [torch.ones(3), torch.ones(3)])
    assert math.isfinite(ppo_spreads(x, x, x, [torch.ones(3)])[m.PPO_VALUES_STD.name])

"""The local GRPO update against slime's own loss functions (slime/utils/ppo_utils.py) on the same tensors.

test_grpo.py checks our arithmetic against hand-written loops; this file checks that those loops
mean what slime means: per-token log-probs and entropy against `calculate_log_probs_and_entropy`,
the clipped policy loss and clip fraction against `compute_policy_loss`, and every KL estimator
against `compute_approx_kl`. slime reduces with its own `sum_of_sample_mean`, which needs Megatron's
batch plumbing; we apply that reducer by hand here (one masked mean per trajectory, averaged).
"""

from __future__ import annotations

import pytest
import torch
from slime_source import requires_slime

from shopsimrl.local.grpo import (
    GrpoConfig,
    KlLossType,
    StepLossInputs,
    TrainItem,
    approx_kl,
    policy_loss,
    score_responses,
)
from shopsimrl.models import tiny_model, tiny_tokenizer

pytestmark = requires_slime

# float32 log-softmax over a ~300-token vocabulary: values of magnitude < 10, a few ulps apart
# between two kernels (Intel/AMD, batched/unbatched).
LOGPROB_TOL = 1e-5


def _item(tokens: list[int], response_length: int, key: str, adv: float = 0.5) -> TrainItem:
    return TrainItem(tokens=tokens, response_length=response_length, loss_mask=[1] * response_length,
                     advantage=adv, rollout_key=key)


def test_log_probs_and_entropy_equal_slimes_calculation() -> None:
    from slime.utils.ppo_utils import calculate_log_probs_and_entropy

    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=5)
    items = [_item(list(range(30, 44)), 5, "a"), _item(list(range(70, 79)), 3, "b")]
    temperature = 0.8
    with torch.no_grad():
        ours = score_responses(model, items, [0, 1], temperature=temperature, with_entropy=True)
        for row, item in enumerate(items):
            n, r = len(item.tokens), item.response_length
            logits = model(input_ids=torch.tensor([item.tokens])).logits[0, n - r - 1 : n - 1] / temperature
            targets = torch.tensor(item.tokens[n - r :])
            log_prob, entropy = calculate_log_probs_and_entropy(logits, targets, None, with_entropy=True)
            torch.testing.assert_close(ours.log_probs[row], log_prob.reshape(-1), atol=LOGPROB_TOL, rtol=0)
            torch.testing.assert_close(ours.entropy[row], entropy.reshape(-1), atol=LOGPROB_TOL, rtol=0)


def _random_step(seed: int) -> StepLossInputs:
    g = torch.Generator().manual_seed(seed)
    lengths, keys = [3, 5, 4], ["a", "a", "b"]  # trajectory "a" is split into two segments
    masks = [torch.tensor([1.0, 1.0, 0.0]), torch.ones(5), torch.tensor([1.0, 0.0, 1.0, 1.0])]
    sums = {k: sum(float(m.sum()) for m, kk in zip(masks, keys, strict=True) if kk == k) for k in set(keys)}
    return StepLossInputs(
        log_probs=[-torch.rand(n, generator=g, dtype=torch.float64) * 3 for n in lengths],
        old_log_probs=[-torch.rand(n, generator=g, dtype=torch.float64) * 3 for n in lengths],
        advantages=[0.9, 0.9, -1.3],
        loss_masks=masks,
        rollout_mask_sums=[sums[k] for k in keys],
        num_rollouts=2,
        entropy=[torch.rand(n, generator=g, dtype=torch.float64) for n in lengths],
        ref_log_probs=[-torch.rand(n, generator=g, dtype=torch.float64) * 3 for n in lengths],
    )


def _sum_of_sample_mean(per_token: list[torch.Tensor], inputs: StepLossInputs) -> float:
    total = sum(float((v * m).sum()) / s for v, m, s in
                zip(per_token, inputs.loss_masks, inputs.rollout_mask_sums, strict=True))
    return total / inputs.num_rollouts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_policy_loss_and_clipfrac_equal_slimes(seed: int) -> None:
    from slime.utils.ppo_utils import compute_approx_kl, compute_policy_loss

    config = GrpoConfig(eps_clip=0.2, eps_clip_high=0.28, entropy_coef=0.01, use_kl_loss=True, kl_loss_coef=0.05)
    inputs = _random_step(seed)
    loss, metrics = policy_loss(inputs, config)

    pg, clip, kl = [], [], []
    for new, old, adv, ref in zip(inputs.log_probs, inputs.old_log_probs, inputs.advantages,
                                  inputs.ref_log_probs, strict=True):
        ppo_kl = old - new  # slime: ppo_kl = old_log_probs - log_probs
        losses, clipfrac = compute_policy_loss(ppo_kl, torch.full_like(new, adv), config.eps_clip,
                                               config.eps_clip_high)
        pg.append(losses)
        clip.append(clipfrac)
        kl.append(compute_approx_kl(new, ref, kl_loss_type="low_var_kl").double())
    expected_pg = _sum_of_sample_mean(pg, inputs)
    expected_kl = _sum_of_sample_mean(kl, inputs)
    expected_entropy = _sum_of_sample_mean(inputs.entropy, inputs)
    # slime's KL is computed in float32 (`.float()`); ours keeps float64 inputs: float32 rounding only
    assert metrics["train/pg_loss"] == pytest.approx(expected_pg, abs=1e-12)
    # the clip indicator is float32 in both (`torch.gt(...).float()`): float32 accumulation only
    assert metrics["train/pg_clipfrac"] == pytest.approx(_sum_of_sample_mean(clip, inputs), abs=1e-6)
    assert metrics["train/kl_loss"] == pytest.approx(expected_kl, abs=1e-6)
    expected_loss = expected_pg - config.entropy_coef * expected_entropy + config.kl_loss_coef * expected_kl
    assert float(loss) == pytest.approx(expected_loss, abs=1e-6)


@pytest.mark.parametrize("kl_type", list(KlLossType))
def test_kl_estimators_equal_slimes(kl_type: KlLossType) -> None:
    from slime.utils.ppo_utils import compute_approx_kl

    g = torch.Generator().manual_seed(7)
    new = -torch.rand(64, generator=g) * 12  # wide enough that low_var_kl's clamp at 10 is reached
    ref = -torch.rand(64, generator=g) * 12
    theirs = compute_approx_kl(new, ref, kl_loss_type=kl_type.value)
    torch.testing.assert_close(approx_kl(new, ref, kl_type), theirs, atol=1e-6, rtol=1e-6)
    if kl_type is KlLossType.LOW_VAR_KL:
        assert float(theirs.max()) == 10.0  # the clamp was exercised

"""PPO's arithmetic: GAE against slime's own `vanilla_gae`/`chunked_gae`, the value loss and the
statistics against hand computations, per-token advantages in the policy loss."""

from __future__ import annotations

import math

import pytest
import torch
from slime_source import requires_slime

from shopsimrl.local.critic import ValueHead, value_loss
from shopsimrl.local.gae import gae, masked_whiten, rollout_statistics
from shopsimrl.local.grpo import GrpoConfig, StepLossInputs, policy_loss
from shopsimrl.metrics import names as m

# float32 sums over ~40 tokens of values of magnitude ~1: a few ulps of 1
FLOAT32_TOL = 1e-5


@requires_slime
@pytest.mark.parametrize(("gamma", "lambd"), [(1.0, 1.0), (0.9, 0.8), (0.99, 0.0)])
def test_gae_equals_slimes_vanilla_and_chunked_gae(gamma: float, lambd: float) -> None:
    from slime.utils.ppo_utils import chunked_gae, vanilla_gae

    generator = torch.Generator().manual_seed(1)
    lengths, rewards = [37, 5, 1], [1.0, 0.25, 0.0]
    values = [torch.randn(n, generator=generator) for n in lengths]
    ours = [gae(v, r, gamma, lambd) for v, r in zip(values, rewards, strict=True)]
    # slime's batch: padded [B, T] values and token rewards with the reward at the last response token
    width = max(lengths)
    padded_values = torch.zeros(len(lengths), width)
    padded_rewards = torch.zeros(len(lengths), width)
    for row, (v, r) in enumerate(zip(values, rewards, strict=True)):
        padded_values[row, : len(v)] = v
        padded_rewards[row, len(v) - 1] = r
    for slime_gae in (vanilla_gae, chunked_gae):
        # zero padding after a shorter row has zero deltas, so its own positions are unaffected (slime slices them)
        advantages, returns = slime_gae(padded_rewards, padded_values, gamma, lambd)
        for row, (adv, ret) in enumerate(ours):
            n = lengths[row]
            assert torch.allclose(adv, advantages[row, :n], atol=FLOAT32_TOL), slime_gae.__name__
            assert torch.allclose(ret, returns[row, :n], atol=FLOAT32_TOL), slime_gae.__name__


def test_gae_with_gamma_and_lambda_one_returns_the_reward_at_every_token() -> None:
    values = torch.tensor([0.3, -0.2, 0.7])
    advantages, returns = gae(values, 0.5, 1.0, 1.0)
    assert returns.tolist() == [0.5, 0.5, 0.5]  # exact: the recursion runs in float64
    assert torch.allclose(advantages, torch.tensor([0.2, 0.7, -0.2]), atol=1e-7)


def test_gae_by_hand_with_discount() -> None:
    # T=2, gamma=0.5, lambd=0.5, reward 1 at t=1: delta1 = 1 - v1, delta0 = 0.5 v1 - v0,
    # A1 = delta1, A0 = delta0 + 0.25 A1.
    v0, v1 = 0.2, 0.4
    advantages, returns = gae(torch.tensor([v0, v1]), 1.0, 0.5, 0.5)
    a1 = 1 - v1
    a0 = 0.5 * v1 - v0 + 0.25 * a1
    assert advantages.tolist() == pytest.approx([a0, a1], abs=1e-7)
    assert returns.tolist() == pytest.approx([a0 + v0, a1 + v1], abs=1e-7)


def test_masked_whiten_uses_the_masked_tokens_bessel_corrected() -> None:
    advantages = [torch.tensor([1.0, 2.0, 100.0]), torch.tensor([3.0])]
    masks = [torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1.0])]
    out = masked_whiten(advantages, masks)
    mean, std = 2.0, 1.0  # of 1, 2, 3 with n - 1
    assert out[0].tolist() == pytest.approx([(1 - mean) / std, 0.0, (100 - mean) / std], rel=1e-6)
    assert out[1].tolist() == pytest.approx([1.0], rel=1e-6)
    with pytest.raises(ValueError, match="no loss-masked token"):
        masked_whiten(advantages, [torch.zeros(3), torch.zeros(1)])


def test_value_loss_clips_like_slime_and_reduces_per_trajectory() -> None:
    # Two samples of two trajectories; value_clip 0.2.
    values = [torch.tensor([0.5, 0.0]), torch.tensor([1.0])]
    old = [torch.tensor([0.0, 0.0]), torch.tensor([0.9])]
    returns = [torch.tensor([1.0, 1.0]), torch.tensor([0.0])]
    masks = [torch.tensor([1.0, 1.0]), torch.tensor([1.0])]
    loss, metrics = value_loss(values, old, returns, masks, [2.0, 1.0], 2, 0.2)
    # token 1: v=0.5 moved 0.5 > 0.2 -> clipped 0.2: max((0.2-1)^2, (0.5-1)^2) = 0.64 (clipped larger)
    # token 2: v=0 unmoved: 1.0.  trajectory a: (0.64 + 1.0) / 2 = 0.82
    # trajectory b: v=1.0 moved 0.1 (not clipped): 1.0
    assert float(loss) == pytest.approx((0.82 + 1.0) / 2, abs=1e-6)
    assert metrics[m.TRAIN_CRITIC_VALUE_LOSS.name] == pytest.approx(0.91, abs=1e-6)
    assert metrics[m.TRAIN_CRITIC_VALUE_CLIPFRAC.name] == pytest.approx((0.5 + 0.0) / 2, abs=1e-7)


def test_value_head_is_deterministic_and_trains() -> None:
    features = torch.randn(6, 16, generator=torch.Generator().manual_seed(0))
    a, b = ValueHead(16, seed=3), ValueHead(16, seed=3)
    assert torch.equal(a(features), b(features))
    assert not torch.equal(a(features), ValueHead(16, seed=4)(features))
    assert a(features).shape == (6,)


def test_rollout_statistics_and_explained_variance() -> None:
    masks = [torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1.0])]
    returns = [torch.tensor([1.0, 1.0, 9.0]), torch.tensor([0.0])]
    sums, n = [2.0, 1.0], 2
    perfect = rollout_statistics(returns, returns, [torch.zeros(3), torch.zeros(1)], masks, sums, n)
    assert perfect[m.PPO_EXPLAINED_VARIANCE.name] == 1.0
    # values at the mean of the masked returns (2/3): explained variance 0
    mean = [torch.full((3,), 2 / 3), torch.full((1,), 2 / 3)]
    flat = rollout_statistics(mean, returns, [r - v for r, v in zip(returns, mean, strict=True)], masks, sums, n)
    assert flat[m.PPO_EXPLAINED_VARIANCE.name] == pytest.approx(0.0, abs=1e-6)
    assert flat[m.PPO_RETURNS_STD.name] == pytest.approx(math.sqrt(2 / 9), abs=1e-6)  # of 1, 1, 0
    assert flat[m.PPO_VALUES_STD.name] == pytest.approx(0.0, abs=1e-6)
    # slime's means: each trajectory's masked token mean, averaged: returns (1 + 0) / 2
    assert flat[m.ROLLOUT_RETURNS.name] == pytest.approx(0.5, abs=1e-6)
    # worse than the mean: negative
    bad = [torch.tensor([0.0, 0.0, 0.0]), torch.tensor([1.0])]
    worse = rollout_statistics(bad, returns, returns, masks, sums, n)
    assert worse[m.PPO_EXPLAINED_VARIANCE.name] < 0
    # constant returns: explained variance undefined, absent (never a made-up number)
    same = [torch.tensor([1.0, 1.0, 1.0]), torch.tensor([1.0])]
    assert m.PPO_EXPLAINED_VARIANCE.name not in rollout_statistics(bad, same, same, masks, sums, n)


def test_policy_loss_takes_per_token_advantages() -> None:
    # ratio 1 everywhere: pg_loss = mean over trajectories of the masked token mean of -A_t.
    log_probs = [torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-0.3])]
    inputs = StepLossInputs(
        log_probs=log_probs,
        old_log_probs=[lp.clone() for lp in log_probs],
        advantages=[torch.tensor([1.0, -3.0, 7.0]), torch.tensor([0.5])],
        loss_masks=[torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1.0])],
        rollout_mask_sums=[2.0, 1.0],
        num_rollouts=2,
    )
    _, metrics = policy_loss(inputs, GrpoConfig())
    assert metrics[m.TRAIN_PG_LOSS.name] == pytest.approx(((-1.0 + 3.0) / 2 + -0.5) / 2, abs=1e-7)


def test_the_critic_learns_the_returns_of_a_fixed_rollout() -> None:
    """Critic-only rollouts on the same samples (features fixed: the actor never steps): the value loss
    falls and the explained variance, negative or zero at the start, turns clearly positive. It stays
    below 1: the first response token of every sample is predicted from the same prompt position, whose
    features cannot tell the samples apart."""
    from shopsimrl.local.grpo import GrpoTrainer, TrainItem
    from shopsimrl.local.ppo import PpoConfig, PpoTrainer
    from shopsimrl.models import tiny_model, tiny_tokenizer

    torch.manual_seed(0)
    model = tiny_model(tiny_tokenizer(), seed=1)
    actor = GrpoTrainer(model, torch.optim.AdamW(model.parameters(), lr=1e-3), GrpoConfig())
    critic = ValueHead(int(model.config.hidden_size), seed=0)
    trainer = PpoTrainer(actor, critic, torch.optim.AdamW(critic.parameters(), lr=3e-3),
                         PpoConfig(num_critic_only_steps=10_000))  # fmt: skip
    # two prompts whose responses differ; reward 1 for one kind, 0 for the other
    items = [
        TrainItem(tokens=[5, 6, 7, *([30 + k] * 6)], response_length=6, loss_mask=[1] * 6,
                  advantage=float(k % 2), rollout_key=k)  # fmt: skip
        for k in range(4)
    ]
    first = trainer.train_rollout(items, 0, global_batch_size=2)
    for rollout_id in range(1, 16):  # measured: loss 0.99 -> 0.10 and EV -0.02 -> 0.80 by rollout 10
        last = trainer.train_rollout(items, rollout_id, global_batch_size=2)
    assert not first.step_metrics and not last.step_metrics  # critic-only: the actor never stepped
    loss = lambda result: sum(r[m.TRAIN_CRITIC_VALUE_LOSS.name] for r in result.critic_step_metrics)  # noqa: E731
    assert loss(last) < 0.2 * loss(first)
    assert first.rollout_metrics[m.PPO_EXPLAINED_VARIANCE.name] < 0.1
    assert last.rollout_metrics[m.PPO_EXPLAINED_VARIANCE.name] > 0.5

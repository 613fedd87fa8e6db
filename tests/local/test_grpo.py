"""The GRPO update against slow, obvious reference computations (plain Python loops over floats)."""

from __future__ import annotations

import math

import pytest
import torch

from shopsimrl.local.grpo import (
    GrpoConfig,
    GrpoTrainer,
    KlLossType,
    StepLossInputs,
    TrainItem,
    build_step_schedule,
    policy_loss,
    rollout_mask_sums,
    score_responses,
)
from shopsimrl.models import tiny_model, tiny_tokenizer

# A hand-built step: trajectory "a" is split into two segments (2 + 3 trained tokens), trajectory "b"
# is one segment with a masked (tool-observation) token; the advantages have both signs.
OLD = [[-1.0, -2.0], [-0.5, -1.5, -0.7], [-0.2, -3.0, -1.1, -0.9]]
NEW = [[-0.6, -2.5], [-0.5, -1.0, -0.9], [-0.4, -2.0, -1.3, -0.1]]
MASKS = [[1, 1], [1, 1, 1], [1, 0, 1, 1]]
ADVANTAGES = [0.8, 0.8, -1.2]
ROLLOUT = [[-1.1, -2.0], [-0.4, -1.5, -0.7], [-0.2, 0.0, -1.0, -0.9]]
REF = [[-0.9, -2.2], [-0.6, -1.2, -0.8], [-0.3, -2.5, -1.2, -0.4]]
ENTROPY = [[1.0, 2.0], [0.5, 0.25, 1.5], [3.0, 9.0, 1.0, 2.0]]
KEYS = ["a", "a", "b"]
FLOAT32_LOGPROB_ROUNDING = 1e-6  # a few ulps of a float32 log-prob of magnitude ~10


def _reference(config: GrpoConfig) -> dict[str, float]:
    """slime's definitions, written out token by token."""
    mask_sum = {}
    for key, mask in zip(KEYS, MASKS, strict=True):
        mask_sum[key] = mask_sum.get(key, 0) + sum(mask)
    num_rollouts = len(set(KEYS))
    sums = {"pg": 0.0, "clip": 0.0, "kl": 0.0, "ent": 0.0, "ref": 0.0, "diff": 0.0}
    for s in range(len(OLD)):
        denom = mask_sum[KEYS[s]]
        for t in range(len(OLD[s])):
            if not MASKS[s][t]:
                continue
            ratio = math.exp(NEW[s][t] - OLD[s][t])
            clipped_ratio = min(max(ratio, 1 - config.eps_clip), 1 + config.eps_clip_high)
            a = ADVANTAGES[s]
            loss1, loss2 = -ratio * a, -clipped_ratio * a
            sums["pg"] += max(loss1, loss2) / denom
            sums["clip"] += (1.0 if loss2 > loss1 else 0.0) / denom
            sums["kl"] += (OLD[s][t] - NEW[s][t]) / denom
            sums["ent"] += ENTROPY[s][t] / denom
            x = REF[s][t] - NEW[s][t]  # low_var_kl: exp(ref - new) - 1 - (ref - new), clamped
            sums["ref"] += min(max(math.exp(x) - 1 - x, -10.0), 10.0) / denom
            sums["diff"] += abs(OLD[s][t] - ROLLOUT[s][t]) / denom
    out = {key: value / num_rollouts for key, value in sums.items()}
    out["loss"] = out["pg"] - config.entropy_coef * out["ent"] + config.kl_loss_coef * out["ref"]
    return out


def _inputs(indices: list[int], *, new: list[list[float]] | None = None) -> StepLossInputs:
    t = lambda rows: [torch.tensor(rows[i], dtype=torch.float64) for i in indices]  # noqa: E731
    sums = {"a": 5.0, "b": 3.0}
    return StepLossInputs(
        log_probs=t(new or NEW),
        old_log_probs=t(OLD),
        advantages=[ADVANTAGES[i] for i in indices],
        loss_masks=t(MASKS),
        rollout_mask_sums=[sums[KEYS[i]] for i in indices],
        num_rollouts=2,
        entropy=t(ENTROPY),
        ref_log_probs=t(REF),
        rollout_log_probs=t(ROLLOUT),
    )


@pytest.mark.parametrize("entropy_coef,kl_coef", [(0.0, 0.0), (0.01, 0.1)])
def test_policy_loss_equals_the_slow_reference(entropy_coef: float, kl_coef: float) -> None:
    config = GrpoConfig(
        eps_clip=0.2,
        eps_clip_high=0.28,
        entropy_coef=entropy_coef,
        use_kl_loss=True,
        kl_loss_coef=kl_coef,
        kl_loss_type=KlLossType.LOW_VAR_KL,
    )
    loss, metrics = policy_loss(_inputs([0, 1, 2]), config)
    ref = _reference(config)
    assert float(loss) == pytest.approx(ref["loss"], abs=1e-12)
    assert metrics == pytest.approx(
        {
            "train/loss": ref["loss"],
            "train/pg_loss": ref["pg"],
            "train/pg_clipfrac": ref["clip"],
            "train/ppo_kl": ref["kl"],
            "train/entropy_loss": ref["ent"],
            "train/kl_loss": ref["ref"],
            "train/train_rollout_logprob_abs_diff": ref["diff"],
        },
        abs=1e-12,
    )


def test_hand_checked_values_of_the_clip_fraction() -> None:
    # Advantage +0.8 (trajectory a) counts a token as clipped when ratio > 1.28: e^0.4 = 1.49 and
    # e^0.5 = 1.65 are, e^-0.5, e^0, e^-0.2 are not -> 2 of 5. Advantage -1.2 (trajectory b) counts it
    # when ratio < 0.8: e^-0.2 = 0.82 (twice) and e^0.8 are not; the masked token is ignored -> 0 of 3.
    _, metrics = policy_loss(_inputs([0, 1, 2]), GrpoConfig(use_kl_loss=False))
    assert metrics["train/pg_clipfrac"] == pytest.approx((2 / 5 + 0 / 3) / 2, abs=1e-12)
    assert "train/kl_loss" not in metrics


def test_micro_batches_add_up_to_the_step() -> None:
    config = GrpoConfig(entropy_coef=0.01, use_kl_loss=True, kl_loss_coef=0.1)
    whole_loss, whole = policy_loss(_inputs([0, 1, 2]), config)
    part_a, metrics_a = policy_loss(_inputs([0]), config)
    part_b, metrics_b = policy_loss(_inputs([1, 2]), config)
    assert float(part_a + part_b) == pytest.approx(float(whole_loss), abs=1e-12)
    for key, value in whole.items():
        assert metrics_a[key] + metrics_b[key] == pytest.approx(value, abs=1e-12)


def test_a_trajectory_counts_once_however_it_is_segmented() -> None:
    # The same 5 tokens of trajectory "a" as one segment or as two give the same loss.
    config = GrpoConfig()
    seg_loss, _ = policy_loss(_inputs([0, 1]), config)
    joined = StepLossInputs(
        log_probs=[torch.tensor(NEW[0] + NEW[1], dtype=torch.float64)],
        old_log_probs=[torch.tensor(OLD[0] + OLD[1], dtype=torch.float64)],
        advantages=[0.8],
        loss_masks=[torch.ones(5, dtype=torch.float64)],
        rollout_mask_sums=[5.0],
        num_rollouts=2,
    )
    joined_loss, _ = policy_loss(joined, config)
    assert float(seg_loss) == pytest.approx(float(joined_loss), abs=1e-12)


def test_gradient_matches_the_reference_derivative() -> None:
    # d pg_loss / d new_log_prob for an unclipped token = -ratio * a / denom / num_rollouts; 0 if clipped.
    new = [torch.tensor(row, dtype=torch.float64, requires_grad=True) for row in NEW]
    inputs = _inputs([0, 1, 2])
    inputs.log_probs = new
    inputs.entropy = None
    loss, _ = policy_loss(inputs, GrpoConfig())
    loss.backward()
    sums = {"a": 5.0, "b": 3.0}
    for s in range(3):
        for t in range(len(NEW[s])):
            ratio = math.exp(NEW[s][t] - OLD[s][t])
            a = ADVANTAGES[s]
            clipped = (a > 0 and ratio > 1.28) or (a < 0 and ratio < 0.8)
            expected = 0.0 if clipped or not MASKS[s][t] else -ratio * a / sums[KEYS[s]] / 2
            assert float(new[s].grad[t]) == pytest.approx(expected, abs=1e-12), (s, t)


def _item(
    tokens: list[int], response: int, key: str, adv: float = 1.0, mask: list[int] | None = None
) -> TrainItem:
    return TrainItem(
        tokens=tokens,
        response_length=response,
        loss_mask=mask or [1] * response,
        advantage=adv,
        rollout_key=key,
    )


def test_schedule_keeps_segments_together_and_drops_the_tail() -> None:
    items = [_item([1, 2, 3], 1, k) for k in ["t0", "t0", "t1", "t2", "t2", "t2", "t3", "t4"]]
    assert build_step_schedule(items, 2) == [[0, 1, 2], [3, 4, 5, 6]]  # t4 does not fill a step
    assert build_step_schedule(items, 5) == [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert build_step_schedule(items, 6) == []
    assert rollout_mask_sums(
        [_item([1, 2, 3], 2, "x"), _item([1, 2], 1, "x", mask=[0]), _item([4, 5], 1, "y")]
    ) == [2.0, 2.0, 1.0]


def test_train_item_rejects_inconsistent_lengths() -> None:
    with pytest.raises(ValueError, match=r"loss_mask has 1 entries, response_length is 2"):
        TrainItem(tokens=[1, 2, 3], response_length=2, loss_mask=[1], advantage=0.0, rollout_key="a")
    with pytest.raises(ValueError, match=r"response_length=3 must be in \[1, len\(tokens\)=3\)"):
        TrainItem(tokens=[1, 2, 3], response_length=3, loss_mask=[1, 1, 1], advantage=0.0, rollout_key="a")


def test_response_scores_equal_full_logits_of_the_model() -> None:
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=3)
    items = [_item(list(range(40, 52)), 4, "a"), _item(list(range(60, 67)), 2, "b")]
    with torch.no_grad():
        scored = score_responses(model, items, [0, 1], temperature=0.7, with_entropy=True)
        for row, item in enumerate(items):
            logits = model(input_ids=torch.tensor([item.tokens])).logits[0] / 0.7
            n, r = len(item.tokens), item.response_length
            for j in range(r):
                dist = torch.log_softmax(logits[n - r + j - 1], dim=-1)
                assert float(scored.log_probs[row][j]) == pytest.approx(
                    float(dist[item.tokens[n - r + j]]), abs=1e-5
                )
                entropy = -float((dist.exp() * dist).sum())
                assert float(scored.entropy[row][j]) == pytest.approx(entropy, abs=1e-5)


def test_trainer_steps_numbering_and_first_step_kl() -> None:
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=0)
    before = model.model.embed_tokens.weight.detach().clone()
    items = [
        _item([5, 6, 7, 8, 9], 2, "t0", adv=1.0),
        _item([5, 6, 7, 10], 1, "t0", adv=1.0),
        _item([5, 6, 11, 12], 2, "t1", adv=-1.0),
        _item([5, 6, 13, 14, 15], 3, "t2", adv=0.5),
        _item([5, 6, 16, 17], 2, "t3", adv=-0.5),
    ]
    trainer = GrpoTrainer(model, torch.optim.AdamW(model.parameters(), lr=1e-3), GrpoConfig())
    result = trainer.train_rollout(items, rollout_id=3, global_batch_size=2)
    assert result.num_steps == 2
    assert [s["train/step"] for s in result.step_metrics] == [6, 7]
    assert [s["train/global_batch_size"] for s in result.step_metrics] == [2.0, 2.0]
    # Step 0: the old log-probs come from the same weights, so the KL is 0 up to float32 rounding of
    # log-probs of magnitude ~6 (2^-23 * 6 ~ 7e-7; kernels differ between Intel and AMD, so one run
    # gave 1.19e-07). Step 1: the first update moved the policy, by orders of magnitude more.
    assert abs(result.step_metrics[0]["train/ppo_kl"]) < FLOAT32_LOGPROB_ROUNDING
    assert abs(result.step_metrics[1]["train/ppo_kl"]) > 100 * FLOAT32_LOGPROB_ROUNDING
    assert result.step_metrics[0]["train/grad_norm"] > 0
    assert "train/train_rollout_logprob_abs_diff" not in result.step_metrics[0]
    assert set(result.perf_metrics) == {
        "perf/log_probs_time",
        "perf/actor_train_time",
        "perf/actor_train_tok_per_s",
        "perf/train_time",
        "perf/actor_step_time_mean",
        "perf/actor_step_time_max",
        "perf/actor_micro_batch_time_mean",
    }
    assert not torch.equal(before, model.model.embed_tokens.weight)


def test_one_step_per_rollout_reuses_the_step_log_probs_as_slime_does() -> None:
    # slime v0.3.1 skips the old-log-prob pass when a rollout is one optimizer step and takes the
    # step's own log-probs, detached: the same update as with the pass, one forward cheaper.
    tok = tiny_tokenizer()
    items = [
        _item([5, 6, 7, 8, 9], 2, "t0", adv=1.0),
        _item([5, 6, 10, 11], 1, "t1", adv=-1.0),
    ]
    weights = []
    for reuse in (True, False):
        model = tiny_model(tok, seed=3)
        trainer = GrpoTrainer(model, torch.optim.AdamW(model.parameters(), lr=1e-3),
                              GrpoConfig(reuse_old_log_probs=reuse))
        result = trainer.train_rollout(items, rollout_id=0, global_batch_size=2)
        assert result.num_steps == 1
        assert ("perf/log_probs_time" in result.perf_metrics) is not reuse
        if reuse:
            assert result.step_metrics[0]["train/ppo_kl"] == 0.0  # old and new are one tensor
        weights.append(model.model.embed_tokens.weight.detach().clone())
    # The two paths compute the same log-probs on the same weights; float32 rounding of the
    # separate forward pass (different padding) stays far below 1e-6 in the updated weights.
    assert torch.allclose(weights[0], weights[1], atol=1e-6, rtol=0)


def test_kl_loss_needs_a_reference_model() -> None:
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    with pytest.raises(ValueError, match="use_kl_loss needs a reference model"):
        GrpoTrainer(model, torch.optim.SGD(model.parameters(), lr=0.1), GrpoConfig(use_kl_loss=True))


def test_shared_prompt_prefix_pass_equals_the_padded_pass_values_and_gradients() -> None:
    tok = tiny_tokenizer()
    prompt = list(range(30, 70))  # 40 shared prompt tokens (a group's n samples)
    items = [
        _item(prompt + [5, 6, 7], 3, "a"),
        _item(prompt + [8, 9], 2, "b"),
        _item(prompt + [10, 11, 12, 13, 14], 4, "c"),  # its prompt is 41 tokens: the shared part is 40
    ]
    from shopsimrl.local import grpo

    assert grpo._shared_prompt_prefix(items, [0, 1, 2]) == 40
    positions = grpo._response_positions(items, [0, 1, 2], [0, 1, 2])
    results = []
    for force_padded in (False, True):
        model = tiny_model(tok, seed=5)
        if force_padded:
            hidden = grpo._hidden_padded(model, items, [0, 1, 2], positions, "cpu")
        else:
            hidden = grpo._hidden_with_shared_prefix(model, items, [0, 1, 2], 40, positions, "cpu")
        hidden.pow(2).sum().backward()
        results.append((hidden.detach(), model.model.embed_tokens.weight.grad.clone()))
    (shared, shared_grad), (padded, padded_grad) = results
    assert shared.shape == padded.shape == (9, 64)
    assert torch.allclose(shared, padded, atol=1e-5)
    assert torch.allclose(shared_grad, padded_grad, atol=1e-4)
    model = tiny_model(tok, seed=5)
    with torch.no_grad():
        via_api = score_responses(model, items, [0, 1, 2], temperature=1.0, with_entropy=False)
        for row, item in enumerate(items):
            logits = model(input_ids=torch.tensor([item.tokens])).logits[0]
            n, r = len(item.tokens), item.response_length
            expected = [
                float(torch.log_softmax(logits[n - r + j - 1], -1)[item.tokens[n - r + j]]) for j in range(r)
            ]
            assert via_api.log_probs[row].tolist() == pytest.approx(expected, abs=1e-5)


def test_scoring_only_the_loss_positions_changes_no_loss_and_no_gradient() -> None:
    """Multi-turn samples: most response tokens are tool observations (loss mask 0). Scoring only the
    mask-1 positions gives the same log-probs and entropy there (0 elsewhere), hence the same step
    loss, metrics and gradients as scoring every response position. Tolerance 1e-6: the temperature
    divides the hidden states instead of the logits, a float-rounding change."""
    tok = tiny_tokenizer()
    items = [
        _item(list(range(40, 60)), 12, "a", adv=0.7, mask=[1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1]),
        _item(list(range(40, 52)) + [90, 91, 92, 93, 94], 9, "b", adv=-1.1, mask=[0, 1, 1, 0, 0, 0, 0, 1, 1]),
    ]
    config = GrpoConfig(entropy_coef=0.01)  # entropy carries gradients too

    def step(loss_positions_only: bool):
        model = tiny_model(tok, seed=3)
        scored = score_responses(
            model, items, [0, 1], temperature=0.7, with_entropy=True, entropy_grad=True,
            loss_positions_only=loss_positions_only,
        )
        masks = [torch.tensor(item.loss_mask, dtype=torch.float32) for item in items]
        loss, metrics = policy_loss(
            StepLossInputs(
                log_probs=scored.log_probs,
                old_log_probs=[(lp.detach() - 0.05 * mask) for lp, mask in zip(scored.log_probs, masks, strict=True)],
                advantages=[item.advantage for item in items],
                loss_masks=masks,
                rollout_mask_sums=[float(sum(item.loss_mask)) for item in items],
                num_rollouts=2,
                entropy=scored.entropy,
            ),
            config,
        )
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return scored, metrics, grads

    full, full_metrics, full_grads = step(False)
    only, only_metrics, only_grads = step(True)
    for item, a, b, ea, eb in zip(items, full.log_probs, only.log_probs, full.entropy, only.entropy, strict=True):
        keep = torch.tensor(item.loss_mask, dtype=torch.bool)
        torch.testing.assert_close(b[keep], a[keep].detach(), atol=1e-6, rtol=0)
        torch.testing.assert_close(eb[keep], ea[keep].detach(), atol=1e-6, rtol=0)
        assert b[~keep].abs().sum() == 0 and eb[~keep].abs().sum() == 0
    assert only_metrics == pytest.approx(full_metrics, abs=1e-6)
    assert len(only_grads) == len(full_grads) > 0
    for a, b in zip(full_grads, only_grads, strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=0)


def _segments(prompt: list[int], turns: list[list[int]], key: str, adv: float) -> list[TrainItem]:
    """A multi-turn trajectory as the driver trains it: segment k = the conversation through turn k."""
    items, tokens = [], list(prompt)
    for turn in turns:
        tokens = tokens + turn
        items.append(_item(list(tokens), len(turn), key, adv=adv))
    return items


def test_a_trajectory_runs_once_and_its_segments_score_and_train_as_if_run_alone() -> None:
    """Turn k's segment is a token prefix of turn k+1's: it is read off the longer pass (one row per
    trajectory), and the log-probs, entropy and gradients are those of scoring every segment on its
    own. Tolerances: float32 rounding of a different batch shape (values ~1e-6, gradients ~1e-5)."""
    from shopsimrl.local import grpo

    tok = tiny_tokenizer()
    prompt = list(range(30, 60))
    items = [
        *_segments(prompt, [[5, 6, 7], [8, 9], [10, 11, 12, 13]], "a", 1.0),
        *_segments(prompt, [[14, 15], [16, 17, 18]], "b", -1.0),
        _item([*prompt, 5, 6, 7], 3, "c", adv=0.5),  # the same tokens as a's first segment, another trajectory
    ]
    rows, row_of = grpo.sequence_rows(items, range(len(items)))
    assert rows == [2, 4, 5] and row_of == [0, 0, 0, 1, 1, 2]
    assert grpo.forward_positions(items, range(len(items))) == 30 + 3 * (39 - 30)

    def scored_and_grad(batches: list[list[int]]) -> tuple[list[list[float]], list[list[float]], torch.Tensor]:
        model = tiny_model(tok, seed=7)
        log_probs: dict[int, torch.Tensor] = {}
        entropy: dict[int, torch.Tensor] = {}
        for batch in batches:
            out = score_responses(model, items, batch, temperature=0.7, with_entropy=True, entropy_grad=True)
            log_probs.update(zip(batch, out.log_probs, strict=True))
            entropy.update(zip(batch, out.entropy, strict=True))
        total = sum((i + 1) * (log_probs[i].sum() + 0.1 * entropy[i].sum()) for i in range(len(items)))
        total.backward()
        return (
            [log_probs[i].tolist() for i in range(len(items))],
            [entropy[i].tolist() for i in range(len(items))],
            model.model.layers[-1].mlp.down_proj.weight.grad.clone(),
        )

    together = scored_and_grad([list(range(len(items)))])
    alone = scored_and_grad([[i] for i in range(len(items))])
    for row in range(len(items)):
        assert together[0][row] == pytest.approx(alone[0][row], abs=1e-5)
        assert together[1][row] == pytest.approx(alone[1][row], abs=1e-5)
    assert torch.allclose(together[2], alone[2], atol=1e-4)


def test_micro_batches_pack_by_the_positions_the_decoder_runs() -> None:
    """Two 3-turn trajectories of one 30-token prompt: 6 samples of up to 39 tokens. Counted as padded
    rows (6 x 39 = 234 positions) a 100-position budget splits them into 3 passes; counted as what runs
    (30 + 2 x 9 = 48) they fit one. A third trajectory with another prompt exceeds the budget."""
    from shopsimrl.local import grpo

    prompt = list(range(30, 60))
    items = [
        *_segments(prompt, [[5, 6, 7], [8, 9], [10, 11, 12, 13]], "a", 1.0),
        *_segments(prompt, [[14, 15], [16, 17, 18], [19, 20, 21, 22]], "b", -1.0),
        *_segments(list(range(100, 130)), [[5, 6], [7, 8]], "c", 1.0),
    ]
    batches = grpo.micro_batches(items, range(len(items)), 100)
    assert batches == [[0, 1, 2, 3, 4, 5], [6, 7]]
    assert grpo.forward_positions(items, batches[0]) == 48
    assert all(grpo.forward_positions(items, b) <= 100 for b in batches)


def test_the_update_reports_each_micro_batch() -> None:
    """An update takes minutes on a CPU: the trainer reports (done, total) after every micro-batch."""
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=0)
    prompt = list(range(30, 60))
    items = [
        *_segments(prompt, [[5, 6, 7], [8, 9]], "a", 1.0),
        *_segments(list(range(100, 130)), [[14, 15], [16, 17, 18]], "b", -1.0),
    ]
    seen: list[tuple[int, int]] = []
    trainer = GrpoTrainer(
        model, torch.optim.SGD(model.parameters(), lr=0.1), GrpoConfig(max_tokens_per_microbatch=40),
        on_micro_batch=lambda done, total: seen.append((done, total)),
    )
    trainer.train_rollout(items, rollout_id=0, global_batch_size=2)
    assert seen == [(1, 2), (2, 2)]  # one trajectory a pass: 35 positions each, 70 together

"""GRPO update of the local backend, with slime's loss, reducer and step schedule.

What slime v0.3.1 does (docs/local_backend.md, "The GRPO update"), reproduced here:

* PPO-clip on per-token ratios `exp(log_p - old_log_p)` with asymmetric bounds `1 - eps_clip` and
  `1 + eps_clip_high`; `old_log_p` is the actor's own log-prob at the start of the rollout's training
  (so `train/ppo_kl` is 0, up to float rounding, on the first optimizer step of a rollout).
* The reducer `sum_of_sample_mean` with `rollout_mask_sums`: every segment's masked sum is divided
  by the loss-mask total of *all segments of its trajectory*, so a trajectory split into several
  samples forms one token-weighted mean and counts once; the step value is then divided by the
  number of trajectories in the step. Every reported loss metric is reduced the same way.
* `loss = pg_loss - entropy_coef * entropy_loss (+ kl_loss_coef * kl_loss with use_kl_loss)`,
  KL to a reference model with slime's estimators (`low_var_kl` = k3 clamped to [-10, 10]).
* Step schedule (`build_dp_schedule`): the segments of one trajectory stay in one step;
  `num_steps = unique trajectories // global_batch_size`; trailing trajectories that do not fill a
  step are dropped. `train/step = rollout_id * num_steps + step_id`.
* `train/grad_norm` is the norm before clipping at `clip_grad`.

Logits are computed only at response positions: the decoder runs over the whole sequence, but the
vocabulary projection (49k wide for SmolLM2) is applied to the response positions alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from shopsimrl.local.config import KlLossType
from shopsimrl.local.lr_warmup import LinearWarmup
from shopsimrl.local.trunk import FrozenTrunk
from shopsimrl.metrics import names as m
from shopsimrl.metrics.resources import StepTimes
from shopsimrl.rollout.generators.precision import compute_precision


@dataclass(frozen=True)
class GrpoConfig:
    """slime's flag names (without dashes); defaults as in slime's own launcher `scripts/run-qwen3-4B.sh` (in
    slime's repository) and in ours, configs/slime/common.env (EPS_CLIP, ENTROPY_COEF, KL_LOSS_COEF)."""

    eps_clip: float = 0.2
    eps_clip_high: float = 0.28
    entropy_coef: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.0
    kl_loss_type: KlLossType = KlLossType.LOW_VAR_KL
    clip_grad: float = 1.0
    rollout_temperature: float = 1.0  # log-probs are taken of softmax(logits / T), as slime's actor does
    max_tokens_per_microbatch: int = 8192  # padded tokens per forward pass (slime: --max-tokens-per-gpu)
    # slime reuses the step's own log-probs as the old ones when a rollout is one optimizer step;
    # False forces the separate pass (as slime's --get-mismatch-metrics does).
    reuse_old_log_probs: bool = True


@dataclass(frozen=True)
class TrainItem:
    """One training sample (one segment): slime's train-data fields for that sample."""

    tokens: Sequence[int]
    response_length: int
    loss_mask: Sequence[int]
    # GRPO: the sample's advantage, the same for every token; PPO (local/ppo.py): one per response token
    advantage: float | Sequence[float]
    rollout_key: Hashable  # the trajectory: every segment of one trajectory has the same key
    rollout_log_probs: Sequence[float] | None = None

    def __post_init__(self) -> None:
        if not 0 < self.response_length < len(self.tokens):
            raise ValueError(
                f"response_length={self.response_length} must be in [1, len(tokens)={len(self.tokens)}): "
                "a training sample needs a prompt token and at least one response token"
            )
        if len(self.loss_mask) != self.response_length:
            raise ValueError(
                f"loss_mask has {len(self.loss_mask)} entries, response_length is {self.response_length}"
            )
        if not isinstance(self.advantage, float | int) and len(self.advantage) != self.response_length:
            raise ValueError(
                f"advantage has {len(self.advantage)} per-token entries, response_length is {self.response_length}"
            )
        if self.rollout_log_probs is not None and len(self.rollout_log_probs) != self.response_length:
            raise ValueError(
                f"rollout_log_probs has {len(self.rollout_log_probs)} entries, "
                f"response_length is {self.response_length}"
            )


@dataclass
class StepLossInputs:
    """Per-sample tensors of the response positions of one optimizer step (or one micro-batch)."""

    log_probs: list[torch.Tensor]
    old_log_probs: list[torch.Tensor]
    advantages: list[float] | list[torch.Tensor]  # per sample, or per token (PPO)
    loss_masks: list[torch.Tensor]
    rollout_mask_sums: list[float]  # loss-mask total of the sample's whole trajectory
    num_rollouts: int  # trajectories in the step: the final divisor
    entropy: list[torch.Tensor] | None = None
    ref_log_probs: list[torch.Tensor] | None = None
    rollout_log_probs: list[torch.Tensor] | None = None


def approx_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, kl_type: KlLossType) -> torch.Tensor:
    """slime's `compute_approx_kl` (Schulman's estimators)."""
    # slime computes in float32 (inputs may be bf16); float64 inputs keep their precision.
    dtype = torch.promote_types(torch.promote_types(log_probs.dtype, ref_log_probs.dtype), torch.float32)
    log_ratio = log_probs.to(dtype) - ref_log_probs.to(dtype)
    if kl_type == KlLossType.K1:
        return log_ratio
    if kl_type == KlLossType.K2:
        return log_ratio**2 / 2.0
    neg = -log_ratio
    kl = neg.exp() - 1 - neg
    if kl_type == KlLossType.LOW_VAR_KL:
        kl = torch.clamp(kl, min=-10, max=10)
    return kl


def policy_loss(inputs: StepLossInputs, config: GrpoConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """The step loss (a differentiable scalar) and slime's `train/*` loss metrics for these samples.

    Over several micro-batches of one step, the losses and the metrics add up to the step's values.
    """

    def reduce(per_token: list[torch.Tensor]) -> torch.Tensor:
        return sum_of_sample_mean(per_token, inputs.loss_masks, inputs.rollout_mask_sums, inputs.num_rollouts)

    ppo_kl = [old - new for old, new in zip(inputs.old_log_probs, inputs.log_probs, strict=True)]
    pg_losses, clipfracs = [], []
    for kl, advantage in zip(ppo_kl, inputs.advantages, strict=True):
        ratio = (-kl).exp()
        unclipped = -ratio * advantage
        clipped = -ratio.clamp(1 - config.eps_clip, 1 + config.eps_clip_high) * advantage
        pg_losses.append(torch.maximum(unclipped, clipped))
        clipfracs.append(torch.gt(clipped, unclipped).float())
    pg_loss = reduce(pg_losses)
    loss = pg_loss
    metrics = {
        m.TRAIN_PG_LOSS.name: float(pg_loss.detach()),
        m.TRAIN_PG_CLIPFRAC.name: float(reduce(clipfracs).detach()),
        m.TRAIN_PPO_KL.name: float(reduce([k.detach() for k in ppo_kl])),
    }
    if inputs.entropy is not None:
        entropy_loss = reduce(inputs.entropy)
        loss = loss - config.entropy_coef * entropy_loss
        metrics[m.TRAIN_ENTROPY_LOSS.name] = float(entropy_loss.detach())
    if config.use_kl_loss:
        if inputs.ref_log_probs is None:
            raise ValueError("use_kl_loss is set but no reference log-probs were given")
        kl_loss = reduce(
            [
                approx_kl(lp, ref, config.kl_loss_type)
                for lp, ref in zip(inputs.log_probs, inputs.ref_log_probs, strict=True)
            ]
        )
        loss = loss + config.kl_loss_coef * kl_loss
        metrics[m.TRAIN_KL_LOSS.name] = float(kl_loss.detach())
    if inputs.rollout_log_probs is not None:
        diffs = [
            (old - ro).abs() for old, ro in zip(inputs.old_log_probs, inputs.rollout_log_probs, strict=True)
        ]
        metrics[m.TRAIN_ROLLOUT_LOGPROB_ABS_DIFF.name] = float(reduce(diffs).detach())
    metrics[m.TRAIN_LOSS.name] = float(loss.detach())
    return loss, metrics


def sum_of_sample_mean(
    per_token: Sequence[torch.Tensor],
    loss_masks: Sequence[torch.Tensor],
    mask_sums: Sequence[float],
    num_rollouts: int,
) -> torch.Tensor:
    """slime's reducer: each sample's masked sum over its trajectory's loss-mask total, summed, / trajectories."""
    total = per_token[0].new_zeros(())
    for values, mask, mask_sum in zip(per_token, loss_masks, mask_sums, strict=True):
        total = total + (values * mask).sum() / max(mask_sum, 1.0)
    return total / num_rollouts


def rollout_mask_sums(items: Sequence[TrainItem]) -> list[float]:
    """For each sample, the loss-mask total of all samples of its trajectory (slime's `rollout_mask_sums`)."""
    totals: dict[Hashable, float] = {}
    for item in items:
        totals[item.rollout_key] = totals.get(item.rollout_key, 0.0) + float(sum(item.loss_mask))
    return [totals[item.rollout_key] for item in items]


def build_step_schedule(items: Sequence[TrainItem], global_batch_size: int) -> list[list[int]]:
    """Sample indices per optimizer step: whole trajectories, `global_batch_size` trajectories a step."""
    if global_batch_size < 1:
        raise ValueError(f"global_batch_size must be >= 1, got {global_batch_size}")
    order: list[Hashable] = []
    members: dict[Hashable, list[int]] = {}
    for index, item in enumerate(items):
        if item.rollout_key not in members:
            order.append(item.rollout_key)
            members[item.rollout_key] = []
        members[item.rollout_key].append(index)
    num_steps = len(order) // global_batch_size
    return [
        [i for key in order[s * global_batch_size : (s + 1) * global_batch_size] for i in members[key]]
        for s in range(num_steps)
    ]


@dataclass
class ScoredResponses:
    log_probs: list[torch.Tensor]
    entropy: list[torch.Tensor] | None
    # final hidden states at every response position (`with_hidden`): the PPO critic's features
    hidden: list[torch.Tensor] | None = None


def score_responses(
    model: Any,
    items: Sequence[TrainItem],
    indices: Sequence[int],
    *,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool = False,
    loss_positions_only: bool = False,
    trunk: FrozenTrunk | None = None,
    compute_dtype: torch.dtype = torch.float32,
    with_hidden: bool = False,
) -> ScoredResponses:
    """Log-probs (and entropy) of the response tokens of `items[indices]`.

    A sample whose tokens begin another sample's of the same trajectory (an earlier turn's segment:
    the later one holds the whole conversation so far) is read off the longer one's pass, so each
    trajectory runs once (`sequence_rows`). Then one padded forward pass, or, when the rows share a
    prompt prefix (the n samples of a group), the prefix once and the remainders on top of its KV
    cache (far fewer tokens through the model).
    The vocabulary projection is applied at response positions only; with `loss_positions_only`, at
    the positions whose loss mask is 1 only, and the others score 0. Every loss and metric of a step
    multiplies by the loss mask, so they are unchanged, while the projection and the softmax over
    ~49k entries skip the tool observations, about half of a multi-turn sample's response (2,332 of
    4,337 response tokens on a demo rollout; docs/local_backend.md).

    With a `trunk` (the model's frozen bottom layers, trunk.py) the frozen layers' hidden states come
    from it, computed once per distinct token prefix, and only the trainable layers run here, in the
    same two shapes: the same values up to float rounding, gradients through the same layers.

    Gradients flow into `log_probs` when grad mode is on; entropy carries gradients only with
    `entropy_grad` (it is a metric unless `entropy_coef > 0`).

    `compute_dtype` bfloat16 runs the layers and the output projection under autocast (float32
    weights, rollout/generators/precision.py); the log-softmax, entropy and everything after it are
    float32 either way.

    `with_hidden` also returns the decoder's final hidden states at every response position (float32,
    detached, before the temperature), one `[response_length, hidden]` tensor per sample.
    """
    device = next(model.parameters()).device
    lengths = [len(items[i].tokens) for i in indices]
    targets, sizes = [], []
    for row, i in enumerate(indices):
        targets.extend(items[i].tokens[lengths[row] - items[i].response_length :])
        sizes.append(items[i].response_length)
    rows, row_of = sequence_rows(items, indices)
    with compute_precision(compute_dtype):
        target_ids, keep, logits, hidden = _response_logits(
            model, items, indices, rows, row_of, targets, temperature, loss_positions_only, trunk, device
        )
    log_dist = torch.log_softmax(logits.float(), dim=-1)
    token_log_probs = _at_response_positions(log_dist.gather(-1, target_ids.unsqueeze(-1)).squeeze(-1), keep)
    entropy = None
    if with_entropy:
        source = log_dist if entropy_grad else log_dist.detach()
        entropy = list(_at_response_positions(-(source.exp() * source).sum(-1), keep).split(sizes))
    states = list(hidden.detach().float().split(sizes)) if with_hidden else None
    return ScoredResponses(list(token_log_probs.split(sizes)), entropy, states)


def _response_logits(
    model: Any,
    items: Sequence[TrainItem],
    indices: Sequence[int],
    rows: list[int],
    row_of: list[int],
    targets: list[int],
    temperature: float,
    loss_positions_only: bool,
    trunk: FrozenTrunk | None,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """`score_responses`' forward: the scored positions' target ids, the kept positions
    (`loss_positions_only`), their logits (in the forward's precision) and the hidden states at every
    response position."""
    positions = _response_positions(items, indices, row_of)
    prefix = _shared_prompt_prefix(items, rows)
    shared = prefix >= MIN_SHARED_PREFIX and len(rows) > 1
    if trunk is not None:
        # A row's last token predicts nothing: its hidden states are not needed (nor, so, recorded by
        # the rollout, which never feeds a turn's last token).
        bottoms = trunk.hidden([items[i].tokens[:-1] for i in rows])
        selected = (
            trunk.top_shared(bottoms, prefix, positions) if shared else trunk.top_padded(bottoms, positions)
        )
    elif shared:
        selected = _hidden_with_shared_prefix(model, items, rows, prefix, positions, device)
    else:
        selected = _hidden_padded(model, items, rows, positions, device)
    target_ids = torch.tensor(targets, device=device)
    keep = None
    every_position = selected
    if loss_positions_only:
        keep = torch.tensor([bool(v) for i in indices for v in items[i].loss_mask], device=device)
        selected, target_ids = selected[keep], target_ids[keep]
    if temperature != 1.0:
        # softmax(W h / T) = softmax(W (h / T)): dividing the hidden states costs 1/85 of the logits
        selected = selected / temperature
    return target_ids, keep, model.get_output_embeddings()(selected), every_position


def _at_response_positions(values: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """`values` of the kept positions spread over all response positions (0 elsewhere; differentiable)."""
    if keep is None:
        return values
    return values.new_zeros(keep.shape).masked_scatter(keep, values)


MIN_SHARED_PREFIX = 16  # below this, one padded pass is as cheap as the two-pass prefix path


def sequence_rows(items: Sequence[TrainItem], indices: Sequence[int]) -> tuple[list[int], list[int]]:
    """The samples the decoder must run (rows) and, for each of `indices`, the row that holds it.

    A causal decoder's hidden state at a position depends on the tokens up to it alone, so a sample
    that is a token prefix of another of its trajectory (turn k's segment inside turn k+1's) has its
    hidden states inside the longer sample's pass: the same values and the same gradients.
    """
    rows: list[int] = []
    row_of: list[int] = []
    for i in indices:
        row = _row_holding(items, rows, i)
        if row is None:
            rows.append(i)
            row = len(rows) - 1
        elif len(items[i].tokens) > len(items[rows[row]].tokens):
            rows[row] = i  # the longer sample holds the shorter one, and every sample it held
        row_of.append(row)
    return rows, row_of


def _row_holding(items: Sequence[TrainItem], rows: Sequence[int], i: int) -> int | None:
    """The row of `i`'s trajectory that `i` begins or that begins `i`, if any."""
    tokens = items[i].tokens
    for row, r in enumerate(rows):
        if items[r].rollout_key != items[i].rollout_key:
            continue
        other = items[r].tokens
        shorter = min(len(tokens), len(other))
        if list(tokens[:shorter]) == list(other[:shorter]):
            return row
    return None


def _response_positions(
    items: Sequence[TrainItem], indices: Sequence[int], row_of: Sequence[int]
) -> list[tuple[int, int]]:
    """(row, position) of every hidden state that predicts a response token, in item order.

    Response token j of a sample of length L and response R sits at L-R+j and is predicted from L-R+j-1;
    a sample held by a longer row has the same positions there.
    """
    out = []
    for row, i in zip(row_of, indices, strict=True):
        length, response = len(items[i].tokens), items[i].response_length
        out.extend((row, pos) for pos in range(length - response - 1, length - 1))
    return out


def _hidden_padded(
    model: Any, items: Sequence[TrainItem], rows: Sequence[int], positions: Sequence[tuple[int, int]], device: Any
) -> torch.Tensor:
    lengths = [len(items[i].tokens) for i in rows]
    input_ids = torch.zeros((len(rows), max(lengths)), dtype=torch.long, device=device)
    attention = torch.zeros_like(input_ids)
    for row, i in enumerate(rows):
        input_ids[row, : lengths[row]] = torch.as_tensor(list(items[i].tokens), dtype=torch.long)
        attention[row, : lengths[row]] = 1
    decoder = getattr(model, model.base_model_prefix)
    hidden = decoder(input_ids=input_ids, attention_mask=attention, use_cache=False).last_hidden_state
    row_ids, cols = zip(*positions, strict=True)
    return hidden[torch.tensor(row_ids, device=device), torch.tensor(cols, device=device)]


def _shared_prompt_prefix(items: Sequence[TrainItem], indices: Sequence[int]) -> int:
    """Length of the token prefix every sample's prompt starts with (n samples of one prompt share it)."""
    first = items[indices[0]].tokens
    limit = min(len(items[i].tokens) - items[i].response_length for i in indices)
    length = 0
    while length < limit and all(items[i].tokens[length] == first[length] for i in indices[1:]):
        length += 1
    return length


def _hidden_with_shared_prefix(
    model: Any,
    items: Sequence[TrainItem],
    indices: Sequence[int],
    prefix: int,
    positions: Sequence[tuple[int, int]],
    device: Any,
) -> torch.Tensor:
    """The decoder runs the shared prompt prefix once and every sample's remainder on top of its cache.

    Same result as the padded pass (up to float rounding): the prefix's keys and values are identical
    for every sample; gradients from all samples flow back into the one prefix computation.
    """
    decoder = getattr(model, model.base_model_prefix)
    head = torch.as_tensor(list(items[indices[0]].tokens[:prefix]), dtype=torch.long, device=device)
    out = decoder(input_ids=head.unsqueeze(0), use_cache=True)
    prefix_hidden = out.last_hidden_state[0]
    cache = out.past_key_values
    cache.batch_repeat_interleave(len(indices))
    rests = [len(items[i].tokens) - prefix for i in indices]
    width = max(rests)
    suffix = torch.zeros((len(indices), width), dtype=torch.long, device=device)
    attention = torch.zeros((len(indices), prefix + width), dtype=torch.long, device=device)
    attention[:, :prefix] = 1
    for row, i in enumerate(indices):
        suffix[row, : rests[row]] = torch.as_tensor(list(items[i].tokens[prefix:]), dtype=torch.long)
        attention[row, prefix : prefix + rests[row]] = 1
    suffix_hidden = decoder(
        input_ids=suffix, attention_mask=attention, past_key_values=cache, use_cache=True
    ).last_hidden_state
    flat = torch.cat([prefix_hidden, suffix_hidden.reshape(-1, suffix_hidden.shape[-1])])
    where = [
        pos if pos < prefix else prefix + row * width + (pos - prefix)
        for row, pos in positions
    ]
    return flat[torch.tensor(where, device=device)]


def micro_batches(items: Sequence[TrainItem], indices: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Consecutive groups of samples whose forward cost stays within `max_tokens` token positions.

    The cost is what `score_responses` runs through the decoder (`forward_positions`): a trajectory's
    earlier segments ride on its longest one, and a prompt shared by the rows runs once. slime's
    `--max-tokens-per-gpu` counts every sample's tokens instead; on the demo's multi-turn rollouts
    (4 growing segments a trajectory, a shared system prompt) the same budget then packs a group's
    trajectories into one or two passes instead of a dozen (bench/bench_microbatch.py).
    """
    batches: list[list[int]] = []
    current: list[int] = []
    for i in indices:
        if current and forward_positions(items, [*current, i]) > max_tokens:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def forward_positions(items: Sequence[TrainItem], indices: Sequence[int]) -> int:
    """Token positions the decoder computes to score `items[indices]` (see `score_responses`)."""
    rows, _ = sequence_rows(items, indices)
    longest = max(len(items[i].tokens) for i in rows)
    prefix = _shared_prompt_prefix(items, rows)
    if len(rows) > 1 and prefix >= MIN_SHARED_PREFIX:
        return prefix + len(rows) * (longest - prefix)
    return len(rows) * longest


@dataclass
class RolloutTrainResult:
    """What one rollout's training produced: one `train/*` dict per optimizer step, one `perf/*` dict."""

    step_metrics: list[dict[str, float]] = field(default_factory=list)
    perf_metrics: dict[str, float] = field(default_factory=dict)
    num_steps: int = 0


class GrpoTrainer:
    """Runs the optimizer steps of one rollout at a time on an in-process model."""

    def __init__(
        self,
        model: Any,
        optimizer: torch.optim.Optimizer,
        config: GrpoConfig,
        ref_model: Any | None = None,
        on_micro_batch: Callable[[int, int], None] | None = None,
        trunk: FrozenTrunk | None = None,
        compute_dtype: torch.dtype = torch.float32,
        lr_schedule: LinearWarmup | None = None,
    ):
        if config.use_kl_loss and ref_model is None:
            raise ValueError("use_kl_loss needs a reference model")
        self.model = model
        self.optimizer = optimizer
        self.config = config
        self.ref_model = ref_model
        self.trunk = trunk  # the policy's frozen bottom layers (trunk.py); never the reference model's
        self.compute_dtype = compute_dtype  # bfloat16: forwards under autocast, float32 weights and optimizer
        self.lr_schedule = lr_schedule  # None: the optimizer's lr as given, every step
        # (done, total) after each micro-batch's backward: an update takes minutes on a CPU
        self.on_micro_batch = on_micro_batch or (lambda _done, _total: None)

    def score_all(
        self, model: Any, items: Sequence[TrainItem], indices: Sequence[int], trunk: FrozenTrunk | None
    ) -> dict[int, torch.Tensor]:
        """Log-probs of `items[indices]` under `model`, without gradients (old or reference log-probs)."""
        out: dict[int, torch.Tensor] = {}
        with torch.no_grad():
            for batch in micro_batches(items, indices, self.config.max_tokens_per_microbatch):
                scored = score_responses(
                    model,
                    items,
                    batch,
                    temperature=self.config.rollout_temperature,
                    with_entropy=False,
                    loss_positions_only=True,
                    trunk=trunk,
                    compute_dtype=self.compute_dtype,
                )
                out.update(zip(batch, scored.log_probs, strict=True))
        return out

    def train_rollout(
        self, items: Sequence[TrainItem], rollout_id: int, global_batch_size: int
    ) -> RolloutTrainResult:
        """slime's `train_actor` for one rollout: old (and ref) log-probs, then the optimizer steps."""
        schedule = build_step_schedule(items, global_batch_size)
        scheduled = [i for step in schedule for i in step]
        result = RolloutTrainResult(num_steps=len(schedule))
        start = time.perf_counter()
        self.model.train()
        # slime v0.3.1 (actor.py, `can_reuse_log_probs_in_loss`): with one optimizer step per rollout,
        # the old policy is the one being stepped, so the loss takes the step's own log-probs,
        # detached, as the old ones and the separate forward pass is skipped (loss.py: `old_log_probs
        # = [log_prob.detach() ...]`). Nothing of slime's other conditions applies locally: no KL
        # reward penalty, no old-actor copy, no routing replay, GRPO's policy loss.
        reuse_old = len(schedule) == 1 and self.config.reuse_old_log_probs
        old = {} if reuse_old else self.score_all(self.model, items, scheduled, self.trunk)
        log_probs_time = time.perf_counter() - start
        ref: dict[int, torch.Tensor] | None = None
        ref_time = 0.0
        if self.config.use_kl_loss:
            ref_start = time.perf_counter()
            ref = self.score_all(self.ref_model, items, scheduled, None)
            ref_time = time.perf_counter() - ref_start
        train_start = time.perf_counter()
        result.step_metrics, times = self.optimizer_steps(items, schedule, old, ref, rollout_id)
        train_time = time.perf_counter() - train_start
        total_tokens = sum(len(items[i].tokens) for i in scheduled)
        result.perf_metrics = {
            m.PERF_ACTOR_TRAIN_TIME.name: train_time,
            m.PERF_ACTOR_TRAIN_TOK_PER_S.name: total_tokens / train_time if train_time > 0 else 0.0,
            m.PERF_TRAIN_TIME.name: time.perf_counter() - start,
            **times.perf_metrics(),
        }
        if not reuse_old:  # no old-log-prob pass ran: the key is absent, never a made-up 0
            result.perf_metrics[m.PERF_LOG_PROBS_TIME.name] = log_probs_time
        if self.config.use_kl_loss:
            result.perf_metrics[m.PERF_REF_LOG_PROBS_TIME.name] = ref_time
        return result

    def optimizer_steps(
        self,
        items: Sequence[TrainItem],
        schedule: list[list[int]],
        old: dict[int, torch.Tensor],
        ref: dict[int, torch.Tensor] | None,
        rollout_id: int,
    ) -> tuple[list[dict[str, float]], StepTimes]:
        """One optimizer step per entry of `schedule`; `old` (and `ref`) log-probs by item index, where
        given (an index without one takes the step's own detached log-probs). One `train/*` dict a step,
        and the steps' and micro-batches' wall times (kept out of the rows: `train/*` is deterministic)."""
        mask_sums = rollout_mask_sums(items)
        rows, times = [], StepTimes()
        for step_id, step in enumerate(schedule):
            row, step_times = self._optimizer_step(items, step, old, ref, mask_sums, rollout_id * len(schedule) + step_id)
            rows.append(row)
            times.extend(step_times)
        return rows, times

    def _optimizer_step(
        self,
        items: Sequence[TrainItem],
        step: list[int],
        old: dict[int, torch.Tensor],
        ref: dict[int, torch.Tensor] | None,
        mask_sums: list[float],
        train_step: int,
    ) -> tuple[dict[str, float], StepTimes]:
        cfg = self.config
        step_start = time.perf_counter()
        micro_batch_times: list[float] = []
        device = next(self.model.parameters()).device
        num_rollouts = len({items[i].rollout_key for i in step})
        self.optimizer.zero_grad(set_to_none=True)
        totals: dict[str, float] = {}
        batches = micro_batches(items, step, cfg.max_tokens_per_microbatch)
        for done, batch in enumerate(batches, start=1):
            micro_batch_start = time.perf_counter()
            scored = score_responses(
                self.model,
                items,
                batch,
                temperature=cfg.rollout_temperature,
                with_entropy=True,
                entropy_grad=cfg.entropy_coef != 0.0,
                loss_positions_only=True,
                trunk=self.trunk,
                compute_dtype=self.compute_dtype,
            )
            has_rollout_lp = all(items[i].rollout_log_probs is not None for i in step)
            inputs = StepLossInputs(
                log_probs=scored.log_probs,
                old_log_probs=[
                    old[i] if i in old else lp.detach() for i, lp in zip(batch, scored.log_probs, strict=True)
                ],
                advantages=[_advantage(items[i].advantage, device) for i in batch],
                loss_masks=[
                    torch.as_tensor(list(items[i].loss_mask), dtype=torch.float32, device=device)
                    for i in batch
                ],
                rollout_mask_sums=[mask_sums[i] for i in batch],
                num_rollouts=num_rollouts,
                entropy=scored.entropy,
                ref_log_probs=None if ref is None else [ref[i] for i in batch],
                rollout_log_probs=[
                    torch.as_tensor(list(items[i].rollout_log_probs), dtype=torch.float32, device=device)
                    for i in batch
                ]
                if has_rollout_lp
                else None,
            )
            loss, metrics = policy_loss(inputs, cfg)
            loss.backward()
            micro_batch_times.append(time.perf_counter() - micro_batch_start)
            # Each micro-batch already carries the step's global denominators, so sums add up exactly.
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value
            self.on_micro_batch(done, len(batches))
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_grad)
        self.optimizer.step()
        if self.lr_schedule is not None:
            self.lr_schedule.step(num_rollouts)
        times = StepTimes(steps=[time.perf_counter() - step_start], micro_batches=micro_batch_times)
        logged = dict(totals)
        logged[m.TRAIN_GRAD_NORM.name] = float(grad_norm)
        # slime logs `train/lr-pg_<i>` per parameter group (the scheduler's lr after its step, which the
        # next step runs at); the local optimizer has exactly one.
        logged[m.TRAIN_LR_PG0.name] = float(self.optimizer.param_groups[0]["lr"])
        logged[m.TRAIN_GLOBAL_BATCH_SIZE.name] = float(num_rollouts)
        logged[m.TRAIN_STEP.name] = train_step
        return logged, times


def _advantage(value: float | Sequence[float], device: torch.device) -> float | torch.Tensor:
    """A sample's advantage as the loss takes it: GRPO's scalar as it is, PPO's per-token values as a tensor."""
    if isinstance(value, float | int):
        return value
    return torch.as_tensor(list(value), dtype=torch.float32, device=device)

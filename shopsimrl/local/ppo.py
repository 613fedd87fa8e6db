"""PPO update of the local backend (`driver.advantage_estimator: ppo`): critic, GAE, then the actor.

One rollout, in the order of slime v0.3.1's `train.py` with `use_critic` (docs/local_backend.md, "PPO"):

1. one no-grad pass of the policy over the rollout's scheduled samples: the old log-probs (with a
   critic slime never reuses the step's own) and the final hidden states, the critic's features;
2. the critic's values before its update (slime's `train_critic`: `forward_only(get_values)`), GAE
   advantages and returns from them (gae.py); the rollout's `rollout/values|returns|advantages` and our
   `rollout/ppo/*` statistics;
3. the critic's optimizer steps on the same step schedule as the actor's, slime's clipped value loss
   against those values and returns; one `train/critic-*` row a step, with `train/step`;
4. unless `rollout_id < num_critic_only_steps`: the actor's optimizer steps (GrpoTrainer's PPO-clip
   loss, reducer and step schedule) on per-token advantages; one `train/*` row a step.

The samples' `advantage` field carries their reward here: with `ppo` the reward post-process returns
the raw rewards (slime's `rollout_data["rewards"]`), which GAE places at each sample's last token.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from shopsimrl.local.critic import ValueHead, value_loss
from shopsimrl.local.gae import gae, masked_whiten, rollout_statistics
from shopsimrl.local.grpo import (
    GrpoTrainer,
    TrainItem,
    build_step_schedule,
    micro_batches,
    rollout_mask_sums,
    score_responses,
)
from shopsimrl.local.lr_warmup import LinearWarmup
from shopsimrl.metrics import names as m
from shopsimrl.metrics.resources import StepTimes


@dataclass(frozen=True)
class PpoConfig:
    """slime's PPO flags (without dashes) and the critic optimizer's gradient clip."""

    gamma: float = 1.0
    lambd: float = 1.0
    value_clip: float = 0.2
    normalize_advantages: bool = False
    num_critic_only_steps: int = 0
    critic_clip_grad: float = 1.0


@dataclass
class PpoRolloutResult:
    """One rollout's PPO training: the rollout statistics, critic rows, actor rows and perf timers."""

    rollout_metrics: dict[str, float] = field(default_factory=dict)
    critic_step_metrics: list[dict[str, float]] = field(default_factory=list)
    step_metrics: list[dict[str, float]] = field(default_factory=list)  # the actor's
    perf_metrics: dict[str, float] = field(default_factory=dict)
    num_steps: int = 0


class PpoTrainer:
    """The critic's and the actor's optimizer steps of one rollout at a time."""

    def __init__(
        self,
        actor: GrpoTrainer,
        critic: ValueHead,
        critic_optimizer: torch.optim.Optimizer,
        config: PpoConfig,
        critic_start: Path | None = None,
        critic_lr_schedule: LinearWarmup | None = None,
    ):
        self.actor = actor
        self.critic = critic
        self.critic_optimizer = critic_optimizer
        self.config = config
        self.critic_start = critic_start  # the saved critic it started from; None: freshly initialised
        self.critic_lr_schedule = critic_lr_schedule

    def train_rollout(self, items: Sequence[TrainItem], rollout_id: int, global_batch_size: int) -> PpoRolloutResult:
        cfg = self.config
        schedule = build_step_schedule(items, global_batch_size)
        scheduled = [i for step in schedule for i in step]
        result = PpoRolloutResult(num_steps=len(schedule))
        if not scheduled:
            return result
        start = time.perf_counter()
        old, features = self._old_log_probs_and_features(items, scheduled)
        log_probs_time = time.perf_counter() - start
        with torch.no_grad():
            old_values = {i: self.critic(features[i]) for i in scheduled}
        advantages, returns = {}, {}
        for i in scheduled:
            advantages[i], returns[i] = gae(old_values[i], float(items[i].advantage), cfg.gamma, cfg.lambd)
        masks = {i: _mask(items[i], features[i].device) for i in scheduled}
        if cfg.normalize_advantages:
            advantages = dict(zip(scheduled, masked_whiten([advantages[i] for i in scheduled],
                                                           [masks[i] for i in scheduled]), strict=True))  # fmt: skip
        mask_sums = rollout_mask_sums(items)
        result.rollout_metrics = rollout_statistics(
            [old_values[i] for i in scheduled],
            [returns[i] for i in scheduled],
            [advantages[i] for i in scheduled],
            [masks[i] for i in scheduled],
            [mask_sums[i] for i in scheduled],
            len({items[i].rollout_key for i in scheduled}),
        )
        for step_id, step in enumerate(schedule):
            result.critic_step_metrics.append(
                self._critic_step(items, step, features, old_values, returns, masks, mask_sums,
                                  rollout_id * len(schedule) + step_id)  # fmt: skip
            )
        actor_time = 0.0
        times = StepTimes()
        if rollout_id >= cfg.num_critic_only_steps:
            ppo_items = list(items)
            for i in scheduled:
                ppo_items[i] = dataclasses.replace(items[i], advantage=tuple(advantages[i].tolist()))
            ref = None
            if self.actor.config.use_kl_loss:
                ref = self.actor.score_all(self.actor.ref_model, ppo_items, scheduled, None)
            actor_start = time.perf_counter()
            result.step_metrics, times = self.actor.optimizer_steps(ppo_items, schedule, old, ref, rollout_id)
            actor_time = time.perf_counter() - actor_start
        total_tokens = sum(len(items[i].tokens) for i in scheduled)
        # slime's critic runs in its own process and logs no timer; its steps count in perf/train_time.
        result.perf_metrics = {
            m.PERF_LOG_PROBS_TIME.name: log_probs_time,
            m.PERF_TRAIN_TIME.name: time.perf_counter() - start,
        }
        if result.step_metrics:  # the actor trained: its timers, never a made-up 0 in critic-only rollouts
            result.perf_metrics[m.PERF_ACTOR_TRAIN_TIME.name] = actor_time
            result.perf_metrics[m.PERF_ACTOR_TRAIN_TOK_PER_S.name] = total_tokens / actor_time if actor_time > 0 else 0.0
            result.perf_metrics.update(times.perf_metrics())
        return result

    def _old_log_probs_and_features(
        self, items: Sequence[TrainItem], indices: Sequence[int]
    ) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
        actor, cfg = self.actor, self.actor.config
        old: dict[int, torch.Tensor] = {}
        features: dict[int, torch.Tensor] = {}
        actor.model.train()  # as GrpoTrainer: the old log-probs come from the mode the steps run in
        with torch.no_grad():
            for batch in micro_batches(items, indices, cfg.max_tokens_per_microbatch):
                scored = score_responses(
                    actor.model,
                    items,
                    batch,
                    temperature=cfg.rollout_temperature,
                    with_entropy=False,
                    loss_positions_only=True,
                    trunk=actor.trunk,
                    compute_dtype=actor.compute_dtype,
                    with_hidden=True,
                )
                old.update(zip(batch, scored.log_probs, strict=True))
                features.update(zip(batch, scored.hidden or [], strict=True))
        return old, features

    def _critic_step(
        self,
        items: Sequence[TrainItem],
        step: list[int],
        features: dict[int, torch.Tensor],
        old_values: dict[int, torch.Tensor],
        returns: dict[int, torch.Tensor],
        masks: dict[int, torch.Tensor],
        mask_sums: list[float],
        train_step: int,
    ) -> dict[str, float]:
        num_rollouts = len({items[i].rollout_key for i in step})
        self.critic.train()
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss, metrics = value_loss(
            [self.critic(features[i]) for i in step],
            [old_values[i] for i in step],
            [returns[i] for i in step],
            [masks[i] for i in step],
            [mask_sums[i] for i in step],
            num_rollouts,
            self.config.value_clip,
        )
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.config.critic_clip_grad)
        self.critic_optimizer.step()
        if self.critic_lr_schedule is not None:
            self.critic_lr_schedule.step(num_rollouts)
        row = dict(metrics)
        row[m.TRAIN_CRITIC_GRAD_NORM.name] = float(grad_norm)
        row[m.TRAIN_CRITIC_LR_PG0.name] = float(self.critic_optimizer.param_groups[0]["lr"])
        row[m.TRAIN_CRITIC_GLOBAL_BATCH_SIZE.name] = float(num_rollouts)
        row[m.TRAIN_STEP.name] = train_step
        return row


def _mask(item: TrainItem, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(list(item.loss_mask), dtype=torch.float32, device=device)

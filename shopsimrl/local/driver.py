"""The local backend's in-process driver: slime's rollout loop and GRPO update on one CPU process.

Per rollout (docs/local_backend.md, "The rollout loop"), in the order of slime v0.3.1's RolloutManager:

1. over-sampling waves (`shopsimrl.rollout.oversampling.OverSampler`, slime's remaining/target rule)
   fetch groups of `n_samples_per_prompt` from the data source; every group runs the custom generate
   and the reward hook on its samples concurrently (asyncio, as slime's `generate_and_rm_group`);
2. each finished group goes through the dynamic filter (keep / drop / keep when insufficient);
3. the all-samples hook sees every completed group; pending diagnostic retries run (synchronously);
4. the rollout-log hook fills `rollout_extra_metrics` in place; slime's own rollout and perf
   metrics are added; ONE row is logged with `rollout/step` (rollout side + slime's train-side
   `rollout/*` means, which on the GPU backend arrive as a second row with the same step);
5. the reward post-process turns rewards into advantages; the GRPO trainer runs
   `num_steps_per_rollout` optimizer steps, one `train/*` row each with `train/step`;
   with `advantage_estimator: ppo` (local/ppo.py) the post-process returns the raw rewards, and the
   PPO trainer logs a `rollout/values|returns|advantages` row with `rollout/step`, then the critic's
   `train/critic-*` rows and the actor's `train/*` rows;
6. one `perf/*` row of the training timers, time per optimizer step and micro-batch, and the
   process's memory with `rollout/step`; after a save, a `perf/checkpoint_bytes` row (run.py).

Every hook is resolved by the dotted path slime would be given and called with slime's signature
and an `args` namespace that carries slime's argument names, the `shopsim` plugin section, and the
local generator/tokenizer/catalog injected as documented in docs/hooks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from shopsimrl.config.options import options_from_args
from shopsimrl.contract import Sample, call_dynamic_filter, trajectory_key
from shopsimrl.local.config import RunConfig
from shopsimrl.local.critic import ValueHead, load_critic_from
from shopsimrl.local.grpo import GrpoConfig, GrpoTrainer, RolloutTrainResult, TrainItem
from shopsimrl.local.hooks import Hooks, resolve_hooks
from shopsimrl.local.lr_warmup import LinearWarmup
from shopsimrl.local.ppo import PpoConfig, PpoTrainer
from shopsimrl.local.trunk import FrozenTrunk
from shopsimrl.metrics import names as m
from shopsimrl.metrics.resources import memory_metrics
from shopsimrl.metrics.slime_native import perf_metrics, sample_metrics, train_side_rollout_metrics
from shopsimrl.models.checkpoint import should_save
from shopsimrl.rollout.agent import INJECT_CATALOG_ATTR, INJECT_GENERATOR_ATTR, INJECT_TOKENIZER_ATTR
from shopsimrl.rollout.curriculum import ROLLOUT_STEP_ATTR
from shopsimrl.rollout.datasource import TaskGroupSource
from shopsimrl.rollout.oversampling import Decision, OverSampler
from shopsimrl.rollout.retries import (
    RETRY_MODE_ATTR,
    RetryMode,
    run_pending_retries,
    sampling_params_from_args,
)
from shopsimrl.slime_metrics import DRIVER_WRITES_METRICS_ATTR

logger = logging.getLogger(__name__)


class MetricsSink(Protocol):
    def log(self, metrics: dict[str, Any]) -> None: ...


def build_args(
    config: RunConfig, *, use_wandb: bool, generator: Any, tokenizer: Any, catalog: Any
) -> argparse.Namespace:
    """slime's `args` for the local backend: slime's names, the `shopsim` section, injected objects."""
    driver = config.driver
    args = argparse.Namespace(**driver.model_dump(mode="python"))
    args.over_sampling_batch_size = driver.over_sampling_batch_size or driver.rollout_batch_size
    args.num_steps_per_rollout = driver.num_steps_per_rollout
    args.kl_loss_type = driver.kl_loss_type.value
    for name, value in config.hooks.model_dump().items():
        setattr(args, name, value)
    # Flags of slime's default rollout that the local driver honours with slime's defaults.
    args.use_wandb = use_wandb
    args.group_rm = False
    args.partial_rollout = False
    args.start_rollout_id = 0
    args.rollout_num_gpus = 1
    args.reward_key = None
    args.rollout_stop = None
    args.rollout_stop_token_ids = None
    args.rollout_skip_special_tokens = False
    args.rewards_normalization = True
    args.grpo_std_normalization = driver.n_samples_per_prompt > 1
    # What `--custom-config-path` would set: the top-level `shopsim:` mapping.
    args.shopsim = config.shopsim.model_dump(mode="python")
    setattr(args, INJECT_GENERATOR_ATTR, generator)
    setattr(args, INJECT_TOKENIZER_ATTR, tokenizer)
    setattr(args, INJECT_CATALOG_ATTR, catalog)
    # The driver runs the diagnostic retries itself, right after the all-samples hook.
    setattr(args, RETRY_MODE_ATTR, RetryMode.DRIVER.value)
    # The driver's StageLogger writes metrics.jsonl (the rollout-log hook writes it under slime).
    setattr(args, DRIVER_WRITES_METRICS_ATTR, True)
    return args


def base_sampling_params(args: Any) -> dict[str, Any]:
    """slime's `GenerateState` sampling params."""
    return {
        "temperature": args.rollout_temperature,
        "top_p": args.rollout_top_p,
        "top_k": args.rollout_top_k,
        "max_new_tokens": args.rollout_max_response_len,
        "stop": args.rollout_stop,
        "stop_token_ids": args.rollout_stop_token_ids,
        "skip_special_tokens": args.rollout_skip_special_tokens,
        "no_stop_trim": True,
        "spaces_between_special_tokens": False,
    }


def leaves(item: Any) -> list[Any]:
    """A group element is a Sample or (fan-out) a list of Samples."""
    return list(item) if isinstance(item, list) else [item]


def flatten_groups(groups: Sequence[Sequence[Any]]) -> list[Any]:
    """slime's `_get_rollout_data` flattening: nested lists down to Samples."""
    return [leaf for group in groups for item in group for leaf in leaves(item)]


@dataclass
class RolloutOutput:
    groups: list[list[Any]]  # accepted, sorted by first sample index
    all_groups: list[list[Any]]  # every completed group (accepted, dropped, surplus)
    metrics: dict[str, Any]  # slime's MetricGatherer: rollout/dynamic_filter/drop_<reason>
    decisions: dict[int, Decision] = field(default_factory=dict)  # by group_index
    waves: list[int] = field(default_factory=list)


@dataclass
class RolloutReport:
    """What one rollout step did, for progress output and the smoke report."""

    rollout_id: int
    rollout_row: dict[str, Any]
    train_rows: list[dict[str, Any]]
    perf_row: dict[str, Any]
    accepted_groups: int
    completed_groups: int
    waves: list[int]
    in_group_reward_difference: bool
    ppo_row: dict[str, Any] | None = None  # PPO: rollout/values|returns|advantages and rollout/ppo/*
    critic_rows: list[dict[str, Any]] = field(default_factory=list)  # PPO: one per critic optimizer step


class LocalDriver:
    """Runs `num_rollout` rollouts: generation through the hooks, then GRPO on the accepted groups."""

    def __init__(
        self,
        config: RunConfig,
        *,
        model: Any,
        tokenizer: Any,
        generator: Any,
        catalog: Any,
        tasks: Sequence[Any],
        sink: MetricsSink,
        use_wandb: bool,
        ref_model: Any | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        trunk: FrozenTrunk | None = None,
    ):
        self.config = config
        self.args = build_args(
            config, use_wandb=use_wandb, generator=generator, tokenizer=tokenizer, catalog=catalog
        )
        self.hooks: Hooks = resolve_hooks(config.hooks)
        driver = config.driver
        self.data_source = TaskGroupSource(
            tasks,
            driver.n_samples_per_prompt,
            shuffle_seed=driver.rollout_seed if driver.rollout_shuffle else None,
        )
        optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=driver.lr,
            weight_decay=driver.weight_decay,
            betas=(driver.adam_beta1, driver.adam_beta2),
        )
        grpo = GrpoConfig(
            eps_clip=driver.eps_clip,
            eps_clip_high=driver.eps_clip_high,
            entropy_coef=driver.entropy_coef,
            use_kl_loss=driver.use_kl_loss,
            kl_loss_coef=driver.kl_loss_coef,
            kl_loss_type=driver.kl_loss_type,
            clip_grad=driver.clip_grad,
            rollout_temperature=driver.rollout_temperature,
            max_tokens_per_microbatch=driver.max_tokens_per_gpu,
        )
        self.sink = sink
        self.on_event = on_event or (lambda _name, _data: None)
        self.trainer = GrpoTrainer(
            model, optimizer, grpo, ref_model=ref_model,
            on_micro_batch=lambda done, total: self.on_event("micro_batch", {"done": done, "total": total}),
            trunk=trunk, compute_dtype=config.model.compute_dtype.torch,
            lr_schedule=LinearWarmup(optimizer, lr=driver.lr, warmup_samples=driver.lr_warmup_samples),
        )  # fmt: skip
        self.ppo: PpoTrainer | None = _ppo_trainer(config, model, self.trainer) if config.uses_critic else None

    # ------------------------------------------------------------------ rollout (RolloutManager side)
    async def _generate_and_rm(self, sample: Any, sampling_params: dict[str, Any]) -> Any:
        if sample.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED):
            return sample
        result = await self.hooks.generate(self.args, sample, dict(sampling_params))
        if isinstance(result, list):
            if any(s.status == Sample.Status.ABORTED for s in result):
                return result
            need = [s for s in result if s.reward is None]
            if need:
                # slime's batched_async_rm: with a custom RM the list goes to it in one call.
                rewards = await self.hooks.reward(self.args, need)
                for s, r in zip(need, rewards, strict=True):
                    s.reward = r
            return result
        if result.reward is None and result.status != Sample.Status.ABORTED:
            result.reward = await self.hooks.reward(self.args, result)
        return result

    async def _generate_and_rm_group(self, group: list[Any], sampling_params: dict[str, Any]) -> list[Any]:
        for sample in group:
            if sample.session_id is None:
                sample.session_id = str(uuid.uuid4())
        return list(await asyncio.gather(*(self._generate_and_rm(s, sampling_params) for s in group)))

    async def generate_rollout(self, rollout_id: int) -> RolloutOutput:
        """slime's `generate_rollout_async` with the over-sampling rule of `OverSampler`."""
        args = self.args
        target = args.rollout_batch_size
        sampler = OverSampler(target=target, over_sampling_batch_size=args.over_sampling_batch_size)
        params = base_sampling_params(args)
        pending: set[asyncio.Task[list[Any]]] = set()
        data: list[list[Any]] = []
        all_data: list[list[Any]] = []
        decisions: dict[int, Decision] = {}
        while not sampler.done:
            wave = sampler.next_wave()
            if wave:
                groups = self.data_source.get_samples(wave)
                self.on_event("wave", {"rollout_id": rollout_id, "groups": wave})
                for group in groups:
                    pending.add(asyncio.ensure_future(self._generate_and_rm_group(group, params)))
            if not pending:
                raise RuntimeError(f"rollout {rollout_id}: no group in flight and the batch is not full")
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: leaves(t.result()[0])[0].index):
                group = task.result()
                if len(group) != args.n_samples_per_prompt:
                    raise RuntimeError(
                        f"group has {len(group)} samples, n_samples_per_prompt is {args.n_samples_per_prompt}"
                    )
                all_data.append(group)
                output = call_dynamic_filter(self.hooks.dynamic_filter, args, group)
                group_index = leaves(group[0])[0].group_index
                decision = sampler.on_group_completed(group_index, output)
                decisions[group_index] = decision
                if decision is Decision.ACCEPTED:
                    data.append(group)
                self.on_event(
                    "group",
                    {
                        "rollout_id": rollout_id,
                        "group_index": group_index,
                        "decision": decision.value,
                        "reason": output.reason,
                    },
                )
        # slime aborts what is still in flight; without partial rollout those groups are discarded.
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        first_index = lambda group: leaves(group[0])[0].index  # noqa: E731
        data.sort(key=first_index)
        all_data.sort(key=first_index)
        return RolloutOutput(
            groups=data,
            all_groups=all_data,
            metrics=sampler.drop_metrics(),
            decisions=decisions,
            waves=list(sampler.waves),
        )

    # ------------------------------------------------------------------ one rollout step
    def run_rollout(self, rollout_id: int) -> RolloutReport:
        args = self.args
        step_start = time.perf_counter()
        setattr(args, ROLLOUT_STEP_ATTR, rollout_id)
        output = asyncio.run(self.generate_rollout(rollout_id))
        if self.hooks.all_samples_process is not None:
            # slime passes the bound `data_source.get_samples`, not the data source object.
            self.hooks.all_samples_process(args, output.all_groups, self.data_source.get_samples)
        self._run_pending_retries()
        samples = flatten_groups(output.groups)
        rollout_time = time.perf_counter() - step_start

        extra = dict(output.metrics)
        skip_default = False
        if self.hooks.rollout_log is not None:
            skip_default = bool(self.hooks.rollout_log(rollout_id, args, samples, extra, rollout_time))
        raw_rewards, rewards = self.hooks.reward_post_process(args, samples)
        row: dict[str, Any] = {}
        if not skip_default:
            row.update(extra)
            row.update(sample_metrics(args, samples))
            row.update(perf_metrics(samples, rollout_time, args.rollout_num_gpus))
        row.update(train_side_rollout_metrics(samples, raw_rewards, rewards))
        row[m.ROLLOUT_STEP.name] = rollout_id
        self.sink.log(row)
        self.on_event("rollout_logged", {"rollout_id": rollout_id, "row": row})

        items = train_items(samples, rewards)
        ppo_row: dict[str, Any] | None = None
        critic_rows: list[dict[str, Any]] = []
        if self.ppo is not None:
            ppo_result = self.ppo.train_rollout(items, rollout_id, args.global_batch_size)
            # slime logs these from the actor's rollout data: a second row with the same rollout/step
            ppo_row = {**ppo_result.rollout_metrics, m.ROLLOUT_STEP.name: rollout_id}
            self.sink.log(ppo_row)
            critic_rows = ppo_result.critic_step_metrics
            for critic_row in critic_rows:
                self.sink.log(critic_row)
                self.on_event("critic_step", {"rollout_id": rollout_id, "row": critic_row})
            step_metrics, train_perf = ppo_result.step_metrics, ppo_result.perf_metrics
        else:
            result: RolloutTrainResult = self.trainer.train_rollout(items, rollout_id, args.global_batch_size)
            step_metrics, train_perf = result.step_metrics, result.perf_metrics
        for step_row in step_metrics:
            self.sink.log(step_row)
            self.on_event("train_step", {"rollout_id": rollout_id, "row": step_row})
        perf_row = dict(train_perf)
        perf_row[m.PERF_STEP_TIME.name] = time.perf_counter() - step_start
        # Read after the update: the peaks cover this rollout's training (metrics/resources.py).
        perf_row.update(memory_metrics(next(self.trainer.model.parameters()).device))
        perf_row[m.ROLLOUT_STEP.name] = rollout_id
        self.sink.log(perf_row)
        return RolloutReport(
            rollout_id=rollout_id,
            rollout_row=row,
            train_rows=step_metrics,
            perf_row=perf_row,
            accepted_groups=len(output.groups),
            completed_groups=len(output.all_groups),
            waves=output.waves,
            in_group_reward_difference=any(_has_reward_difference(args, g) for g in output.all_groups),
            ppo_row=ppo_row,
            critic_rows=critic_rows,
        )

    def _run_pending_retries(self) -> None:
        """Diagnostic full-skill retries queued by the all-samples hook run here, synchronously."""
        if not self.config.shopsim.full_skill_retry or self.hooks.all_samples_process is None:
            return
        args = self.args
        results = run_pending_retries(
            self.config.shopsim.run_dir,
            getattr(args, INJECT_GENERATOR_ATTR),
            getattr(args, INJECT_TOKENIZER_ATTR),
            options_from_args(args),
            catalog=getattr(args, INJECT_CATALOG_ATTR),
            sampling_params=sampling_params_from_args(args),
        )
        if results:
            self.on_event("retries", {"count": len(results)})

    def run(self, save: Callable[[int], None] | None = None) -> list[RolloutReport]:
        """All rollouts; `save(rollout_id)` runs after each rollout that slime's `--save-interval` rule picks."""
        reports = []
        for rollout_id in range(self.args.start_rollout_id, self.args.num_rollout):
            reports.append(self.run_rollout(rollout_id))
            if save is not None and should_save(rollout_id, self.config.driver.save_interval, self.args.num_rollout):
                save(rollout_id)
                self.on_event("checkpoint", {"rollout_id": rollout_id})
        return reports


def _ppo_trainer(config: RunConfig, model: Any, actor: GrpoTrainer) -> PpoTrainer:
    """The critic (a value head on the policy's final hidden states, local/critic.py) and its optimizer."""
    driver, critic_config = config.driver, config.critic_config
    critic = ValueHead(int(model.config.hidden_size), seed=critic_config.seed)
    # The previous round's critic when the run starts from a checkpoint that saved one; else fresh.
    start = None if config.model.checkpoint is None else load_critic_from(Path(config.model.checkpoint), critic)
    critic = critic.to(next(model.parameters()).device)
    optimizer = torch.optim.AdamW(
        critic.parameters(),
        lr=critic_config.lr,
        weight_decay=critic_config.weight_decay,
        betas=(critic_config.adam_beta1, critic_config.adam_beta2),
    )
    ppo = PpoConfig(
        gamma=driver.gamma,
        lambd=driver.lambd,
        value_clip=driver.value_clip,
        normalize_advantages=driver.normalize_advantages,
        num_critic_only_steps=driver.num_critic_only_steps,
        critic_clip_grad=critic_config.clip_grad,
    )
    # slime's critic role inherits every actor argument its overrides leave alone, the warm-up included.
    warmup = LinearWarmup(optimizer, lr=critic_config.lr, warmup_samples=driver.lr_warmup_samples)
    return PpoTrainer(actor, critic, optimizer, ppo, critic_start=start, critic_lr_schedule=warmup)


def train_items(samples: Sequence[Any], rewards: Sequence[float]) -> list[TrainItem]:
    """slime's train data per sample; `remove_sample` zeroes the loss mask as slime does."""
    items = []
    for sample, advantage in zip(samples, rewards, strict=True):
        if sample.response_length == 0:
            continue  # nothing to train; a kept sample without response tokens adds no loss term
        mask = list(sample.loss_mask) if sample.loss_mask is not None else [1] * sample.response_length
        if sample.remove_sample:
            mask = [0] * sample.response_length
        key = trajectory_key(sample) if sample.rollout_id is not None else ("sample", sample.index)
        items.append(
            TrainItem(
                tokens=list(sample.tokens),
                response_length=int(sample.response_length),
                loss_mask=mask,
                advantage=float(advantage),
                rollout_key=key,
                rollout_log_probs=list(sample.rollout_log_probs)
                if sample.rollout_log_probs is not None
                else None,
            )
        )
    return items


def _has_reward_difference(args: Any, group: list[Any]) -> bool:
    values = {
        float(leaf.get_reward_value(args))
        for item in group
        for leaf in leaves(item)
        if leaf.reward is not None
    }
    return len(values) > 1

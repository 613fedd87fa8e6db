"""One local training round end to end: model, environment, logger, failure record, warm start, driver.

    result = run_training(load_run_config("configs/local/smoke.yaml"))

The start-up summary line (printed and stored in the result) is the first thing an operator checks:
    shopsimrl local: mode=smoke dtype=float32 model=tiny groups=1 samples_per_group=4 rollouts=1
    steps_per_rollout=1 total_batches=1 devices=cpu:1 run_dir=runs/local-smoke/train
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from shopsimrl.local.config import ComputeDtype, ModelName, RunConfig
from shopsimrl.local.critic import CRITIC_FILE
from shopsimrl.local.driver import LocalDriver, RolloutReport, base_sampling_params, build_args
from shopsimrl.local.startup import check_startup
from shopsimrl.local.trunk import FrozenTrunk
from shopsimrl.local.warm_start import WarmStartResult, warm_start
from shopsimrl.local.warm_start_cache import find_cached_warm_start, store_warm_start, warm_start_key
from shopsimrl.metrics.alerts import AlertConfig
from shopsimrl.metrics.live_alerts import LiveAlerts
from shopsimrl.metrics.resources import checkpoint_metrics
from shopsimrl.models.checkpoint import (
    WARM_START_DIR,
    CheckpointInfo,
    checkpoint_dir_name,
    load_checkpoint,
    save_checkpoint,
)
from shopsimrl.rollout.generators import BatchedLocalHFGenerator
from shopsimrl.shop import load_split
from shopsimrl.slime_metrics import reset_process_state
from shopsimrl.stages import stage_session
from shopsimrl.storage import atomic_write_json
from shopsimrl.storage.layout import RUN_RECORD_FILE as RUN_MANIFEST
from shopsimrl.tracking import StageLogger, WandbSettings
from shopsimrl.tracking.failure_record import failure_recording


@dataclass
class RunResult:
    config: RunConfig
    summary_line: str
    stage_dir: Path
    reports: list[RolloutReport] = field(default_factory=list)
    warm_start: WarmStartResult | None = None
    wandb_run_file: Path | None = None
    run_id: str | None = None
    model_load_seconds: float = 0.0
    elapsed_seconds: float = 0.0
    checkpoints: list[CheckpointInfo] = field(default_factory=list)  # in save order; the last is final


def load_model(config: RunConfig) -> tuple[Any, Any, float]:
    start = time.perf_counter()
    if config.model.checkpoint is not None:
        model, tokenizer = load_checkpoint(config.model.checkpoint)  # verified against its hash first
    elif config.model.name is ModelName.TINY:
        from shopsimrl.models import tiny_model, tiny_tokenizer

        tokenizer = tiny_tokenizer()
        model = tiny_model(tokenizer, seed=config.model.seed)
    else:
        from shopsimrl.models.smollm2 import load_smollm2

        loaded = load_smollm2(Path(config.model.cache_dir))
        model, tokenizer = loaded.model, loaded.tokenizer
    torch.manual_seed(config.model.seed)
    if config.model.trainable_top_layers is not None:
        freeze_below(model, config.model.trainable_top_layers)
    return model, tokenizer, time.perf_counter() - start


def freeze_below(model: Any, top_layers: int) -> int:
    """Leave only the top `top_layers` decoder layers and the final norm trainable; returns their count.

    With tied embeddings the output layer is frozen with the input embeddings. Gradients then stop
    at the lowest trainable layer, so backward costs a fraction of the full model's.
    """
    decoder = getattr(model, model.base_model_prefix)
    layers = decoder.layers
    if top_layers > len(layers):
        raise ValueError(f"model.trainable_top_layers={top_layers} but the model has {len(layers)} layers")
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    trainable = [*layers[len(layers) - top_layers :], decoder.norm]
    for module in trainable:
        for parameter in module.parameters():
            parameter.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def summary_line(config: RunConfig, model: Any) -> str:
    d = config.driver
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")  # the weights'
    compute = config.model.compute_dtype.resolved.value
    if compute != dtype:  # bfloat16 forwards over float32 weights (autocast)
        dtype += f" compute={compute}"
    if config.model.compute_dtype is ComputeDtype.AUTO:  # which precision `auto` chose on this CPU
        dtype += " (auto)"
    # The device the policy really runs on (a GPU host's local backend still trains on the CPU).
    device = next(model.parameters()).device
    devices = f"{device.type}:1"
    return (
        f"shopsimrl local: mode={config.run.mode.value} dtype={dtype} model={config.model.name.value} "
        f"groups={d.rollout_batch_size} samples_per_group={d.n_samples_per_prompt} rollouts={d.num_rollout} "
        f"steps_per_rollout={d.num_steps_per_rollout} total_batches={d.num_rollout * d.num_steps_per_rollout} "
        f"devices={devices} run_dir={config.stage_dir}"
    )


def run_training(
    config: RunConfig,
    *,
    settings: WandbSettings | None = None,
    echo: Callable[[str], None] = print,
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
    alert_config: AlertConfig | None = None,
) -> RunResult:
    """Run one round; a crash or SIGTERM leaves `<stage_dir>/failures/<utc>/failure.json` and re-raises.

    Before anything expensive, `check_startup` refuses a used run directory, unwritable outputs and a
    warm start that cannot fit `max_turns` (StartupError; no failure record: nothing ran).
    """
    started = time.perf_counter()
    settings = settings or WandbSettings.from_env()
    if settings.group is None:
        # One group per round: without WANDB_GROUP, the W&B group is the run directory's group.
        settings = replace(settings, group=config.run.group)
    stage_dir = config.stage_dir
    # Catalog and split are cheap and deterministic: built first, so the start-up checks can use them.
    catalog = config.shopsim.catalog.build()
    tasks = load_split(catalog, config.shopsim.split)
    check_startup(config, settings, catalog, tasks)
    config_dict = config.model_dump(mode="json")
    logger_box: dict[str, StageLogger] = {}

    def run_id() -> str | None:
        logger = logger_box.get("logger")
        return logger.run_id if logger is not None and logger.run_id else f"local-{config.run.group}"

    with failure_recording(stage_dir, run_id=run_id, config=config_dict):
        reset_process_state()  # the hooks' per-process stash belongs to the previous run, if any
        cache_key = warm_start_key(config) if config.warm_start.enabled and config.warm_start.cache else None
        cached = find_cached_warm_start(config, cache_key, echo) if cache_key is not None else None
        model_config = config if cached is None else config.model_copy(
            update={"model": config.model.model_copy(update={"checkpoint": str(cached.path)})})  # fmt: skip
        model, tokenizer, load_seconds = load_model(model_config)
        line = summary_line(config, model)
        echo(line)
        # The frozen bottom layers (model.trainable_top_layers) computed once per token prefix for the
        # warm start and every update; the rollouts hand over what they computed (local/trunk.py).
        trunk = FrozenTrunk.of(model)
        result = RunResult(
            config=config, summary_line=line, stage_dir=stage_dir, model_load_seconds=load_seconds
        )
        if cached is not None:
            result.warm_start = replace(cached.result, cached_from=cached.path)
            echo(f"warm start: reused {cached.path} ({cached.result.steps} steps; "
                 "local/warm_start_cache.py: same model, warm start and shop profile)")  # fmt: skip
        elif config.warm_start.enabled:
            # Its own generator, seeded with model.seed: the warm start's probes never shift GRPO's draws,
            # so a cached warm start and one that ran now lead to the same GRPO run.
            probe_generator = BatchedLocalHFGenerator(
                model, tokenizer, seed=config.model.seed, compute_dtype=config.model.compute_dtype.torch
            )
            args = build_args(
                config, use_wandb=False, generator=probe_generator, tokenizer=tokenizer, catalog=catalog
            )
            result.warm_start = warm_start(
                model,
                tokenizer,
                probe_generator,
                catalog,
                tasks,
                config.shopsim,
                config.warm_start,
                base_sampling_params(args),
                seed=config.model.seed,
                trunk=trunk,
                compute_dtype=config.model.compute_dtype.torch,
                on_step=None
                if on_event is None
                else (
                    lambda s, loss, probe: on_event(
                        "warm_start_step", {"step": s, "loss": loss, "probe": probe}
                    )
                ),
            )
            if cache_key is not None:
                stored = store_warm_start(config, cache_key, model, tokenizer, result.warm_start)
                echo(f"warm start: cached as {stored} for the next run with the same settings")
        if config.warm_start.enabled:
            torch.manual_seed(config.model.seed)  # GRPO starts from the same RNG state either way
            # ... and from an empty trunk: what the warm start stored (the system prompt's frozen layers,
            # computed in other splits than the rollouts compute them) differs from the rollouts' own
            # values by float rounding, which under bfloat16 moved the update's weights (up to 7.6e-6)
            # and the gate's episodes after a warm start that ran now, but not after a cached one.
            if trunk is not None:
                trunk.clear()
            if config.warm_start.save:  # the policy before any GRPO update, for `shopsimrl eval`
                result.checkpoints.append(save_checkpoint(model, tokenizer, config.checkpoint_dir / WARM_START_DIR))
        # The driver runs a wave's episodes as concurrent tasks; their turns are decoded as one batch.
        generator = BatchedLocalHFGenerator(
            model,
            tokenizer,
            seed=config.driver.rollout_seed,
            recorder=trunk,
            compute_dtype=config.model.compute_dtype.torch,
        )
        # No resume (no optimizer state is saved): a signal goes on to failure_recording as it is.
        with stage_session(
            "train",
            stage_dir,
            settings=settings,
            config=config_dict,
            where=None,
            tags=[f"mode:{config.run.mode.value}", "backend:local"],
        ) as logger:
            logger_box["logger"] = logger
            logger.add_listener(LiveAlerts(stage_dir, alert_config))  # monitor check's rules, live
            driver = LocalDriver(
                config,
                model=model,
                tokenizer=tokenizer,
                generator=generator,
                catalog=catalog,
                tasks=tasks,
                sink=logger,
                use_wandb=logger.wandb_enabled,
                on_event=on_event,
                trunk=trunk,
            )
            ppo = driver.ppo
            if ppo is not None:
                start = f"from {ppo.critic_start}" if ppo.critic_start else "fresh (no saved critic at the start)"
                echo(f"critic: {start}")

            def save(rollout_id: int) -> None:
                # PPO: the critic goes inside the checkpoint (critic.safetensors): the next round starts from it.
                extra = {CRITIC_FILE: ppo.critic.state_dict()} if ppo is not None else None
                info = save_checkpoint(
                    model, tokenizer, config.checkpoint_dir / checkpoint_dir_name(rollout_id),
                    rollout_id=rollout_id, extra_tensors=extra,
                )  # fmt: skip
                result.checkpoints.append(info)
                logger.log(checkpoint_metrics(info.files, rollout_id))  # its own row, after the step's perf row

            result.reports = driver.run(save=save)
            result.wandb_run_file = logger.wandb_run_file
            result.run_id = run_id()
    result.elapsed_seconds = time.perf_counter() - started
    write_run_record(result)
    return result


def write_run_record(result: RunResult) -> Path:
    """`<stage_dir>/local_run.json`: what a finished training produced, for a reader in another process
    (the round runner of a CPU docker round reads the final checkpoint and the warm start from it)."""
    record = {
        "schema_version": 1,
        "run_id": result.run_id,
        "warm_start_steps": result.warm_start.steps if result.warm_start is not None else 0,
        "warm_start_cached_from": str(result.warm_start.cached_from) if result.warm_start and result.warm_start.cached_from else None,
        "checkpoints": [{"path": str(c.path), "sha256": c.sha256, "rollout_id": c.rollout_id} for c in result.checkpoints],
        "elapsed_seconds": round(result.elapsed_seconds, 3),
    }
    return atomic_write_json(result.stage_dir / RUN_MANIFEST, record)

"""Resource metrics of local training runs (tiny model), read back from metrics.jsonl: memory and time per
batch in every rollout step's perf row, the checkpoint's size at each save, no GPU key on the CPU."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shopsimrl.local.config import RunConfig
from shopsimrl.local.run import RunResult, run_training
from shopsimrl.metrics import names as m
from shopsimrl.metrics.resources import GIB
from shopsimrl.models.checkpoint import CHECKPOINT_MANIFEST
from shopsimrl.storage import read_jsonl
from shopsimrl.tracking import WandbSettings

NO_WANDB = WandbSettings.from_env({"USE_WANDB": "0"})
MEMORY = (m.PERF_HOST_PEAK_RSS_GIB.name, m.PERF_HOST_RSS_GIB.name)
STEP_TIMES = (m.PERF_ACTOR_STEP_TIME_MEAN.name, m.PERF_ACTOR_STEP_TIME_MAX.name, m.PERF_ACTOR_MICRO_BATCH_TIME_MEAN.name)
GPU = (m.PERF_GPU_PEAK_ALLOCATED_GIB.name, m.PERF_GPU_PEAK_RESERVED_GIB.name)


def _train(tiny_config: Callable[..., RunConfig], tmp_path: Path, **driver: Any) -> tuple[RunResult, list[dict]]:
    config = tiny_config(driver={"n_samples_per_prompt": 2, "global_batch_size": 1, "save_interval": 1, **driver})
    run = config.run.model_copy(update={"checkpoints_root": str(tmp_path / "checkpoints")})
    result = run_training(config.model_copy(update={"run": run}), settings=NO_WANDB, echo=lambda _line: None)
    rows = [r for r in read_jsonl(result.stage_dir / "metrics.jsonl").records if isinstance(r, dict)]
    return result, rows


def _perf_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if m.PERF_STEP_TIME.name in r]


def _checkpoint_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if m.PERF_CHECKPOINT_BYTES.name in r]


def _assert_memory(row: dict) -> None:
    assert all(isinstance(row[k], float) and math.isfinite(row[k]) for k in MEMORY)
    # The high-water mark is never below the resident set now; a Python process with torch holds > 64 MiB.
    assert row[m.PERF_HOST_PEAK_RSS_GIB.name] >= row[m.PERF_HOST_RSS_GIB.name] > 64 * 2**20 / GIB
    assert not any(k in row for k in GPU)  # the CPU backend has no accelerator: absent, never 0


def test_a_grpo_run_logs_memory_step_times_and_checkpoint_sizes(tiny_config, tmp_path) -> None:
    result, rows = _train(tiny_config, tmp_path)
    perf = _perf_rows(rows)
    assert [r[m.ROLLOUT_STEP.name] for r in perf] == [0, 1]
    for row in perf:
        _assert_memory(row)
        assert all(row[k] > 0 for k in STEP_TIMES)
        # 2 samples / global_batch_size 1 = 2 optimizer steps: the slowest is at least their mean,
        # and the steps' sum is part of the rollout's actor train time
        assert row[m.PERF_ACTOR_STEP_TIME_MAX.name] >= row[m.PERF_ACTOR_STEP_TIME_MEAN.name]
        assert 2 * row[m.PERF_ACTOR_STEP_TIME_MEAN.name] <= row[m.PERF_ACTOR_TRAIN_TIME.name]
        assert row[m.PERF_ACTOR_MICRO_BATCH_TIME_MEAN.name] <= row[m.PERF_ACTOR_STEP_TIME_MAX.name]
    # The peak is a high-water mark: it never falls between rollout steps.
    assert perf[1][m.PERF_HOST_PEAK_RSS_GIB.name] >= perf[0][m.PERF_HOST_PEAK_RSS_GIB.name]
    # One row per save, right after the step's perf row, with the rollout it saved at.
    saved = _checkpoint_rows(rows)
    assert [{k for k in r if not k.startswith("_")} for r in saved] == [{m.PERF_CHECKPOINT_BYTES.name, m.ROLLOUT_STEP.name}] * 2
    assert [r[m.ROLLOUT_STEP.name] for r in saved] == [c.rollout_id for c in result.checkpoints] == [0, 1]
    assert [rows.index(r) for r in saved] == [rows.index(p) + 1 for p in perf]
    for row, info in zip(saved, result.checkpoints, strict=True):
        on_disk = sum(p.stat().st_size for p in info.path.rglob("*") if p.is_file() and p.name != CHECKPOINT_MANIFEST)
        assert row[m.PERF_CHECKPOINT_BYTES.name] == sum(info.files.values()) == on_disk > 0


def test_a_ppo_run_logs_them_too_and_no_step_time_for_a_critic_only_rollout(tiny_config, tmp_path) -> None:
    result, rows = _train(tiny_config, tmp_path, advantage_estimator="ppo", num_critic_only_steps=1)
    perf = _perf_rows(rows)
    assert [r[m.ROLLOUT_STEP.name] for r in perf] == [0, 1]
    for row in perf:
        _assert_memory(row)
    assert not any(k in perf[0] for k in STEP_TIMES)  # rollout 0 trained the critic only: absent, never 0
    assert all(perf[1][k] > 0 for k in STEP_TIMES)
    saved = _checkpoint_rows(rows)
    assert [r[m.ROLLOUT_STEP.name] for r in saved] == [0, 1]
    for row, info in zip(saved, result.checkpoints, strict=True):
        assert "critic.safetensors" in info.files  # the critic saved inside the checkpoint counts
        assert row[m.PERF_CHECKPOINT_BYTES.name] == sum(info.files.values())

"""The local driver end to end with the tiny model: real hooks by dotted path, a real offline W&B run."""

from __future__ import annotations

from pathlib import Path

import pytest

from shopsimrl.errors import ModelServiceError
from shopsimrl.local.driver import LocalDriver
from shopsimrl.local.run import run_training
from shopsimrl.metrics import names as m
from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.rollout.generators import GenerationResult, LocalHFGenerator
from shopsimrl.shop import generate_catalog, load_split
from shopsimrl.slime_metrics import reset_process_state
from shopsimrl.storage import read_jsonl
from shopsimrl.tracking import WandbSettings
from shopsimrl.tracking.offline_reader import read_offline_run

SLIME_ROLLOUT_KEYS = {
    "rollout/step",
    "rollout/raw_reward",
    "rollout/response_len/mean",
    "rollout/response_len/median",
    "rollout/response_len/max",
    "rollout/response_len/min",
    "rollout/truncated_ratio",
    "perf/rollout_time",
    "rollout/rewards",
    "rollout/response_lengths",
    "rollout/total_lengths",
    "rollout/rollout_log_probs",
    "perf/tokens_per_gpu_per_sec",
    "perf/longest_sample_tokens_per_sec",
    "perf/effective_tokens_per_gpu_per_sec",
    "perf/longest_effective_sample_tokens_per_sec",
}
TRAIN_KEYS = {
    "train/step",
    "train/loss",
    "train/pg_loss",
    "train/pg_clipfrac",
    "train/ppo_kl",
    "train/entropy_loss",
    "train/grad_norm",
    "train/train_rollout_logprob_abs_diff",
    "train/lr-pg_0",
    "train/global_batch_size",
}
PERF_KEYS = {
    "rollout/step",
    "perf/log_probs_time",
    "perf/actor_train_time",
    "perf/actor_train_tok_per_s",
    "perf/train_time",
    "perf/step_time",
    # time per optimizer step and micro-batch, the process's memory (metrics/resources.py); no GPU on the CPU
    "perf/actor_step_time_mean",
    "perf/actor_step_time_max",
    "perf/actor_micro_batch_time_mean",
    "perf/host_peak_rss_gib",
    *(["perf/host_rss_gib"] if Path("/proc/self/statm").exists() else []),
}
SHOPSIM_KEYS = {
    m.Q.name,
    m.REWARD_MEAN.name,
    m.SKILL_FREE_GROUP_RATE.name,
    m.SCORED_RATE.name,
    m.TECHNICAL_GROUP_DROP_COUNT.name,
    m.TRAIN_GROUP_COUNT.name,
}


def test_two_rollouts_end_to_end_read_back_from_the_offline_wandb_run(tiny_config, wandb_offline) -> None:
    config = tiny_config(driver={"n_samples_per_prompt": 2, "global_batch_size": 1})
    settings = WandbSettings.from_env(
        {"USE_WANDB": "1", "WANDB_MODE": "offline", "WANDB_DIR": str(wandb_offline.wandb_dir)}
    )
    lines: list[str] = []
    result = run_training(config, settings=settings, echo=lines.append)
    assert lines == [result.summary_line]
    assert result.summary_line.startswith(
        "shopsimrl local: mode=train dtype=float32 model=tiny groups=1 "
        "samples_per_group=2 rollouts=2 steps_per_rollout=2 total_batches=4 "
        "devices=cpu:1 "
    )

    local_rows = read_jsonl(result.stage_dir / "metrics.jsonl").records
    run = read_offline_run(result.wandb_run_file)
    assert run.exit_code == 0
    # No WANDB_GROUP: the round's group names both the run directory and the W&B group.
    assert run.info.group == config.run.group == result.stage_dir.parent.name
    history = run.history
    assert len(history) == len(local_rows) == 8  # per rollout: 1 rollout row, 2 train rows, 1 perf row

    kinds = ["rollout", "train", "train", "perf"] * 2
    for row, local, kind in zip(history, local_rows, kinds, strict=True):
        keys = {k for k in row if not k.startswith("_")}
        assert keys == {k for k in local if not k.startswith("_")}
        if kind == "train":
            assert keys == TRAIN_KEYS
        elif kind == "perf":
            assert keys == PERF_KEYS
        else:
            assert SLIME_ROLLOUT_KEYS <= keys
            assert SHOPSIM_KEYS <= keys
            assert {k for k in keys if k.startswith("train/")} == set()
    assert [r["rollout/step"] for r in history if "rollout/step" in r] == [0, 0, 1, 1]
    assert [r["train/step"] for r in history if "train/step" in r] == [0, 1, 2, 3]
    # slime's step axes: train/* on train/step, rollout/* and perf/* on rollout/step
    axes = {entry["name"]: entry["step_metric"] for entry in run.metrics if entry.get("step_metric")}
    assert axes["train/*"] == "train/step"
    assert axes["rollout/*"] == "rollout/step"
    assert axes["perf/*"] == "rollout/step"
    # GRPO: the first optimizer step of each rollout starts from the rollout's own log-probs
    # (0 up to float rounding: attention kernels differ with and without autograd; slime's CI allows 1e-8)
    assert abs(history[1]["train/ppo_kl"]) < 1e-6 and abs(history[5]["train/ppo_kl"]) < 1e-6
    assert history[1]["train/global_batch_size"] == 1
    assert [rep.accepted_groups for rep in result.reports] == [1, 1]


class FailingFirstCalls:
    """A real Generator whose first `failures` calls fail like a dead model server."""

    def __init__(self, inner: LocalHFGenerator, failures: int):
        self.inner = inner
        self.failures = failures
        self.calls = 0

    async def generate(self, input_ids: list[int], sampling_params: dict) -> GenerationResult:
        self.calls += 1
        if self.calls <= self.failures:
            raise ModelServiceError("connection refused by 127.0.0.1:30000 (test)")
        return await self.inner.generate(input_ids, sampling_params)


class ListSink:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def log(self, metrics: dict) -> None:
        self.rows.append(dict(metrics))


def test_model_service_error_drops_the_group_and_a_new_wave_resamples_it(tiny_config) -> None:
    reset_process_state()
    config = tiny_config(
        driver={
            "num_rollout": 1,
            "rollout_batch_size": 1,
            "n_samples_per_prompt": 2,
            "over_sampling_batch_size": 1,
            "global_batch_size": 2,
        }
    )
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer)
    catalog = generate_catalog(seed=0, num_products=200)
    generator = FailingFirstCalls(LocalHFGenerator(model, tokenizer, seed=0), failures=1)
    sink = ListSink()
    events: list[tuple[str, dict]] = []
    driver = LocalDriver(
        config,
        model=model,
        tokenizer=tokenizer,
        generator=generator,
        catalog=catalog,
        tasks=load_split(catalog, "train"),
        sink=sink,
        use_wandb=False,
        on_event=lambda name, data: events.append((name, data)),
    )
    report = driver.run_rollout(0)
    groups = [(d["group_index"], d["decision"], d["reason"]) for name, d in events if name == "group"]
    assert groups[0] == (0, "dropped", "technical_error")
    assert groups[1][:2] == (1, "accepted")
    assert report.waves == [1, 1]  # the drop left remaining < target: slime's rule fetched a new wave
    row = report.rollout_row
    assert row["rollout/shopsim/technical_group_drop_count"] == 1
    assert row["rollout/shopsim/technical_group_drop_rate"] == 1.0  # 1 dropped / 1 accepted group
    assert row["rollout/dynamic_filter/drop_technical_error"] == 1
    assert row["rollout/shopsim/scored_rate"] == pytest.approx(3 / 4)  # the failed trajectory is unscorable
    assert row["rollout/shopsim/train_group_count"] == 1
    assert len(report.train_rows) == 1 and sink.rows[1]["train/step"] == 0

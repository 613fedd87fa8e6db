"""PPO on the local backend end to end (tiny model): the records a run leaves, read back from
metrics.jsonl, and a check that fails when a required PPO metric is missing or non-finite."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from shopsimrl.errors import ConfigError
from shopsimrl.local.config import RunConfig
from shopsimrl.local.run import run_training
from shopsimrl.metrics import names as m
from shopsimrl.metrics.ppo_records import REQUIRED_ROLLOUT_KEYS, ppo_record_problems, split_rows
from shopsimrl.storage import read_jsonl
from shopsimrl.tracking import WandbSettings

REPO = Path(__file__).resolve().parents[2]
NO_WANDB = WandbSettings.from_env({"USE_WANDB": "0"})
PPO = {"advantage_estimator": "ppo", "num_rollout": 2, "global_batch_size": 2}


def _rows(stage_dir: Path) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(stage_dir / "metrics.jsonl").records if isinstance(r, dict)]


@pytest.fixture
def ppo_rows(tiny_config: Callable[..., RunConfig]) -> list[dict[str, Any]]:
    result = run_training(tiny_config(driver=PPO), settings=NO_WANDB, echo=lambda _line: None)
    return _rows(result.stage_dir)


def test_a_ppo_run_records_every_required_metric_finite(ppo_rows: list[dict[str, Any]]) -> None:
    assert ppo_record_problems(ppo_rows) == []
    split = split_rows(ppo_rows)
    # 2 rollouts x (4 trajectories / global_batch_size 2) = 2 steps each, critic and actor, same train/step
    assert [r[m.TRAIN_STEP.name] for r in split.critic_rows] == [0, 1, 2, 3]
    assert [r[m.TRAIN_STEP.name] for r in split.actor_rows] == [0, 1, 2, 3]
    assert [r[m.ROLLOUT_STEP.name] for r in split.ppo_rollout_rows] == [0, 1]
    for row in split.critic_rows:
        assert row[m.TRAIN_CRITIC_GLOBAL_BATCH_SIZE.name] == 2.0
        assert row[m.TRAIN_CRITIC_LR_PG0.name] == pytest.approx(1e-3)  # the critic's own optimizer
    for row in split.actor_rows:
        assert row[m.TRAIN_LR_PG0.name] == pytest.approx(1e-3)  # tiny_run_config's actor lr
    rollout_rows = [r for r in ppo_rows if m.PERF_ROLLOUT_TIME.name in r]
    # slime logs no zero-std counts under ppo (`_compute_zero_std_metrics`)
    assert not any(k.startswith(m.ZERO_STD_COUNT_PREFIX) for r in rollout_rows for k in r)
    perf_rows = [r for r in ppo_rows if m.PERF_STEP_TIME.name in r]
    assert all(m.PERF_LOG_PROBS_TIME.name in r for r in perf_rows)  # a critic always needs the old pass


def test_the_first_optimizer_step_of_a_rollout_starts_from_the_old_policy(ppo_rows: list[dict[str, Any]]) -> None:
    # The old log-probs come from the pass before any step: the first step's ratio is 1 (slime's CI check).
    first_steps = [r for r in split_rows(ppo_rows).actor_rows if r[m.TRAIN_STEP.name] in (0, 2)]
    # float32 log-softmax of the same weights in other batch shapes
    assert all(abs(r[m.TRAIN_PPO_KL.name]) < 1e-6 for r in first_steps)


def test_critic_only_rollouts_step_the_critic_alone(tiny_config: Callable[..., RunConfig]) -> None:
    config = tiny_config(driver={**PPO, "num_critic_only_steps": 1})
    rows = _rows(run_training(config, settings=NO_WANDB, echo=lambda _line: None).stage_dir)
    split = split_rows(rows)
    assert [r[m.TRAIN_STEP.name] for r in split.critic_rows] == [0, 1, 2, 3]
    assert [r[m.TRAIN_STEP.name] for r in split.actor_rows] == [2, 3]  # rollout 0 trained the critic only
    assert ppo_record_problems(rows) == []
    first_perf = next(r for r in rows if m.PERF_STEP_TIME.name in r)
    assert m.PERF_ACTOR_TRAIN_TIME.name not in first_perf  # absent, never a made-up 0


def _without(rows: list[dict[str, Any]], which: int, key: str) -> list[dict[str, Any]]:
    out = [dict(r) for r in rows]
    del out[which][key]
    return out


def test_the_check_fails_on_a_missing_or_non_finite_metric(
    ppo_rows: list[dict[str, Any]], tmp_path: Path
) -> None:
    critic = next(i for i, r in enumerate(ppo_rows) if m.TRAIN_CRITIC_VALUE_LOSS.name in r)
    assert ppo_record_problems(_without(ppo_rows, critic, m.TRAIN_CRITIC_VALUE_LOSS.name)) == [
        "critic row train/step=0: missing train/critic-value_loss"
    ]
    # a NaN written to metrics.jsonl and read back from disk, as the smoke reads it
    actor = next(i for i, r in enumerate(ppo_rows) if m.TRAIN_PG_LOSS.name in r and r[m.TRAIN_STEP.name] == 1)
    broken = [dict(r) for r in ppo_rows]
    broken[actor][m.TRAIN_PG_LOSS.name] = math.nan
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in broken))
    assert ppo_record_problems(read_jsonl(path).records) == ["actor row train/step=1: not finite: train/pg_loss=nan"]
    # a rollout step without its PPO row
    second = [r for r in ppo_rows if not (m.ROLLOUT_VALUES.name in r and r[m.ROLLOUT_STEP.name] == 1)]
    assert ppo_record_problems(second) == [f"rollout/step=1: no row with {', '.join(REQUIRED_ROLLOUT_KEYS)}"]
    # no critic at all (a GRPO run's records)
    grpo_like = [r for r in ppo_rows if not any(k.startswith("train/critic-") for k in r)]
    assert ppo_record_problems(grpo_like) == ["no critic optimizer step: no train/step row with train/critic-* keys"]


def test_critic_section_and_estimators_are_validated(tiny_config: Callable[..., RunConfig]) -> None:
    with pytest.raises(ConfigError) as grpo_critic:
        tiny_config(driver={}, critic={"lr": 1e-3})
    assert "critic: only read with driver.advantage_estimator: ppo (it is 'grpo'); remove it" in str(grpo_critic.value)
    with pytest.raises(ConfigError) as gspo:
        tiny_config(driver={"advantage_estimator": "gspo"})
    assert "driver.advantage_estimator: 'gspo' is not one the local backend runs (grpo, ppo)" in str(gspo.value)
    config = tiny_config(driver={"advantage_estimator": "ppo"})
    assert config.uses_critic and config.critic_config.lr == 1e-3  # defaults without a critic: section


def test_ppo_micro_smoke_passes_and_reports_explained_variance_beside_the_verdict(tmp_path: Path) -> None:
    raw = yaml.safe_load((REPO / "configs/local/smoke_ppo.yaml").read_text())
    raw["run"]["runs_root"] = str(tmp_path / "runs")
    raw["model"]["name"] = "tiny"
    raw["driver"]["rollout_max_response_len"] = 8
    raw["shopsim"].update({"max_turns": 2, "max_new_tokens_per_turn": 8, "catalog": {"seed": 0, "num_products": 200},
                           "skillbank": str(REPO / "configs/skillbank.example.json")})  # fmt: skip
    config = tmp_path / "smoke_ppo.yaml"
    config.write_text(yaml.safe_dump(raw))
    env = {"PATH": "/usr/bin:/bin", "USE_WANDB": "0", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "shopsimrl.cli", "train", "smoke", "--config", str(config), "--no-progress"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = (tmp_path / "runs").glob("local-smoke-ppo-*/train/smoke_report.json")
    report = json.loads(path.read_text())
    assert report["passed"] is True
    status = {c["name"]: (c["required"], c["status"]) for c in report["criteria"]}
    for name in ("ppo_values_returns_advantages", "ppo_actor_loss_finite", "ppo_critic_loss_finite",
                 "ppo_actor_optimizer_steps", "ppo_critic_optimizer_steps"):  # fmt: skip
        assert status[name] == (True, "pass")
    evidence = {c["name"]: c["evidence"] for c in report["criteria"]}
    assert evidence["ppo_critic_optimizer_steps"] == "2 step(s) (need >= 2): train/step = [0, 1]"
    assert evidence["ppo_actor_optimizer_steps"] == "2 step(s) (need >= 2): train/step = [0, 1]"
    observations = report["observations"]
    assert set(observations) == {"explained_variance", "explained_variance_negative_steps", "reward_spread",
                                 "in_group_reward_difference", "note"}  # fmt: skip
    assert observations["note"].startswith("engineering pass is not capability gain")
    assert "explained_variance" not in status  # reported, never judged
    assert "observations (not part of pass)" in proc.stdout
    if not observations["in_group_reward_difference"]:  # the tiny model's usual smoke: no reward signal
        assert "GRPO" not in evidence["in_group_reward_difference"]
        assert "the rewards carried no signal" in evidence["in_group_reward_difference"]

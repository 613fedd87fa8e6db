"""`shopsimrl train ...` as a real subprocess: smoke report, failure record on SIGTERM, torn-tolerant metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from shopsimrl.local.commands import train
from shopsimrl.local.config import load_round_train_config, load_run_config
from shopsimrl.storage import read_jsonl

REPO = Path(__file__).resolve().parents[2]


def _tiny_yaml(tmp_path: Path, **driver: object) -> Path:
    raw = yaml.safe_load((REPO / "configs/local/smoke.yaml").read_text())
    raw["run"]["runs_root"] = str(tmp_path / "runs")
    raw["model"]["name"] = "tiny"
    raw["driver"].update({"rollout_max_response_len": 8, **driver})
    raw["shopsim"].update(
        {"max_turns": 2, "max_new_tokens_per_turn": 8, "catalog": {"seed": 0, "num_products": 200}}
    )
    raw["shopsim"]["skillbank"] = str(REPO / "configs/skillbank.example.json")
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["USE_WANDB"] = "0"
    return env


def test_smoke_writes_a_passing_report_with_evidence(tmp_path: Path) -> None:
    config = _tiny_yaml(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "shopsimrl.cli", "train", "smoke", "--config", str(config), "--no-progress"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reports = list((tmp_path / "runs").glob("local-smoke-*/train/smoke_report.json"))
    assert len(reports) == 1  # its own, timestamped run directory
    report = json.loads(reports[0].read_text())
    assert report["schema_version"] == 1 and report["passed"] is True
    status = {c["name"]: (c["required"], c["status"]) for c in report["criteria"]}
    assert status == {
        "startup_summary": (True, "pass"),
        "optimizer_step_completed": (True, "pass"),
        "valid_group_every_step": (True, "pass"),
        "slime_native_rollout_keys": (True, "pass"),
        "shopsim_rollout_keys": (True, "pass"),
        "first_batch_keys": (True, "pass"),
        # a random tiny model never buys the right product: all-zero rewards are a warning only
        "in_group_reward_difference": (False, "warn"),
    }
    evidence = {c["name"]: c["evidence"] for c in report["criteria"]}
    assert (
        "mode=smoke dtype=float32 model=tiny groups=1 samples_per_group=4 rollouts=1 steps_per_rollout=1 "
        "total_batches=1 devices=cpu:1" in evidence["startup_summary"]
    )
    assert evidence["optimizer_step_completed"] == "1 optimizer step(s): train/step = [0]"
    assert "rollout/shopsim/chunk/read-the-constraints/inclusion_rate=1" in evidence["first_batch_keys"]
    assert not list(reports[0].parent.glob("checkpoints*"))
    assert "PASS  optimizer_step_completed" in proc.stdout and '{"passed": true}' in proc.stdout


def test_smoke_refuses_a_non_smoke_config(tmp_path: Path) -> None:
    config = _tiny_yaml(tmp_path)
    raw = yaml.safe_load(config.read_text())
    raw["run"]["mode"] = "train"
    config.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(train, ["smoke", "--config", str(config)])
    assert result.exit_code == 1
    assert "run.mode is 'train'; a smoke config needs run.mode: smoke" in result.output


def test_bad_config_reports_every_problem(tmp_path: Path) -> None:
    config = _tiny_yaml(tmp_path, global_batch_size=3, rollout_batch_size=0)
    raw = yaml.safe_load(config.read_text())
    raw["shopsim"]["q"] = {"start": 2.0}
    raw["driver"]["bogus_flag"] = 1
    config.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(train, ["run", "--config", str(config)])
    assert result.exit_code == 1
    assert "(3 problem(s))" in result.output
    assert "driver.rollout_batch_size: Input should be greater than or equal to 1" in result.output
    assert "driver.bogus_flag: Extra inputs are not permitted" in result.output
    assert "shopsim.q.start: Input should be less than or equal to 1" in result.output


def test_shipped_configs_validate() -> None:
    for name in ("smoke", "train"):
        config = load_run_config(REPO / "configs/local" / f"{name}.yaml")
        assert config.run.mode.value == name
    assert load_round_train_config(REPO / "configs/local/demo_round.yaml").run.mode.value == "demo"
    smoke = load_run_config(REPO / "configs/local/smoke.yaml")
    assert smoke.driver.num_steps_per_rollout == 1 and smoke.driver.save_interval is None


def _start_long_run(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    config = _tiny_yaml(tmp_path, num_rollout=200)
    raw = yaml.safe_load(config.read_text())
    raw["run"]["mode"] = "train"
    config.write_text(yaml.safe_dump(raw))
    proc = subprocess.Popen(
        [sys.executable, "-m", "shopsimrl.cli", "train", "run", "--config", str(config), "--no-progress"],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    metrics = tmp_path / "runs" / "local-smoke" / "train" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if metrics.exists() and len(read_jsonl(metrics).records) >= 2:
            return proc, metrics
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"the run did not reach its second logged row: {proc.communicate()[0]}")


def test_sigterm_mid_run_leaves_a_failure_record_and_a_readable_metrics_file(tmp_path: Path) -> None:
    proc, metrics = _start_long_run(tmp_path)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, output
    records = list((metrics.parent / "failures").glob("*/failure.json"))
    assert len(records) == 1
    record = json.loads(records[0].read_text())
    assert record["schema_version"] == 1
    assert record["signal"] == "SIGTERM"
    assert record["exception"]["type"] == "builtins.SystemExit"
    assert "Traceback" in record["exception"]["traceback"]
    assert record["run_id"] == "local-local-smoke"
    assert record["recorded_as_reward"] is None
    assert record["config"]["driver"]["num_rollout"] == 200
    assert record["peak_memory"]["cpu"]["peak_rss_bytes"] > 0
    assert record["device"]["cuda_devices"] == []
    assert record["checkpoint"]["configured"] is False
    read = read_jsonl(metrics)
    assert read.problems == [] and len(read.records) >= 2
    assert all(isinstance(r.get("_step"), int) for r in read.records)


@pytest.mark.slow
def test_sigkill_mid_run_leaves_a_readable_metrics_file(tmp_path: Path) -> None:
    proc, metrics = _start_long_run(tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    read = read_jsonl(metrics)  # a torn last line would be reported in read.problems, never raised
    assert len(read.records) >= 2
    assert all(p.line_number == len(read.records) + 1 for p in read.problems)
    assert not (metrics.parent / "failures").exists()  # SIGKILL cannot be caught: no record is possible


def test_every_train_command_has_help_with_an_example() -> None:
    runner = CliRunner()
    for name in ("demo", "run", "smoke"):
        result = runner.invoke(train, [name, "--help"])
        assert result.exit_code == 0
        assert "Example: shopsimrl train" in result.output

"""`wandb verify`: metrics.jsonl against the offline W&B history of the same stage."""

import shutil

import pytest
from click.testing import CliRunner

from shopsimrl.storage import append_jsonl, read_jsonl
from shopsimrl.storage.jsonl import dumps_record
from shopsimrl.tracking import StageLogger, WandbSettings
from shopsimrl.tracking.commands import wandb_group
from shopsimrl.tracking.verify import offline_history, verify_stage


@pytest.fixture(scope="module")
def stage(wandb_offline_module):
    settings = WandbSettings.from_env(overrides={"enabled": True, "group": "verify"})
    stage_dir = wandb_offline_module.root / "stage"
    with StageLogger(stage_dir, stage="train", settings=settings) as log:
        for rollout in range(1, 6):
            log.log({"rollout/step": rollout, "rollout/raw_reward": rollout / 10, "perf/rollout_time": 3.0})
            log.log({"train/step": rollout * 2, "train/loss": 0.1 * rollout, "train/grad_norm": 1.5})
        log.log({"custom/value": 7})  # no axis: matched by _step
    return stage_dir, log.wandb_run_file


def test_identical_values_pass(stage):
    stage_dir, run_file = stage
    report = verify_stage(stage_dir, offline_history(run_file))
    # 5 x (rollout/step, raw_reward, rollout_time) + 5 x (train/step, loss, grad_norm) + custom/value
    assert (report.equal, report.different, report.missing_in_wandb, report.wandb_only) == (31, 0, 0, 0)
    assert report.ok
    assert (report.local_rows, report.wandb_rows) == (11, 11)


def test_a_changed_value_and_a_row_wandb_never_saw_are_reported(stage, tmp_path):
    stage_dir, run_file = stage
    copy = tmp_path / "stage"
    shutil.copytree(stage_dir, copy)
    records = read_jsonl(copy / "metrics.jsonl").records
    records[3]["train/loss"] = 0.2000001  # W&B has 0.2
    (copy / "metrics.jsonl").write_text("".join(dumps_record(r) + "\n" for r in records))
    append_jsonl(copy / "metrics.jsonl", {"_step": 11, "train/step": 12, "train/loss": 0.9})
    report = verify_stage(copy, offline_history(run_file))
    assert (report.equal, report.different, report.missing_in_wandb) == (30, 1, 2)
    [diff] = report.differences
    assert (diff.key, diff.axis, diff.axis_value, diff.local, diff.wandb) == (
        "train/loss",
        "train/step",
        4.0,
        0.2000001,
        0.2,
    )
    assert sorted(report.missing_examples) == [
        ("train/loss", "train/step", 12.0),
        ("train/step", "_step", 11.0),
    ]
    assert not report.ok

    result = CliRunner().invoke(wandb_group, ["verify", str(copy), "--run-file", str(run_file)])
    assert result.exit_code == 1
    assert "overlapping numeric values: 31   equal: 30   different: 1" in result.output
    assert "DIFFERENT train/loss at train/step=4: local 0.2000001 != W&B 0.2" in result.output
    assert "MISSING in W&B: train/loss at train/step=12" in result.output
    assert result.output.rstrip().endswith("FAILED")


def test_cli_finds_the_run_file_from_the_status_file(stage):
    stage_dir, run_file = stage
    result = CliRunner().invoke(wandb_group, ["verify", str(stage_dir)])
    assert result.exit_code == 0, result.output
    assert f"against {run_file}" in result.output
    assert result.output.rstrip().endswith("OK: every local value is in W&B, identical")


def test_cli_without_a_run_file_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(wandb_group, ["verify", str(tmp_path)])
    assert result.exit_code == 1
    assert f"Error: {tmp_path}/wandb_status.json not found: pass --run-file or --run-path" in result.output


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"schema_version": 99, "run_file": "x.wandb"}', "schema_version 99 is not supported (this version reads 1)"),
        ('{"run_file": "x.wandb"}', "schema_version None is not supported (this version reads 1)"),
        ('{"schema_version": 1, "run_f', "not valid JSON: Unterminated string starting at at line 1 column 23"),
        ("[1]", "expected a JSON object, got list"),
    ],
)
def test_cli_rejects_a_status_file_it_cannot_read(tmp_path, content, problem):
    (tmp_path / "wandb_status.json").write_text(content)
    result = CliRunner().invoke(wandb_group, ["verify", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output == f"Error: {tmp_path}/wandb_status.json: {problem}\n"

"""The offline-run reader: a format canary against `wandb leet inspect --json`, and torn tails."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shopsimrl.tracking import StageLogger, WandbSettings
from shopsimrl.tracking.offline_reader import OfflineRunFormatError, iter_history, read_offline_run

WANDB_CLI = Path(sys.executable).parent / "wandb"


@pytest.fixture(scope="module")
def run_file(wandb_offline_module):
    settings = WandbSettings.from_env(overrides={"enabled": True, "group": "canary"})
    stage = wandb_offline_module.root / "stage"
    with StageLogger(stage, stage="train", settings=settings, config={"lr": 0.5}) as log:
        # Enough rows, with long keys, to span several 32 KiB blocks (records split FIRST/MIDDLE/LAST).
        for step in range(400):
            log.log({"train/step": step, "train/loss": 1.0 / (step + 1), f"train/{'k' * 300}": step * 0.5})
        log.log_table("eval/table", ["a"], [[1], [2]])
    return log.wandb_run_file


def _leet(*args):
    env = {**os.environ}
    out = subprocess.run(
        [str(WANDB_CLI), "leet", "inspect", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout


def _flat(row, prefix=""):
    # leet prints a history item's nested path joined with "."; our reader rebuilds the nesting.
    out = {}
    for key, value in row.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def test_canary_history_summary_config_and_exit_code_match_leet_inspect(run_file):
    ours = read_offline_run(run_file)
    assert run_file.stat().st_size > 3 * 32768
    records = [json.loads(line) for line in _leet("--json", str(run_file)).splitlines() if line.strip()]
    leet_history = [r["history"]["item"] for r in records if r["type"] == "history"]
    assert len(ours.history) == len(leet_history) == 401
    assert [_flat(row) for row in ours.history] == leet_history
    assert ours.record_count == len(records)
    summary = json.loads(_leet("--summary", "--json", str(run_file)))
    assert summary["exit_code"] == ours.exit_code == 0
    assert summary["state"] == "finished"
    assert summary["config"] == ours.config == {"lr": 0.5}
    assert summary["run_id"] == ours.info.run_id
    assert summary["summary"]["train/loss"] == ours.summary["train/loss"] == 1.0 / 400
    assert (
        summary["summary"]["eval/table"]["path"] == ours.summary["eval/table"]["path"] == ours.tables[0].path
    )


@pytest.mark.parametrize("cut", [7 + 3, 5000, 32768 + 100, 70000])
def test_torn_tail_stops_cleanly_and_is_reported(run_file, tmp_path, cut):
    data = run_file.read_bytes()
    torn = tmp_path / "run-torn.wandb"
    torn.write_bytes(data[:cut])
    run = read_offline_run(torn)
    assert run.exit_code is None  # an unfinished run either way
    if run.torn is None:
        # Record sizes vary with timestamps: a cut can land exactly on a record or block boundary,
        # which leaves a shorter but well-formed file (fewer records, no torn one).
        assert run.record_count < read_offline_run(run_file).record_count
    else:
        assert run.torn.path == str(torn)
        assert run.torn.offset <= cut
    whole = read_offline_run(run_file).history
    assert run.history == whole[: len(run.history)]
    assert list(iter_history(torn)) == run.history


def test_corrupted_byte_stops_at_the_checksum(run_file, tmp_path):
    data = bytearray(run_file.read_bytes())
    data[40000] ^= 0xFF
    bad = tmp_path / "run-bad.wandb"
    bad.write_bytes(bytes(data))
    run = read_offline_run(bad)
    assert run.torn is not None and run.torn.reason in {"checksum mismatch"} and run.torn.offset <= 40000


def test_not_a_wandb_file(tmp_path):
    path = tmp_path / "run-x.wandb"
    path.write_bytes(b"hello world, not wandb")
    with pytest.raises(OfflineRunFormatError, match=r"run-x.wandb: not a W&B v0 transaction log"):
        read_offline_run(path)


def test_inspect_command(run_file):
    from click.testing import CliRunner

    from shopsimrl.tracking.commands import wandb_group

    result = CliRunner().invoke(wandb_group, ["inspect", str(run_file)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == str(run_file)
    assert "group canary  job_type train" in lines[1]
    assert "history rows 401" in lines[2]
    assert "exit code 0" in lines[3]

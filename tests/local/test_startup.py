"""Checks before any expensive work: a used run directory, unwritable outputs, a warm start that cannot fit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from shopsimrl.local.commands import train
from shopsimrl.local.config import run_config_from_mapping
from shopsimrl.local.run import run_training
from shopsimrl.storage import read_jsonl
from shopsimrl.tracking import WandbSettings

try:
    from shopsimrl.errors import StartupError
except ImportError:  # before the fix: let the tests run and fail on behaviour
    StartupError = Exception

REPO = Path(__file__).resolve().parents[2]
LOCAL_ONLY = WandbSettings.from_env({"USE_WANDB": "0"})


def _config_file(tmp_path: Path, runs_root: Path, **changes: dict) -> Path:
    raw = {
        "run": {"group": "g-round-000", "runs_root": str(runs_root), "mode": "train"},
        "model": {"name": "tiny", "seed": 0},
        "driver": {"num_rollout": 1, "rollout_batch_size": 1, "n_samples_per_prompt": 2,
                   "global_batch_size": 2, "rollout_max_response_len": 8},
        "shopsim": {"max_turns": 2, "max_new_tokens_per_turn": 8, "catalog": {"num_products": 200}},
    }  # fmt: skip
    for section, values in changes.items():
        raw[section] = {**raw.get(section, {}), **values}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _run_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "USE_WANDB": "0", "HOME": str(config.parent), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "shopsimrl.cli", "train", "run", "--config", str(config), "--no-progress", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip


def test_a_second_run_into_the_same_run_directory_is_refused_and_the_first_is_kept(tmp_path: Path) -> None:
    config = _config_file(tmp_path, tmp_path / "runs")
    first = CliRunner().invoke(train, ["run", "--config", str(config), "--no-progress"], env={"USE_WANDB": "0"})
    assert first.exit_code == 0, first.output
    stage = tmp_path / "runs" / "g-round-000" / "train"
    metrics = (stage / "metrics.jsonl").read_bytes()
    traces = sorted(p.relative_to(stage) for p in (stage / "traces").rglob("*"))
    second = CliRunner().invoke(train, ["run", "--config", str(config), "--no-progress"], env={"USE_WANDB": "0"})
    assert second.exit_code == 1
    entries = sorted(p.name for p in stage.iterdir())
    assert entries[:4] == ["local_run.json", "metrics.jsonl", "traces", "triage.jsonl"]  # local_run.json: what it saved
    assert second.output == (
        f"Error: cannot start the run: run directory {stage} already holds a run "
        f"({', '.join(entries[:3])}{', ...' if len(entries) > 3 else ''}); a second "
        "run would mix its metrics and traces into it. Give this run its own directory "
        "(--set run.group=NEW-NAME) or move the old one away\n"
    )
    assert (stage / "metrics.jsonl").read_bytes() == metrics
    assert sorted(p.relative_to(stage) for p in (stage / "traces").rglob("*")) == traces
    assert not (stage / "failures").exists()  # a refusal to start is not a crash


def test_a_run_directory_with_only_failure_records_of_a_run_that_never_started_is_reused(tmp_path: Path) -> None:
    config = run_config_from_mapping(yaml.safe_load(_config_file(tmp_path, tmp_path / "runs").read_text()), "t")
    (config.stage_dir / "failures" / "20260101T000000.000000Z").mkdir(parents=True)
    result = run_training(config, settings=LOCAL_ONLY, echo=lambda _line: None)
    assert len(read_jsonl(result.stage_dir / "metrics.jsonl").records) > 0


def test_each_demo_gets_its_own_run_directory(tmp_path: Path) -> None:
    from shopsimrl.local.commands import demo_run_group

    first, second = demo_run_group("local-demo-round-000"), demo_run_group("local-demo-round-000")
    assert re.fullmatch(r"local-demo-round-000-\d{8}T\d{6}\.\d{6}Z", first)
    assert first != second


def test_an_unwritable_wandb_dir_is_found_before_the_model_is_loaded(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where WANDB_DIR should be")
    raw = yaml.safe_load(
        _config_file(tmp_path, tmp_path / "runs", warm_start={"enabled": True}, shopsim={"max_turns": 12}).read_text()
    )
    config = run_config_from_mapping(raw, "t")
    settings = WandbSettings.from_env({"USE_WANDB": "1", "WANDB_MODE": "offline", "WANDB_DIR": str(blocker)})
    echoed: list[str] = []
    with pytest.raises(StartupError) as excinfo:
        run_training(config, settings=settings, echo=echoed.append)
    assert echoed == []  # the start-up line follows the model load: nothing expensive ran
    assert excinfo.value.problems == [
        f"WANDB_DIR {blocker}: exists and is not a directory",
        f"WANDB_DATA_DIR {blocker}/data: a component of the path is not a directory",
        f"WANDB_CACHE_DIR {blocker}/cache: a component of the path is not a directory",
    ]
    assert not config.stage_dir.exists() or not any(config.stage_dir.iterdir())


def test_a_read_only_run_directory_is_one_line_before_anything_runs(
    tmp_path: Path, read_only_dir: tuple[Path, str]
) -> None:
    root, cause = read_only_dir
    proc = _run_cli(_config_file(tmp_path, root))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == f"Error: cannot start the run: run directory {root}/g-round-000/train: {cause}\n"


def test_a_full_disk_mid_run_is_one_line_naming_the_file(tmp_path: Path, small_disk: Path, fill_file_system) -> None:
    config = _config_file(tmp_path, small_disk)
    stage = small_disk / "g-round-000" / "train"
    stage.mkdir(parents=True)
    filler = fill_file_system(small_disk)
    # One free page: the start-up write probe passes, the run's own files soon do not fit.
    os.truncate(filler, filler.stat().st_size - 4096)
    proc = _run_cli(config)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[-1].startswith(f"Error: cannot write {stage}/") and lines[-1].endswith(": disk full")
    assert any(line.startswith(f"failure record not written: cannot write {stage}/failures/") for line in lines)
    if (stage / "metrics.jsonl").exists():  # whatever was written before the disk filled is whole lines
        assert read_jsonl(stage / "metrics.jsonl").problems == []


def test_a_warm_start_that_cannot_fit_max_turns_is_refused_before_the_model_load(tmp_path: Path) -> None:
    config = run_config_from_mapping(
        yaml.safe_load(_config_file(tmp_path, tmp_path / "runs", warm_start={"enabled": True}).read_text()), "t"
    )
    echoed: list[str] = []
    with pytest.raises(StartupError) as excinfo:
        run_training(config, settings=LOCAL_ONLY, echo=echoed.append)
    assert echoed == []
    match = re.fullmatch(
        r"cannot start the run: shopsim.max_turns=2 is too small for the warm start: the noiseless expert "
        r"needs (\d+) turns on task (\S+) of the train split; set shopsim.max_turns to at least \1 or "
        r"warm_start.enabled: false",
        str(excinfo.value),
    )
    assert match is not None, str(excinfo.value)
    assert int(match.group(1)) > 2


def test_two_demos_write_two_run_directories_in_one_wandb_group(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(REPO)  # the demo config names the skillbank relative to the repository
    sets = [
        f"run.runs_root={tmp_path / 'runs'}", "model.name=tiny", "model.trainable_top_layers=null",
        "warm_start.enabled=false", "driver.num_rollout=1", "driver.rollout_batch_size=1",
        "driver.over_sampling_batch_size=1", "driver.n_samples_per_prompt=2", "driver.global_batch_size=2",
        "driver.rollout_max_response_len=8", "shopsim.max_turns=2", "shopsim.max_new_tokens_per_turn=8",
        "shopsim.catalog={seed: 0, num_products: 200}",
    ]  # fmt: skip
    args = ["demo", *[token for item in sets for token in ("--set", item)]]
    for _ in range(2):
        result = CliRunner().invoke(train, args, env={"USE_WANDB": "0"})
        assert result.exit_code == 0, result.output
    stages = sorted((tmp_path / "runs").glob("local-demo-round-000-*/train"))
    assert len(stages) == 2
    for stage in stages:
        steps = [r["_step"] for r in read_jsonl(stage / "metrics.jsonl").records]
        assert steps == list(range(len(steps)))  # one run per file: _step never restarts

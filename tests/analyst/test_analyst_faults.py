"""Bad input and outages in the analysis stage: nothing is lost silently.

A torn last line of triage.jsonl is skipped and counted; a damaged middle line is one error naming
the file and line, before any lesson; a group whose trace is missing is a counted skip and a
non-zero exit; an analyst-model outage is one line, a non-zero exit and the retry command.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from analyst_helpers import ROOT, Scripts, catalog, play, train_tasks, write_configs, write_group

from shopsimrl.analyst.cards import read_cards
from shopsimrl.analyst.config import load_analysis_config
from shopsimrl.analyst.stage import AnalysisError, run_analysis
from shopsimrl.tracking import WandbSettings

OFF = WandbSettings(enabled=False)


@pytest.fixture
def round_dir(tmp_path: Path) -> tuple[Path, Path]:
    """Three all-wrong groups of a hand-built training; trials off (no model): (config, train dir)."""
    cat = catalog()
    train = tmp_path / "runs" / "round-000" / "train"
    for n, task in enumerate(train_tasks(cat)[:3]):
        episode = play(cat, task, Scripts(cat, task).over_budget())
        write_group(train, step=0, group_index=n, task=task, episodes=[episode, episode])
    return write_configs(tmp_path, trial={"enabled": False}), train


def _cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "scripts/run_shopsimrl.py", "training", "analyze", str(config),
                           "--no-wandb", *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip


def _summary(config: Path) -> dict:
    return json.loads((load_analysis_config(config).analysis_dir / "analysis_summary.json").read_text())


def test_a_torn_last_triage_line_is_reported_skipped_and_counted(round_dir):
    config, train = round_dir
    with open(train / "triage.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"triage_id": "0-3", "rollout_st')  # a kill in the middle of the append
    lines: list[str] = []
    result = run_analysis(load_analysis_config(config), settings=OFF, echo=lines.append)
    assert f"analysis: {train / 'triage.jsonl'}:4: no newline at end (torn write); skipped" in lines
    assert result.summary["skipped_triage"] == 1
    assert result.summary["skipped_triage_reasons"] == [
        {"where": f"{train / 'triage.jsonl'}:4", "reason": "no newline at end (torn write)"}]  # fmt: skip
    assert (result.summary["triage_groups"], result.summary["cards"]) == (3, 3)


def test_a_damaged_middle_triage_line_is_one_error_naming_file_and_line_before_any_lesson(round_dir):
    config, train = round_dir
    path = train / "triage.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text(lines[0] + "this is not json\n" + "".join(lines[1:]), encoding="utf-8")
    done = _cli(config)
    assert done.returncode == 1
    assert done.stderr.strip() == (f"Error: {path}:2: unreadable JSONL record (Expecting value); the training's "
                                   "triage journal is damaged: repair or remove that line, then re-run")  # fmt: skip
    assert not (load_analysis_config(config).analysis_dir / "failure_cards.jsonl").exists()

    path.write_text(lines[0] + '{"task_id": "train-0001", "split": "train"}\n' + "".join(lines[1:]), encoding="utf-8")
    with pytest.raises(AnalysisError) as excinfo:
        run_analysis(load_analysis_config(config), settings=OFF, echo=lambda _: None)
    assert str(excinfo.value).startswith(f"{path}:2: invalid triage record (")


def test_a_missing_group_trace_is_a_counted_skip_and_a_non_zero_exit_until_it_is_back(round_dir):
    config, train = round_dir
    trace = train / "traces" / "step-0" / "group-1.json"
    assert trace.is_file(), sorted(str(p) for p in train.rglob("*.json"))
    moved = trace.rename(trace.with_suffix(".json.away"))
    done = _cli(config)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()
    assert len(last) == 1 and last[0].startswith(
        f"Error: analysis incomplete: 1 all-wrong group(s) skipped, their trace unreadable (first: trace {trace}: "
        "not found); retry: python scripts/run_shopsimrl.py training analyze ")  # fmt: skip
    summary = _summary(config)
    assert summary["skipped_triage"] == 1 and summary["cards"] == 2
    assert summary["skipped_triage_reasons"][0]["reason"] == f"trace {trace}: not found"

    moved.rename(trace)  # the trace is back: the same command finishes the work
    again = _cli(config)
    assert again.returncode == 0, again.stderr
    assert _summary(config)["skipped_triage"] == 0
    assert len(read_cards(load_analysis_config(config).analysis_dir)[0]) == 3


def test_an_analyst_model_outage_ends_with_one_line_a_non_zero_exit_and_the_retry_command(round_dir):
    config, _ = round_dir
    with socket.socket() as sock:  # a port nobody listens on: the endpoint is down
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = ["--set", "lessons.backend=llm", "--set", f"lessons.llm.base_url=http://127.0.0.1:{port}/v1",
           "--set", "lessons.llm.max_retries=0"]  # fmt: skip
    done = _cli(config, *llm)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1
    assert errors[0].startswith("Error: analysis incomplete: 3 of 3 card(s) without a lesson, 0 without a trial "
                                f"(first, card-0-0: connection error to http://127.0.0.1:{port}/v1")  # fmt: skip
    assert errors[0].endswith(f"; retry: python scripts/run_shopsimrl.py training analyze {config} --no-wandb "
                              + " ".join(llm))  # fmt: skip
    assert _summary(config)["cards_by_status"]["analysis_error"] == 3

    assert _cli(config).returncode == 0  # the endpoint back (here: the rules backend), the same command retries
    assert _summary(config)["analysis_errors"] == {}

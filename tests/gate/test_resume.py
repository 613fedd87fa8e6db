"""A SIGKILLed gate (a real subprocess on a tiny checkpoint), resumed, equals an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from shopsimrl.cli import COMMANDS
from shopsimrl.storage import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
# The seed's group name is `training` (`train` stays as its alias); use it once the CLI has it.
GROUP = "training" if "training" in COMMANDS else "train"
PLANNED = 2 * 10 * 2  # two arms x 10 tasks x 2 replicates


def _command(config: Path, runs_root: Path) -> list[str]:
    return [sys.executable, str(ROOT / "scripts" / "run_shopsimrl.py"), GROUP, "online-gate", str(config),
            "--set", f"runs_root={runs_root}", "--set", "design.tasks=10", "--no-wandb", "--no-progress"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "USE_WANDB"}
    return env | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _final(gate_dir: Path) -> list[tuple]:
    records = read_jsonl(gate_dir / "evaluations.jsonl").records
    return sorted((r["pair_id"], r["arm"], r["status"], r["reward"], r["response_sha256"]) for r in records)


def test_sigkilled_gate_resumes_to_byte_identical_contributions(gate_files, tmp_path):
    config = gate_files()
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    done = subprocess.run(_command(config, whole), env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]

    evaluations = killed / "round-000" / "gate" / "evaluations.jsonl"
    _kill_after_lines(_command(config, killed), evaluations, 3)
    gate_dir = killed / "round-000" / "gate"
    assert not (gate_dir / "contributions.json").exists()
    assert 3 <= len(read_jsonl(evaluations).records) < PLANNED

    resumed = subprocess.run(_command(config, killed), env=_env(), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "already final" in resumed.stdout
    reference = whole / "round-000" / "gate"
    assert (gate_dir / "contributions.json").read_bytes() == (reference / "contributions.json").read_bytes()
    selected = [json.loads((d / "contributions.json").read_text())["contributions"] for d in (gate_dir, reference)]
    assert [[r["status"] for r in rows] for rows in selected][0] == [[r["status"] for r in rows] for rows in selected][1]
    assert (gate_dir / "selected_skillbank.json").read_bytes() == (reference / "selected_skillbank.json").read_bytes()
    assert _final(gate_dir) == _final(reference)  # every episode sampled the same tokens (same seeds)


def test_sigterm_stops_the_gate_and_logs_only_coverage_and_complete_zero(gate_files, tmp_path):
    config = gate_files()
    gate_dir = tmp_path / "term" / "round-000" / "gate"
    process = subprocess.Popen(_command(config, tmp_path / "term"), env=_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            evaluations = gate_dir / "evaluations.jsonl"
            if evaluations.exists() and evaluations.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM
    # One line: where it stopped, the coverage, how to resume; no "Task exception was never retrieved".
    lines = [text for text in stderr.splitlines() if text.strip() and not text.startswith("Loading weights")]
    assert len(lines) == 1, stderr  # (transformers' progress bar of the model load aside)
    [line] = lines
    final = len([r for r in read_jsonl(gate_dir / "evaluations.jsonl").records if r["status"] != "technical_failure"])
    assert line == (f"gate stopped by SIGTERM: {final}/{PLANNED} evaluations final (coverage {final / PLANNED:.2f}) in "
                    f"{gate_dir / 'evaluations.jsonl'}; resume: python {ROOT / 'scripts' / 'run_shopsimrl.py'} "
                    f"{GROUP} online-gate {config} --set runs_root={tmp_path / 'term'} --set design.tasks=10 "
                    "--no-wandb --no-progress")  # fmt: skip
    metrics = read_jsonl(gate_dir / "metrics.jsonl").records
    assert len(metrics) == 1
    logged = {k: v for k, v in metrics[0].items() if not k.startswith("_")}
    assert logged.keys() == {"gate/coverage", "gate/complete"} and logged["gate/complete"] == 0
    assert 0 < logged["gate/coverage"] < 1
    assert not (gate_dir / "contributions.json").exists()


def _kill_after_lines(command: list[str], path: Path, lines: int) -> None:
    """Start the gate, SIGKILL it once `path` holds `lines` lines (or it ended), and check it was killed."""
    process = subprocess.Popen(command, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            if path.exists() and path.read_bytes().count(b"\n") >= lines:
                break
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL

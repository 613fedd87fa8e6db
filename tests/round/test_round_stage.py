"""A whole round on the tiny model: three offline W&B runs in one group, the next round's inputs,
resume after a real SIGKILL during the Analyst, and a missing or corrupt checkpoint refused by path."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from round_helpers import ROOT, SKILLBANK, tiny_round, write_round

from shopsimrl.errors import ConfigError
from shopsimrl.models.checkpoint import CheckpointError, checkpoint_sha256
from shopsimrl.round import RoundError, load_round_config, round_config_from_mapping, run_round
from shopsimrl.skills.skillbank import load_skillbank
from shopsimrl.tracking import WandbSettings
from shopsimrl.tracking.offline_reader import find_run_files, read_offline_run


def _quiet(_: str) -> None:
    pass


def test_a_whole_round_logs_three_offline_runs_in_one_group_and_hands_on_a_valid_skillbank(tmp_path, wandb_offline):
    config = round_config_from_mapping(tiny_round(tmp_path), "test")
    settings = WandbSettings.from_env(overrides={"enabled": True, "project": "shopsimrl-test", "group": "other"})
    result = run_round(config, settings=settings, echo=_quiet)

    assert result.ran == ["train", "analysis", "gate"]
    runs = [read_offline_run(path) for path in find_run_files(wandb_offline.wandb_dir)]
    assert sorted(run.info.job_type for run in runs) == ["analysis", "gate", "train"]
    assert {(run.info.project, run.info.group) for run in runs} == {("shopsimrl-test", "tiny-round-000")}
    assert all(run.exit_code == 0 for run in runs)

    round_dir = tmp_path / "runs" / "tiny-round-000"
    state = json.loads((round_dir / "round_state.json").read_text())
    assert {name: (s["status"], s["attempts"]) for name, s in state["stages"].items()} == {
        "train": ("finished", 1), "analysis": ("finished", 1), "gate": ("finished", 1)}  # fmt: skip
    checkpoint = Path(state["stages"]["train"]["outputs"]["checkpoint"])
    assert checkpoint == tmp_path / "checkpoints" / "tiny-round-000" / "rollout-0000"
    assert state["stages"]["train"]["checkpoint_sha256"] == checkpoint_sha256(checkpoint)

    manifest = json.loads((round_dir / "next_round.json").read_text())
    selected = round_dir / "gate" / "selected_skillbank.json"
    assert manifest["next_round"] == "tiny-round-001" and manifest["skillbank"] == str(selected)
    assert manifest["start_checkpoint"] == str(checkpoint)
    assert manifest["start_checkpoint_sha256"] == checkpoint_sha256(checkpoint)
    bank = load_skillbank(manifest["skillbank"])
    # No candidate survives a random tiny model's trials: the next skillbank is this one's chunks.
    assert bank.active_ids == load_skillbank(SKILLBANK).active_ids
    nxt = load_round_config(manifest["config"])
    assert (nxt.group, nxt.train_config().shopsim.skillbank) == ("tiny-round-001", str(selected))
    assert nxt.round.start_checkpoint_sha256 == manifest["start_checkpoint_sha256"]
    assert str(round_dir / "gate" / "proposal_ledger.jsonl") in nxt.analysis_config("x").ledger.history

    report = (round_dir / "round_report.md").read_text()
    assert (round_dir / "round_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for needle in ("| 0 | 0.000 | 0.000 |", "No candidate to test", "shopsimrl wandb inspect", "make wandb-sync",
                   str(manifest["config"])):  # fmt: skip
        assert needle in report, needle

    again = run_round(config, settings=settings, echo=_quiet)
    assert again.ran == []
    assert len(find_run_files(wandb_offline.wandb_dir)) == 3


def _hanging_llm() -> tuple[socket.socket, threading.Event]:
    """A real server on 127.0.0.1 that takes the lesson request and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    asked = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            held.append(connection)
            if connection.recv(65536):
                asked.set()

    threading.Thread(target=serve, daemon=True).start()
    return server, asked


def _files(*roots: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for root in roots for p in sorted(root.rglob("*")) if p.is_file()}


def _cli(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "shopsimrl.cli", "training", "round", str(config), *args]


def test_a_round_killed_during_the_analyst_resumes_without_retraining(tmp_path):
    server, asked = _hanging_llm()
    raw = tiny_round(tmp_path)
    port = server.getsockname()[1]
    raw["analysis"]["lessons"] = {"backend": "llm", "llm": {"base_url": f"http://127.0.0.1:{port}/v1",
                                                           "timeout_s": 600, "max_retries": 0}}  # fmt: skip
    config = write_round(tmp_path, raw)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "USE_WANDB": "0"}
    state_path = tmp_path / "runs" / "tiny-round-000" / "round_state.json"
    process = subprocess.Popen(_cli(config), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert asked.wait(timeout=300), "the analysis stage never asked the lesson server"
        stages = json.loads(state_path.read_text())["stages"]
        assert (stages["train"]["status"], stages["analysis"]["status"]) == ("finished", "running")
        train_dir, checkpoints = tmp_path / "runs" / "tiny-round-000" / "train", tmp_path / "checkpoints"
        time.sleep(0.2)  # let any write still in flight land, so the comparison below is fair
        before = _files(train_dir, checkpoints)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL
    finally:
        process.kill()
        server.close()

    # The lesson server is still down: the re-run uses the rules backend for the remaining cards.
    done = subprocess.run(_cli(config, "--set", "analysis.lessons.backend=rules"), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "train finished at" in done.stdout and "not re-run" in done.stdout
    assert "stage 1/3" not in done.stdout
    assert _files(train_dir, checkpoints) == before
    stages = json.loads(state_path.read_text())["stages"]
    assert {name: (s["status"], s["attempts"]) for name, s in stages.items()} == {
        "train": ("finished", 1), "analysis": ("finished", 2), "gate": ("finished", 1)}  # fmt: skip
    assert (tmp_path / "runs" / "tiny-round-000" / "next_round.json").is_file()


@pytest.fixture
def finished_round(tmp_path):
    config = round_config_from_mapping(tiny_round(tmp_path), "test")
    run_round(config, settings=WandbSettings(enabled=False), echo=_quiet)
    return config, tmp_path / "checkpoints" / "tiny-round-000" / "rollout-0000"


def test_a_missing_checkpoint_is_refused_with_its_path(finished_round):
    config, checkpoint = finished_round
    for path in sorted(checkpoint.iterdir()):
        path.unlink()
    checkpoint.rmdir()
    with pytest.raises(RoundError) as excinfo:
        run_round(config, settings=WandbSettings(enabled=False), echo=_quiet)
    assert str(excinfo.value).startswith(f"{checkpoint}: output of the finished train stage is missing")


def test_a_corrupt_checkpoint_is_refused_with_its_path(finished_round):
    config, checkpoint = finished_round
    weights = checkpoint / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: only the hash can tell
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as excinfo:
        run_round(config, settings=WandbSettings(enabled=False), echo=_quiet)
    assert str(excinfo.value).startswith(f"{checkpoint}: content hash ")


def test_a_start_checkpoint_that_is_not_there_is_refused_before_training(tmp_path):
    raw = tiny_round(tmp_path)
    missing = tmp_path / "checkpoints" / "tiny-round-prev" / "rollout-0009"
    raw["round"].update(start_checkpoint=str(missing), start_checkpoint_sha256="0" * 64)
    with pytest.raises(CheckpointError) as excinfo:
        run_round(round_config_from_mapping(raw, "test"), settings=WandbSettings(enabled=False), echo=_quiet)
    assert str(excinfo.value) == f"{missing}: checkpoint directory not found"
    assert not (tmp_path / "runs" / "tiny-round-000" / "train").exists()


def test_every_problem_of_a_round_config_is_reported_at_once(tmp_path):
    raw = tiny_round(tmp_path, group="no-round-number")
    raw["train"]["run"] = {"group": "x"}
    raw["gate"]["inputs"] = {}
    raw["analysis"]["trial"]["attempts"] = 0
    raw["gate"]["design"]["tasks"] = 0
    rest = [
        "train.run: set by the round (round.group / round.runs_root / round.checkpoints_root / round.mode); remove it",
        "gate.inputs: set by the round (final checkpoint, analysis outputs, the training's skillbank); remove it",
        "analysis.trial.attempts: Input should be greater than or equal to 1",
        "gate.design.tasks: Input should be greater than or equal to 1",
    ]
    with pytest.raises(ConfigError) as excinfo:
        round_config_from_mapping(raw, "round.yaml")
    # A bad round: section does not hide the stage sections' problems.
    assert excinfo.value.problems == ["round.group: String should match pattern "
                                      "'^[A-Za-z0-9][A-Za-z0-9_.-]{0,118}-round-[0-9]{3,}$'", *rest]  # fmt: skip
    raw["round"]["group"] = "tiny-round-000"
    with pytest.raises(ConfigError) as excinfo:
        round_config_from_mapping(raw, "round.yaml")
    assert excinfo.value.problems == rest


def test_a_typo_under_train_does_not_hide_a_typo_under_gate(tmp_path):
    raw = tiny_round(tmp_path)
    raw["train"]["shopsim"]["max_turnz"] = 2
    raw["gate"]["design"]["replicatez"] = 1
    with pytest.raises(ConfigError) as excinfo:
        round_config_from_mapping(raw, "round.yaml")
    assert excinfo.value.problems == ["train.shopsim.max_turnz: Extra inputs are not permitted",
                                      "gate.design.replicatez: Extra inputs are not permitted"]  # fmt: skip


def test_a_gate_design_the_validation_split_cannot_hold_is_refused_at_load_before_training(tmp_path):
    raw = tiny_round(tmp_path)
    raw["gate"]["design"]["tasks"] = 10  # the 200-product catalog's validation split has 6 tasks
    config = write_round(tmp_path, raw)
    done = subprocess.run(_cli(config), cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "USE_WANDB": "0"})  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"Error: invalid configuration in {config} (1 problem(s)):",
        "  - gate.design.tasks: 10, but the validation split of the round's catalog (train.shopsim.catalog: seed 0, "
        "200 products) has only 6 tasks",
    ]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "checkpoints").exists()


def test_an_analyst_outage_leaves_the_stage_unfinished_and_the_same_command_retries_it(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on: the analyst model's endpoint is down
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    raw = tiny_round(tmp_path)
    raw["analysis"]["lessons"] = {"backend": "llm", "llm": {"base_url": f"http://127.0.0.1:{port}/v1",
                                                           "max_retries": 0, "timeout_s": 5}}  # fmt: skip
    config = write_round(tmp_path, raw)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "USE_WANDB": "0"}
    done = subprocess.run(_cli(config), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and errors[0].startswith("Error: round: analysis incomplete: ")
    assert "card(s) without a lesson, 0 without a trial (first, card-" in errors[0]
    assert errors[0].endswith(f"; retry: python -m shopsimrl.cli training round {config}")
    round_dir = tmp_path / "runs" / "tiny-round-000"
    stages = json.loads((round_dir / "round_state.json").read_text())["stages"]
    assert {name: s["status"] for name, s in stages.items()} == {"train": "finished", "analysis": "running"}
    assert not (round_dir / "gate").exists()

    # The endpoint is back (here: the rules backend): the same command retries the analysis, not the training.
    again = subprocess.run(_cli(config, "--set", "analysis.lessons.backend=rules"), cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    stages = json.loads((round_dir / "round_state.json").read_text())["stages"]
    assert {name: (s["status"], s["attempts"]) for name, s in stages.items()} == {
        "train": ("finished", 1), "analysis": ("finished", 2), "gate": ("finished", 1)}  # fmt: skip

    # A next round whose start checkpoint does not hash as recorded is refused and creates nothing.
    following = round_dir / "next_round.yaml"
    document = yaml.safe_load(following.read_text())
    document["round"]["start_checkpoint_sha256"] = "0" * 64
    tampered = write_round(tmp_path, document, name="tampered.yaml")
    refused = subprocess.run(_cli(tampered), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert refused.returncode == 1
    assert refused.stderr.strip().startswith(f"Error: {document['round']['start_checkpoint']}: content hash ")
    assert not (tmp_path / "runs" / "tiny-round-001").exists()
    assert not (tmp_path / "checkpoints" / "tiny-round-001").exists()

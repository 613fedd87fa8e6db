"""scripts/container_entry.sh: the train image runs as root; what it writes goes back to the host user."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from ops_helpers import ROOT

ENTRY = str(ROOT / "scripts/container_entry.sh")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root (as in the container)")


def _owners(root: Path) -> set[tuple[int, int]]:
    return {(p.stat().st_uid, p.stat().st_gid) for p in [root, *root.rglob("*")]}


@needs_root
def test_outputs_and_leftovers_belong_to_the_host_user(tmp_path: Path):
    (tmp_path / "runs/old").mkdir(parents=True)  # a killed run's leftover, root-owned
    (tmp_path / "wandb").mkdir()
    env = {**os.environ, "HOST_UID": "12345", "HOST_GID": "23456"}
    result = subprocess.run(["bash", ENTRY, "bash", "-c", "mkdir -p runs/g/train && echo x > runs/g/train/m.jsonl "
                             "&& mkdir -p wandb/offline-run && touch wandb/offline-run/run.wandb && exit 3"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 3  # the command's own exit status
    assert _owners(tmp_path / "runs") == {(12345, 23456)}
    assert _owners(tmp_path / "wandb") == {(12345, 23456)}


@needs_root
def test_default_owner_is_the_checkouts_owner(tmp_path: Path):
    (tmp_path / "configs").mkdir()
    os.chown(tmp_path / "configs", 4321, 8765)
    env = {k: v for k, v in os.environ.items() if k not in ("HOST_UID", "HOST_GID")}
    subprocess.run(["bash", ENTRY, "mkdir", "-p", "checkpoints/x"], cwd=tmp_path, env=env, check=True, timeout=60)
    assert _owners(tmp_path / "checkpoints") == {(4321, 8765)}


@needs_root
def test_sigterm_is_forwarded_and_ownership_still_fixed(tmp_path: Path):
    env = {**os.environ, "HOST_UID": "12345", "HOST_GID": "23456"}
    proc = subprocess.Popen(["bash", ENTRY, "bash", "-c", "mkdir -p runs/g && touch runs/g/started && exec sleep 600"],
                            cwd=tmp_path, env=env)
    for _ in range(600):  # poll until the command is running (no timing assertion)
        if (tmp_path / "runs/g/started").exists():
            break
        try:
            proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            pass
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert _owners(tmp_path / "runs") == {(12345, 23456)}


def test_dry_run_prints_the_chown_and_runs_the_commands_dry_run(tmp_path: Path):
    env = {**os.environ, "HOST_UID": "1000", "HOST_GID": "1001", "DRY_RUN": "1"}
    result = subprocess.run(["bash", ENTRY, "echo", "launcher-dry-run"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60, check=True)
    assert result.stdout == ("# ownership: chown -R 1000:1001 runs checkpoints wandb artifacts before and after: "
                             "echo launcher-dry-run\nlauncher-dry-run\n")


def test_no_command_is_an_error(tmp_path: Path):
    result = subprocess.run(["bash", ENTRY], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr == "container_entry.sh: error: no command given\n"


def _fake_ray(tmp_path: Path) -> dict[str, str]:
    """`ray` on PATH that records its arguments and leaves a file in runs/, as the stopped job would."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text('#!/bin/sh\nmkdir -p runs && printf "%s\\n" "$*" >> runs/ray.log\n')
    (bin_dir / "ray").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOST_UID": "12345", "HOST_GID": "23456"}


def _terminate_when_started(proc: subprocess.Popen, started: Path) -> int:
    for _ in range(600):  # poll until the command is running (no timing assertion)
        if started.exists():
            break
        try:
            proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            pass
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60)


def test_sigterm_stops_the_ray_job_before_the_hand_back(tmp_path: Path):
    """The launcher's command is the `ray job submit` client: the job itself must be stopped too."""
    env = _fake_ray(tmp_path)
    proc = subprocess.Popen(["bash", ENTRY, "bash", "-c", "mkdir -p runs/g && touch runs/g/started && exec sleep 600"],
                            cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    assert _terminate_when_started(proc, tmp_path / "runs/g/started") == 128 + signal.SIGTERM
    assert (tmp_path / "runs/ray.log").read_text() == "stop\n"
    assert "container_entry.sh: stopping the Ray job (ray stop) before handing the outputs back" in proc.stderr.read()
    if os.geteuid() == 0:  # what `ray stop` left behind was handed back too: it ran first
        assert _owners(tmp_path / "runs") == {(12345, 23456)}


def test_a_command_that_ends_by_itself_stops_no_ray(tmp_path: Path):
    env = _fake_ray(tmp_path)
    result = subprocess.run(["bash", ENTRY, "bash", "-c", "exit 4"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 4
    assert not (tmp_path / "runs/ray.log").exists()

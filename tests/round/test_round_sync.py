"""`shopsimrl wandb sync` of what two chained tiny rounds logged (train, analysis, gate per round and the
chain's `rounds` run: history, Tables, file artifacts) against the W&B stand-in: everything arrives,
every artifact with the digests wandb staged, and the stand-in refuses nothing."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from round_helpers import tiny_round

from shopsimrl.round import round_config_from_mapping
from shopsimrl.round.backends import LocalBackend
from shopsimrl.round.chain import run_rounds
from shopsimrl.tracking import WandbSettings
from shopsimrl.tracking.offline_reader import read_offline_run
from shopsimrl.tracking.sync import find_offline_runs

BIN = Path(sys.executable).parent


def _read_runs(wandb_dir: Path) -> dict:
    return {run.run_id: read_offline_run(run.run_file) for run in find_offline_runs(wandb_dir)}


def _md5(path: str) -> str:
    return base64.b64encode(hashlib.md5(Path(path).read_bytes()).digest()).decode("ascii")


@pytest.mark.slow
def test_two_synced_rounds_arrive_whole(tmp_path, wandb_offline, wandb_server):
    settings = WandbSettings.from_env(overrides={"enabled": True, "project": "shopsimrl-test"})
    run_rounds(round_config_from_mapping(tiny_round(tmp_path), "test"), count=2,
               settings_for=lambda c: replace(settings, group=c.group), backend=LocalBackend(),
               echo=lambda _: None, on_train_event=lambda *_: None)  # fmt: skip
    # wandb 0.31's run.finish() can return before wandb-core wrote the run file: wait for the exit records.
    deadline = time.monotonic() + 30
    runs = _read_runs(wandb_offline.wandb_dir)
    while any(run.exit_code is None for run in runs.values()):
        assert time.monotonic() < deadline, "offline runs without an exit record 30 s after the rounds"
        time.sleep(0.1)
        runs = _read_runs(wandb_offline.wandb_dir)
    jobs = {(run.info.group, run.info.job_type): run_id for run_id, run in runs.items()}
    assert sorted(jobs) == sorted([(f"tiny-round-00{i}", job) for i in (0, 1) for job in ("train", "analysis", "gate")]
                                  + [("tiny-rounds", "rounds")])  # fmt: skip
    # The bytes wandb staged for each artifact (the sync deletes them once uploaded).
    staged = {(run_id, a.name): {name: _md5(path) for name, path in a.files.items()}
              for run_id, run in runs.items() for a in run.artifacts}  # fmt: skip
    assert {name for _, name in staged} >= {"shopsimrl-analysis", "shopsimrl-gate", "shopsimrl-rounds"}

    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "WANDB_BASE_URL": wandb_server.url,
           "WANDB_API_KEY": "local-" + "a" * 40, "WANDB_X_GRAPHQL_RETRY_MAX": "1",
           "WANDB_X_FILE_STREAM_RETRY_MAX": "1", "WANDB_X_FILE_TRANSFER_RETRY_MAX": "1"}  # fmt: skip
    done = subprocess.run([str(BIN / "shopsimrl"), "wandb", "sync", str(wandb_offline.wandb_dir)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(run.marker.exists() for run in find_offline_runs(wandb_offline.wandb_dir))

    received = wandb_server.snapshot()
    assert received.unexpected == []
    for run_id, local in runs.items():
        server = received.run(run_id)
        assert (server.complete, server.exit_code) == (True, local.exit_code) == (True, 0)
        assert server.history == local.history
        for table in local.tables:
            assert server.files[table.path] == (local.run_dir / "files" / table.path).read_bytes()
    arrived = {}
    for artifact in received.artifacts.values():
        run_id = artifact.run_path.rsplit("/", 1)[1]
        assert artifact.manifest_digests == {name: f.uploaded_digest for name, f in artifact.files.items()}
        arrived[(run_id, artifact.name)] = artifact.manifest_digests
    assert arrived == staged
    # Round 001 logged new versions of round 000's collections; `latest` moved to them.
    gate = received.artifact("shopsimrl-gate")
    assert (gate.version, gate.run_path.rsplit("/", 1)[1]) == (1, jobs[("tiny-round-001", "gate")])

"""The tools image's services on a real CPU round, as `make wandb-sync|report RUNNER=docker` run them:
the upload reaches a W&B-compatible server on 127.0.0.1 (tests/wandb_server.py) value for value, files
land on the bind mounts owned by the invoking user, nothing is written to the container layer, and a
SIGTERM ends a service with one line and nothing torn."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import HOST_UID, MAKE_LINE, chown_tree, make, owners

from shopsimrl.tracking.offline_reader import read_offline_run
from shopsimrl.tracking.sync import credentials_hint, find_offline_runs

pytestmark = [pytest.mark.containers, pytest.mark.timeout(900)]  # whole rounds in containers on 2 cores

API_KEY = "local-" + "a" * 40  # the format wandb checks locally; the stand-in accepts any key


@pytest.fixture
def workspace(round_workspace, tmp_path) -> Path:
    """A fresh copy of the round's workspace for each test (sync marks runs; export writes files)."""
    copy = tmp_path / "ws"
    shutil.copytree(round_workspace, copy, symlinks=True)
    chown_tree(copy)
    return copy


def _without_empty(value):
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v != {}}
    return value


def _sync_env(url: str, **extra: str) -> dict[str, str]:
    return {"WANDB_BASE_URL": url, "WANDB_API_KEY": API_KEY, **extra}


def test_wandb_sync_in_the_tools_image_uploads_every_value_of_the_round(workspace, wandb_server):
    runs = find_offline_runs(workspace / "wandb")
    assert len(runs) == 7  # train, analysis, gate of two rounds, and the chain's `rounds` run
    done = make(workspace, "wandb-sync", env=_sync_env(wandb_server.url))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert all(run.marker.exists() for run in runs)

    received = wandb_server.snapshot()
    groups = set()
    for run in runs:
        local = read_offline_run(run.run_file)
        server = received.run(run.run_id)
        # An empty display name goes out as null.
        assert (server.group, server.job_type, server.name or "") == (
            local.info.group, local.info.job_type, local.info.name or "")  # fmt: skip
        assert server.history == local.history  # every row, every key, every value
        assert server.summary == local.summary
        # wandb's client sends no empty mapping (a config's `rho: {}` never leaves the host): no value lost.
        assert {k: v for k, v in server.config.items() if k != "_wandb"} == _without_empty(local.config)
        groups.add(local.info.group)
    assert {"ctr-round-000", "ctr-round-001"} <= groups
    # Everything the container wrote belongs to the user who owns the clone.
    assert owners(workspace / "wandb") == {HOST_UID}

    again = make(workspace, "wandb-sync", env=_sync_env(wandb_server.url))
    assert again.returncode == 0, again.stderr[-2000:]
    assert wandb_server.snapshot() == received  # a re-run uploads nothing


def test_wandb_sync_without_credentials_says_so_in_one_line(workspace, wandb_server):
    done = make(workspace, "wandb-sync", env={"WANDB_BASE_URL": wandb_server.url})
    assert done.returncode != 0
    service_lines = [line for line in done.stderr.splitlines() if line.strip() and not MAKE_LINE.match(line)]
    assert service_lines == [credentials_hint(wandb_server.url)]
    assert wandb_server.requests == []
    assert not any(run.marker.exists() for run in find_offline_runs(workspace / "wandb"))


def test_report_in_the_tools_image_exports_the_rounds_history(workspace):
    done = make(workspace, "report", env={"WANDB_GROUP": "ctr-round-000"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = workspace / "artifacts" / "analysis" / "wandb"
    exported = sorted(p.name for p in out.rglob("*") if p.is_file())
    assert exported, done.stdout
    assert owners(workspace / "artifacts") == {HOST_UID}
    assert "exported" in done.stdout


def _compose(workspace: Path, *args: str, env: dict[str, str] | None = None, **kwargs):
    command = ["docker", "compose", "-f", "compose.yaml", "-f", "compose.standin.yaml",
               "--env-file", "docker/versions.local.env", *args]  # fmt: skip
    base = {"HOST_UID": str(HOST_UID), "HOST_GID": str(HOST_UID), "PATH": "/usr/local/bin:/usr/bin:/bin"}
    return subprocess.run(command, cwd=workspace, env={**base, **(env or {})}, capture_output=True,
                          text=True, check=False, **kwargs)  # fmt: skip


def test_the_sync_service_writes_nothing_to_the_container_layer(workspace, wandb_server):
    name = "shopsimrl-layer-probe"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    done = _compose(workspace, "run", "--name", name, "-T", "wandb-sync", env=_sync_env(wandb_server.url))
    try:
        assert done.returncode == 0, done.stderr[-2000:]
        diff = subprocess.run(["docker", "diff", name], capture_output=True, text=True, check=True).stdout
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    # Docker creates the bind mounts' mount points (and their parents) in the layer itself.
    mounts = {"/run", "/run/secrets", "/run/secrets/wandb.netrc", "/workspace",
              *(f"/workspace/{name}" for name in ("runs", "checkpoints", "wandb", "artifacts", "configs"))}  # fmt: skip
    written = [line for line in diff.splitlines() if line.split(maxsplit=1)[1] not in mounts]
    assert written == [], "written to the container layer:\n" + "\n".join(written)


@pytest.fixture
def silent_server():
    """A TCP listener on 127.0.0.1 that accepts and never answers: a W&B server that hangs."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(timeout=2)
    for conn in held:
        conn.close()
    listener.close()


def test_sigterm_ends_a_running_sync_with_one_line_and_nothing_torn(workspace, silent_server):
    name = "shopsimrl-sigterm-probe"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    before = {p: p.stat().st_size for p in (workspace / "wandb").rglob("*") if p.is_file()}
    process = subprocess.Popen(
        ["docker", "compose", "-f", "compose.yaml", "-f", "compose.standin.yaml", "--env-file",
         "docker/versions.local.env", "run", "--rm", "--name", name, "-T", "wandb-sync"],
        cwd=workspace, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"HOST_UID": str(HOST_UID), "HOST_GID": str(HOST_UID), "PATH": "/usr/local/bin:/usr/bin:/bin",
             **_sync_env(silent_server)},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until the sync is under way (its container runs)
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", name],
                               capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
        if state == "true":
            break
        time.sleep(0.5)
    time.sleep(5)  # inside: the sync is waiting on the server that never answers
    started = time.monotonic()
    subprocess.run(["docker", "kill", "--signal", "TERM", name], capture_output=True, check=True)
    stdout, stderr = process.communicate(timeout=60)
    took = time.monotonic() - started
    assert process.returncode == 128 + signal.SIGTERM, (process.returncode, stdout, stderr)
    assert took < 20, f"SIGTERM took {took:.0f} s: the service did not stop on it"
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "SIGTERM" in lines[0], stderr
    # Nothing torn: no run marked synced, no file of the offline runs shortened or rewritten.
    assert not any(run.marker.exists() for run in find_offline_runs(workspace / "wandb"))
    for path, size in before.items():
        assert path.stat().st_size == size, path
    assert json.dumps(owners(workspace / "wandb"), default=list) == json.dumps({HOST_UID}, default=list)

"""`make rounds COUNT=2 RUNNER=docker CPU=1` for real: the round runner's docker backend drives the CPU
services of compose.cpu.yaml (train, analyze, gate in the CPU image on the stand-ins) on the tiny
profile, as a user would rehearse the GPU round; then the faults a training host meets.

The services run for the user HOST_UID (4242): what they write is theirs. make itself runs as root
here (this machine's venv interpreter lives under /root, which no other user may enter), so the files
the host's round runner writes after the last service (next round, reports) are root's; on a user's
machine they are the user's own."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import HOST_UID, MAKE_LINE, ROOT, chown_tree, make, make_workspace, owners

from shopsimrl.tracking.offline_reader import read_offline_run
from shopsimrl.tracking.sync import find_offline_runs

pytestmark = [pytest.mark.containers, pytest.mark.timeout(900)]  # whole rounds in containers on 2 cores

TINY = "ROUND_CONFIG=configs/local/tiny_round.yaml"
GROUPS = ("tiny-round-000", "tiny-round-001")


def _workspace(path: Path) -> Path:
    workspace = make_workspace(path)
    chown_tree(workspace)
    return workspace


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def _state(workspace: Path, group: str) -> dict:
    return _json(workspace / "runs" / group / "round_state.json")["stages"]


def _errors(done: subprocess.CompletedProcess) -> list[str]:
    """What the round said on stderr, without make's own closing line."""
    return [line for line in done.stderr.splitlines() if line.strip() and not MAKE_LINE.match(line)]


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    workspace = _workspace(tmp_path_factory.mktemp("docker-chain") / "ws")
    done = make(workspace, "rounds", "COUNT=2", "CPU=1", TINY, "ROUND_ARGS=--wandb")
    return workspace, done


def test_two_rounds_run_in_containers_and_chain(chain):
    workspace, done = chain
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first, second = (_state(workspace, group) for group in GROUPS)
    assert all(stage["status"] == "finished" for state in (first, second) for stage in state.values())
    # Round 001 trains on from round 000's final checkpoint with the skillbank its gate selected.
    config = yaml.safe_load((workspace / "runs" / GROUPS[1] / "train_config.yaml").read_text())
    assert config["model"]["checkpoint"] == first["train"]["outputs"]["checkpoint"]
    assert config["shopsim"]["skillbank"] == f"runs/{GROUPS[0]}/gate/selected_skillbank.json"
    assert config["warm_start"]["enabled"] is False and second["train"]["warm_start_steps"] == 0
    manifests = [_json(workspace / "runs" / group / "round_manifest.json") for group in GROUPS]
    assert manifests[0]["seeds"] != manifests[1]["seeds"]
    assert {m["backend"] for m in manifests} == {"docker"}
    # Each stage ran in its service, its output teed to the round's logs.
    for group in GROUPS:
        for stage in ("train", "analysis", "gate"):
            assert (workspace / "runs" / group / "logs" / f"{stage}.log").stat().st_size > 0
    # What the services wrote, on the host's bind mounts, belongs to HOST_UID: the stages' outputs, the
    # checkpoints, the six offline W&B runs of the stages.
    for group in GROUPS:
        for stage in ("train", "analysis", "gate"):
            assert owners(workspace / "runs" / group / stage) == {HOST_UID}, (group, stage)
    assert owners(workspace / "checkpoints") == {HOST_UID}
    stage_runs = [run for run in find_offline_runs(workspace / "wandb") if read_offline_run(run.run_file).info.group in GROUPS]
    assert len(stage_runs) == 6 and all(owners(run.path) == {HOST_UID} for run in stage_runs)
    # The W&B runs are offline on the host, three per round in its group, and the chain's summary run.
    groups = sorted(read_offline_run(run.run_file).info.group for run in find_offline_runs(workspace / "wandb"))
    assert groups == [GROUPS[0]] * 3 + [GROUPS[1]] * 3 + ["tiny-rounds"]
    assert (workspace / "runs" / "tiny-rounds" / "rounds_report.md").is_file()
    assert f"make round RUNNER=docker CPU=1 ROUND_CONFIG=runs/{GROUPS[1]}/next_round.yaml" in done.stdout


def test_the_docker_round_writes_what_the_local_backend_writes(chain, tmp_path):
    """Same profile and seeds on RUNNER=local: the same checkpoints byte for byte (one torch build, one
    machine), the same Analyst and gate outputs; what differs is the backend, the W&B directory, the
    timestamps, and the docker round's derived service configs and logs."""
    workspace, _ = chain
    local = make_workspace(tmp_path / "local")
    done = subprocess.run(["make", "--no-print-directory", "rounds", "COUNT=2", "RUNNER=local", TINY,
                           "ROUND_ARGS=--wandb", f"VENV={ROOT / '.venv'}"], cwd=local, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for group in GROUPS:
        ours, theirs = workspace / "runs" / group, local / "runs" / group
        assert _state(workspace, group)["train"]["checkpoint_sha256"] == _state(local, group)["train"]["checkpoint_sha256"]
        for name in ("train/triage.jsonl", "analysis/candidate_pool.json", "gate/contributions.json",
                     "gate/selected_skillbank.json"):  # fmt: skip
            assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
        summary = [_json(root / "analysis" / "analysis_summary.json") for root in (ours, theirs)]
        assert [{k: v for k, v in s.items() if k != "finished_at"} for s in summary][0] == \
            [{k: v for k, v in s.items() if k != "finished_at"} for s in summary][1]  # fmt: skip
        manifests = [_json(root / "round_manifest.json") for root in (ours, theirs)]
        for manifest in manifests:
            manifest.pop("backend"), manifest["tracking"].pop("dir")
        assert manifests[0] == manifests[1]
        docker_only = {"analysis_config.yaml", "gate_config.yaml", "logs"}
        assert {p.name for p in ours.iterdir()} - docker_only == {p.name for p in theirs.iterdir()}


def test_make_wandb_sync_uploads_both_rounds(chain, tmp_path, wandb_server):
    workspace, _ = chain
    copy = tmp_path / "ws"
    shutil.copytree(workspace, copy, symlinks=True)
    chown_tree(copy)  # the host runner's own files too (root's here: see the module's docstring)
    done = make(copy, "wandb-sync", env={"WANDB_BASE_URL": wandb_server.url, "WANDB_API_KEY": "local-" + "a" * 40})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    runs = find_offline_runs(copy / "wandb")
    assert all(run.marker.exists() for run in runs) and len(runs) == 7
    received = wandb_server.snapshot()
    assert sorted(received.run(run.run_id).group for run in runs) == [GROUPS[0]] * 3 + [GROUPS[1]] * 3 + ["tiny-rounds"]


def _first_container(service: str, timeout: float = 180) -> str:
    """The id of the compose service's container once it runs (`compose run` names it *-run-*)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = subprocess.run(["docker", "ps", "-q", "--filter", "label=com.docker.compose.project=shopsimrl",
                              "--filter", f"label=com.docker.compose.service={service}"],
                             capture_output=True, text=True, check=False).stdout.split()  # fmt: skip
        if ids:
            return ids[0]
        time.sleep(0.2)
    raise AssertionError(f"no {service} container within {timeout:g} s")


def _kill_when_running(service: str, signal_name: str, found: list[str], started: Path | None = None) -> threading.Thread:
    """Signal the service's container once it runs and, with `started`, once that path exists (the
    stage is under way)."""

    def kill():
        container = _first_container(service)
        deadline = time.monotonic() + 120
        while started is not None and not started.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        found.append(container)
        subprocess.run(["docker", "kill", "--signal", signal_name, container], capture_output=True, check=False)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def test_a_killed_service_leaves_its_stage_unfinished_and_the_same_command_resumes(tmp_path):
    """SIGTERM to the train container, then SIGKILL to the analyze container, then a service that exits
    1: each stops the round with one line naming the stage, its log and the retry command; the state
    says which stage; the same command resumes without redoing a finished stage."""
    workspace = _workspace(tmp_path / "ws")
    round_dir = workspace / "runs" / GROUPS[0]
    command = ("round", "CPU=1", TINY)

    found: list[str] = []
    killer = _kill_when_running("train", "TERM", found, started=round_dir / "train")
    done = make(workspace, *command)
    killer.join(timeout=5)
    assert found and done.returncode != 0
    [line] = _errors(done)
    assert line.startswith(f"Error: train: compose service 'train' killed by SIGTERM; its output is in "
                           f"{round_dir.relative_to(workspace)}/logs/train.log; retry: ")  # fmt: skip
    assert _state(workspace, GROUPS[0])["train"]["status"] == "running"

    found.clear()
    killer = _kill_when_running("analyze", "KILL", found)
    done = make(workspace, *command)
    killer.join(timeout=5)
    assert found and done.returncode != 0
    [line] = _errors(done)
    assert "Error: analysis: compose service 'analyze' killed by SIGKILL; its output is in" in line
    state = _state(workspace, GROUPS[0])
    assert (state["train"]["status"], state["analysis"]["status"]) == ("finished", "running")
    assert any(p.name.startswith("train.unfinished-") for p in round_dir.iterdir())  # the killed attempt, kept
    checkpoint = workspace / state["train"]["outputs"]["checkpoint"]
    trained_at = checkpoint.stat().st_mtime_ns

    # The round's only trace gone: the Analyst exits 1 (a card it cannot write), the round names it.
    traces = round_dir / "train" / "traces"
    aside = tmp_path / "traces"
    shutil.move(traces, aside)
    done = make(workspace, *command)
    assert done.returncode != 0
    [line] = _errors(done)
    assert "Error: analysis: compose service 'analyze' exited 1; its output is in" in line and "retry: " in line

    shutil.move(aside, traces)
    done = make(workspace, *command)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    state = _state(workspace, GROUPS[0])
    assert [state[s]["status"] for s in ("train", "analysis", "gate")] == ["finished"] * 3
    assert state["train"]["attempts"] == 2 and state["analysis"]["attempts"] == 3
    assert checkpoint.stat().st_mtime_ns == trained_at  # the finished training was not redone
    for stage in ("train", "analysis", "gate"):  # what a killed service left was handed back too
        assert owners(round_dir / stage) == {HOST_UID}, stage


def test_a_missing_image_is_one_line_that_says_make_images(tmp_path, pins):
    workspace = _workspace(tmp_path / "ws")
    image = pins["SHOPSIMRL_CPU_IMAGE"]
    kept = f"{image}-kept-by-test"
    subprocess.run(["docker", "tag", image, kept], check=True, capture_output=True)
    subprocess.run(["docker", "rmi", image], check=True, capture_output=True)
    try:
        done = make(workspace, "round", "CPU=1", TINY)
    finally:
        subprocess.run(["docker", "tag", kept, image], check=True, capture_output=True)
        subprocess.run(["docker", "rmi", kept], check=True, capture_output=True)
    assert done.returncode != 0
    assert _errors(done) == [f"Error: train: the image {image} of compose service 'train' is not built: run "
                             "`make images` (with the same RUNNER, STANDIN and CPU settings), then the same command"]

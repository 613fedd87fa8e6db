"""`shopsimrl wandb sync` end to end: real offline runs, the real `wandb sync`, the W&B stand-in
(tests/wandb_server.py) as the server; what arrives is compared with the runs' own transaction logs."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from wandb_server import READY_FILE, RECORDS_FILE, WandbServer, load_records

from shopsimrl.tracking.offline_reader import read_offline_run
from shopsimrl.tracking.sync import credentials_hint, find_offline_runs

BIN = Path(sys.executable).parent
SERVER_SCRIPT = Path(__file__).parents[1] / "wandb_server.py"
API_KEY = "local-" + "a" * 40  # the format wandb checks locally; the stand-in accepts any key
ENTITY, PROJECT = "shop-team", "shopsimrl-sync"
# Quiet runs: no console capture, system stats, metadata or requirements (nothing host-dependent).
_QUIET = dict(
    console="off",
    x_disable_stats=True,
    x_disable_meta=True,
    x_disable_machine_info=True,
    x_save_requirements=False,
    disable_git=True,
    save_code=False,
    silent=True,
)
_RUNS = {
    "train": dict(
        name="alpha",
        group="round-000",
        job_type="train",
        tags=["sync", "stand-in"],
        config={"lr": 0.001, "model": {"name": "tiny", "layers": 2}, "seeds": [1, 2]},
        rows=[
            {"train/loss": 2.5 / (s + 1), "train/reward": 0.1 * s, "train/tokens": 128 * s, "lr": 0.001}
            for s in range(4)
        ],
        summary={"best/reward": 0.3},
        exit_code=0,
    ),
    "eval": dict(
        name="beta",
        group="round-000",
        job_type="eval",
        tags=[],
        config={"split": "validation", "tasks": 62},
        rows=[{"eval/success": 0.25 * s, "eval/turns": 3 + s, "eval/name_ok": s % 2 == 0} for s in range(3)],
        summary={"verdict": "insufficient"},
        exit_code=1,
    ),
}


def _write_run(root: Path, spec: dict) -> Path:
    import wandb  # imported where used, as shopsimrl does

    # dir= always: wandb keeps the WANDB_DIR of the first run in this process for later ones.
    run = wandb.init(
        dir=str(root),
        entity=ENTITY,
        project=PROJECT,
        name=spec["name"],
        group=spec["group"],
        job_type=spec["job_type"],
        tags=spec["tags"],
        config=spec["config"],
        mode="offline",
        settings=wandb.Settings(**_QUIET),
    )
    run_file = Path(run.settings.sync_file)
    for step, row in enumerate(spec["rows"]):
        run.log(row, step=step)
    run.summary.update(spec["summary"])
    run.finish(exit_code=spec["exit_code"])
    return run_file


@pytest.fixture(scope="module")
def offline_runs(wandb_offline_module):
    """WANDB_DIR holding the two offline runs (written once; each test syncs a copy)."""
    for spec in _RUNS.values():
        _write_run(wandb_offline_module.wandb_dir, spec)
    return wandb_offline_module.wandb_dir


@pytest.fixture
def wandb_dir(offline_runs, tmp_path):
    copy = tmp_path / "wandb_dir"
    shutil.copytree(offline_runs / "wandb", copy / "wandb", symlinks=True)
    return copy


def _sync(root: Path, url: str, *, api_key: str | None = API_KEY) -> subprocess.CompletedProcess:
    """The project's command as a user runs it, with wandb's retries bounded."""
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "WANDB_BASE_URL": url,
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_X_GRAPHQL_RETRY_MAX": "1",
        "WANDB_X_GRAPHQL_RETRY_WAIT_MAX_SECONDS": "1",
        "WANDB_X_FILE_STREAM_RETRY_MAX": "1",
        "WANDB_X_FILE_TRANSFER_RETRY_MAX": "1",
    }
    env.pop("WANDB_API_KEY", None)
    if api_key is not None:
        env["WANDB_API_KEY"] = api_key
    command = [str(BIN / "shopsimrl"), "wandb", "sync", str(root), "--timeout", "60"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def _statuses(stdout: str) -> dict[str, str]:
    return {line.split()[0]: line.split()[1] for line in stdout.splitlines()[1:-1]}


def test_every_local_value_arrives_and_the_runs_are_marked_synced(wandb_dir, wandb_server):
    runs = find_offline_runs(wandb_dir)
    done = _sync(wandb_dir, wandb_server.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _statuses(done.stdout) == {run.run_id: "synced" for run in runs}
    assert all(run.marker.exists() for run in runs)

    received = wandb_server.snapshot()
    assert sorted(received.runs) == sorted(f"{ENTITY}/{PROJECT}/{run.run_id}" for run in runs)
    for run in runs:
        local = read_offline_run(run.run_file)
        server = received.run(run.run_id)
        spec = _RUNS[local.info.job_type]
        assert (server.entity, server.project, server.run_id) == (
            local.info.entity,
            local.info.project,
            local.info.run_id,
        )
        assert (server.group, server.job_type, server.name) == (
            local.info.group,
            local.info.job_type,
            local.info.name,
        )
        assert server.tags == (local.info.tags or None) == (spec["tags"] or None)  # no tags: wandb sends null
        assert {k: v for k, v in server.config.items() if k != "_wandb"} == local.config == spec["config"]
        # Every row, every key (the metrics and _step, _runtime, _timestamp), every value, in order.
        assert server.history == local.history
        assert [{k: row[k] for k in spec["rows"][0]} for row in server.history] == spec["rows"]
        assert [row["_step"] for row in server.history] == list(range(len(spec["rows"])))
        assert server.summary == local.summary
        assert {k: server.summary[k] for k in spec["summary"]} == spec["summary"]
        assert (server.complete, server.exit_code) == (True, local.exit_code) == (True, spec["exit_code"])
        # The files wandb sync uploads: the summary and the config as W&B stores them.
        assert sorted(server.files) == ["config.yaml", "wandb-summary.json"]
        assert json.loads(server.files["wandb-summary.json"]) == local.summary
        config_file = yaml.safe_load(server.files["config.yaml"])
        assert {k: v["value"] for k, v in config_file.items() if k != "_wandb"} == spec["config"]


def test_a_second_sync_uploads_nothing(wandb_dir, wandb_server):
    assert _sync(wandb_dir, wandb_server.url).returncode == 0
    before = wandb_server.snapshot()
    again = _sync(wandb_dir, wandb_server.url)
    assert again.returncode == 0, again.stdout + again.stderr
    assert set(_statuses(again.stdout).values()) == {"already_synced"}
    # wandb's own skip too: the real `wandb sync` on the same directory sends nothing either.
    env = {
        **os.environ,
        "WANDB_BASE_URL": wandb_server.url,
        "WANDB_API_KEY": API_KEY,
        "WANDB_SILENT": "false",
    }
    direct = subprocess.run(
        [str(BIN / "wandb"), "sync", "--yes", str(wandb_dir / "wandb")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert direct.returncode == 0
    assert "Skipped 2 synced run(s)" in direct.stdout + direct.stderr
    assert wandb_server.snapshot() == before


def test_without_credentials_one_line_and_nothing_uploaded(wandb_dir, wandb_server):
    done = _sync(wandb_dir, wandb_server.url, api_key=None)  # and no netrc: HOME and NETRC are isolated
    assert done.returncode == 1
    assert done.stderr == credentials_hint(wandb_server.url) + "\n"  # exactly one line
    assert set(_statuses(done.stdout).values()) == {"no_credentials"}
    assert wandb_server.requests == []
    assert not any(run.marker.exists() for run in find_offline_runs(wandb_dir))


def test_an_operation_the_stand_in_lacks_is_a_loud_failure(wandb_offline, tmp_path):
    """A logged Table makes `wandb sync` create an artifact (CreateArtifact), which the stand-in does not
    implement. wandb swallows the refusal: exit 0, "synced", marker written, the error only in its debug
    log. So the server records the request and `check()` (which the fixture runs) fails the test."""
    import wandb

    run = wandb.init(
        dir=str(wandb_offline.wandb_dir), project=PROJECT, mode="offline", settings=wandb.Settings(**_QUIET)
    )
    run.log({"eval/table": wandb.Table(columns=["task", "ok"], data=[["t1", True], ["t2", False]])}, step=0)
    run.finish()
    with WandbServer(lifetime_s=60) as server:
        done = _sync(wandb_offline.wandb_dir, server.url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert _statuses(done.stdout) == {run.id: "synced"}
        # A GraphQL operation nobody implemented, sent by hand, is refused and recorded the same way.
        request = urllib.request.Request(
            f"{server.url}/graphql",
            data=json.dumps({"query": "query Viewer { viewer { id } }"}).encode(),
            headers={"Authorization": "Basic YXBpOmtleQ==", "Content-Type": "application/json"},  # api:key
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 400
        assert json.loads(refused.value.read()) == {
            "errors": [{"message": "W&B stand-in: GraphQL operation not implemented by the stand-in"}]
        }
    assert server.unexpected == [
        "POST /graphql CreateArtifact: GraphQL operation not implemented by the stand-in",
        "POST /graphql Viewer: GraphQL operation not implemented by the stand-in",
    ]
    with pytest.raises(AssertionError) as failure:
        server.check()
    assert str(failure.value).startswith(
        "the W&B stand-in refused 2 request(s) it does not implement: POST /graphql CreateArtifact"
    )
    [log] = wandb_offline.wandb_dir.glob("wandb/logs/debug-sync*.log")
    assert "failed to log artifact" in log.read_text()
    assert server.snapshot().run(run.id).history[0]["eval/table"]["_type"] == "table-file"  # the rest arrived


def test_standalone_process_writes_its_records_on_request_and_on_exit(wandb_dir, tmp_path):
    records = tmp_path / "records"
    process = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), "--port", "0", "--record-dir", str(records), "--lifetime", "60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        banner = process.stdout.readline()  # printed once it listens
        ready = json.loads((records / READY_FILE).read_text())
        assert banner.startswith(f"W&B stand-in listening on {ready['url']} for 60 s")
        assert ready["url"] == f"http://127.0.0.1:{ready['port']}" and ready["pid"] == process.pid
        assert _sync(wandb_dir, ready["url"]).returncode == 0

        process.send_signal(signal.SIGUSR1)  # write what arrived so far, keep serving
        deadline = time.monotonic() + 10
        while not (records / RECORDS_FILE).exists():  # written atomically: there means complete
            assert time.monotonic() < deadline and process.poll() is None, "no records 10 s after SIGUSR1"
            time.sleep(0.05)
        asked = load_records(records)
        assert sorted(run.run_id for run in asked.runs.values()) == sorted(
            r.run_id for r in find_offline_runs(wandb_dir)
        )
        assert asked.unexpected == []
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    final = load_records(records / RECORDS_FILE)
    assert final == asked  # nothing arrived in between
    for run in find_offline_runs(wandb_dir):
        assert final.run(run.run_id).history == read_offline_run(run.run_file).history

    # The lifetime bounds it: it stops by itself, writes its records and exits.
    quiet = tmp_path / "quiet"
    short = subprocess.run(
        [sys.executable, str(SERVER_SCRIPT), "--record-dir", str(quiet), "--lifetime", "0.5"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert short.returncode == 0
    assert short.stdout.splitlines()[-1] == f"W&B stand-in lifetime over; records in {quiet / RECORDS_FILE}"
    assert load_records(quiet).runs == {}

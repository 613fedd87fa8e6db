"""`shopsimrl wandb sync` end to end: real offline runs, the real `wandb sync`, the W&B stand-in
(tests/wandb_server.py) as the server; what arrives is compared with the runs' own transaction logs."""

import base64
import collections
import hashlib
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
from wandb_server import COMMITTED, READY_FILE, RECORDS_FILE, Records, WandbServer, load_records

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


def _finish(run, exit_code: int = 0) -> Path:
    """`run.finish()`, then wait for the exit record in the run file, which is returned: wandb 0.31's
    finish can return before wandb-core has written the transaction log (a copy taken at once held only
    its 7-byte header, and `wandb sync` of that copy wrote no marker)."""
    run_file = Path(run.settings.sync_file)
    run.finish(exit_code=exit_code)
    deadline = time.monotonic() + 30
    while read_offline_run(run_file).exit_code is None:
        assert time.monotonic() < deadline, f"no exit record in {run_file} 30 s after run.finish()"
        time.sleep(0.05)
    return run_file


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
    for step, row in enumerate(spec["rows"]):
        run.log(row, step=step)
    run.summary.update(spec["summary"])
    return _finish(run, spec["exit_code"])


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


def _md5(content: bytes) -> str:
    """W&B's file digest: base64 of the MD5."""
    return base64.b64encode(hashlib.md5(content).digest()).decode("ascii")


def _manifest_digest(digests: dict[str, str]) -> str:
    """W&B's MANIFEST_MD5 artifact digest: hex MD5 of a header and each `path:digest` line, by path."""
    lines = "".join(f"{path}:{digests[path]}\n" for path in sorted(digests))
    return hashlib.md5(("wandb-artifact-manifest-v1\n" + lines).encode()).hexdigest()


def _offline_run(root: Path, **init):
    import wandb

    return wandb.init(dir=str(root), mode="offline", settings=wandb.Settings(**_QUIET), **init)


def _artifact(name: str, type_: str, files: dict[str, Path], **options):
    """A wandb.Artifact as StageLogger.log_artifact builds it: files and directories under given names."""
    import wandb

    artifact = wandb.Artifact(name, type=type_, **options)
    for inside, path in files.items():
        if path.is_dir():
            artifact.add_dir(str(path), name=inside)
        else:
            artifact.add_file(str(path), name=inside)
    return artifact


def test_a_table_and_a_file_artifact_arrive_whole_with_their_digests(wandb_offline, wandb_server, tmp_path):
    import wandb

    outputs = tmp_path / "outputs"
    (outputs / "cards").mkdir(parents=True)
    contents = {
        "summary.json": b'{"verdict": "insufficient"}\n',
        "cards/a.jsonl": b'{"card": 1}\n{"card": 2}\n',
        "cards/b.jsonl": b"",
    }
    for name, content in contents.items():
        (outputs / name).write_bytes(content)
    run = _offline_run(
        wandb_offline.wandb_dir, entity=ENTITY, project=PROJECT, group="round-000", job_type="gate"
    )
    run.log({"gate/table": wandb.Table(columns=["chunk", "delta"], data=[["c1", 0.25], ["c2", -0.5]])})
    files = {"summary.json": outputs / "summary.json", "cards": outputs / "cards"}
    run.log_artifact(
        _artifact("shopsimrl-gate", "gate", files, metadata={"round": "round-000"}), aliases=["round-000"]
    )
    local = read_offline_run(_finish(run))
    [offline] = find_offline_runs(wandb_offline.wandb_dir)
    [table_ref] = local.tables
    table_file = (local.run_dir / "files" / table_ref.path).read_bytes()
    local_artifacts = {a.type: a for a in local.artifacts}
    assert sorted(local_artifacts) == ["gate", "run_table"]
    # The bytes wandb staged for each artifact (under WANDB_DATA_DIR; the sync deletes them).
    staged = {kind: {name: Path(path).read_bytes() for name, path in a.files.items()}
              for kind, a in local_artifacts.items()}  # fmt: skip
    assert staged["gate"] == contents

    done = _sync(wandb_offline.wandb_dir, wandb_server.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _statuses(done.stdout) == {run.id: "synced"}
    assert offline.marker.exists()

    received = wandb_server.snapshot()
    assert received.unexpected == []
    server_run = received.run(run.id)
    assert server_run.files[table_ref.path] == table_file  # the Table's file, as a run file
    assert server_run.history[0]["gate/table"]["path"] == table_ref.path
    assert len(received.artifacts) == 2

    # The Table is also an artifact of its own: the table with its column types, as <key>.table.json.
    table = received.artifact(local_artifacts["run_table"].name)
    assert (table.type, table.state, table.version, table.aliases) == ("run_table", COMMITTED, 0, ["latest"])
    assert (table.entity, table.project, table.run_path) == (ENTITY, PROJECT, server_run.path)
    assert {name: file.content for name, file in table.files.items()} == staged["run_table"]
    table_json = staged["run_table"]["gate/table.table.json"]
    assert json.loads(table_json)["data"] == json.loads(table_file)["data"] == [["c1", 0.25], ["c2", -0.5]]
    assert table.manifest_digests == {"gate/table.table.json": _md5(table_json)}
    assert {name: file.uploaded_digest for name, file in table.files.items()} == table.manifest_digests
    assert table.digest == local_artifacts["run_table"].digest == _manifest_digest(table.manifest_digests)

    # The file artifact: every file byte for byte, W&B's digests, its metadata and aliases.
    gate = received.artifact("shopsimrl-gate")
    assert received.artifact("shopsimrl-gate", alias="round-000") == gate
    assert (gate.type, gate.state, gate.version) == ("gate", COMMITTED, 0)
    assert (sorted(gate.aliases), gate.run_path, gate.metadata) == (
        ["latest", "round-000"],
        server_run.path,
        {"round": "round-000"},
    )
    assert {name: file.content for name, file in gate.files.items()} == contents
    digests = {name: _md5(content) for name, content in contents.items()}
    assert {name: file.uploaded_digest for name, file in gate.files.items()} == digests
    assert gate.manifest_digests == digests
    assert gate.digest == local_artifacts["gate"].digest == _manifest_digest(digests)

    # The artifact part of the protocol as wandb-core spoke it, for two artifacts.
    operations = collections.Counter(r.operation for r in received.requests if r.operation)
    assert {op: n for op, n in operations.items() if "Artifact" in op} == {
        "CreateArtifact": 2, "CreateArtifactManifest": 4, "CreateArtifactFiles": 2, "CommitArtifact": 2}  # fmt: skip
    assert Records.from_json(json.loads(json.dumps(received.to_json()))) == received


def test_the_same_artifact_content_again_is_the_version_already_there(wandb_offline, wandb_server, tmp_path):
    """CreateArtifact with the digest of a committed version answers that version as COMMITTED and wandb
    sends nothing more for it (W&B's digest deduplication); new content is the next version and takes
    `latest`."""
    data = tmp_path / "data.json"
    for content in (b"[1]", b"[1]", b"[2]"):
        data.write_bytes(content)
        run = _offline_run(wandb_offline.wandb_dir, project=PROJECT)
        run.log_artifact(_artifact("shopsimrl-analysis", "analysis", {"data.json": data}))
        _finish(run)
        # `wandb sync` takes the runs in the order of their directory names, offline-run-<date>_<HHMMSS>-<id>:
        # two runs started in the same second would sort by their random ids, not by which came first.
        time.sleep(1.05 - time.time() % 1)

    done = _sync(wandb_offline.wandb_dir, wandb_server.url)  # one run after the other, oldest first
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(_statuses(done.stdout).values()) == {"synced"}

    received = wandb_server.snapshot()
    versions = sorted(received.artifacts.values(), key=lambda a: a.version)
    assert [(a.version, a.aliases, a.files["data.json"].content) for a in versions] == [
        (0, [], b"[1]"),
        (1, ["latest"], b"[2]"),
    ]
    operations = collections.Counter(r.operation for r in received.requests if r.operation)
    assert (operations["CreateArtifact"], operations["CommitArtifact"]) == (3, 2)


def test_an_operation_the_stand_in_lacks_is_a_loud_failure(wandb_offline, tmp_path):
    """An alert of an offline run makes `wandb sync` send NotifyScriptableRunAlert, which the stand-in does
    not implement (StageLogger sends no alert from an offline run). wandb swallows the refusal: exit 0,
    "synced", marker written, the error only in its debug log. So the server records the request and
    `check()` (which the fixture runs) fails the test."""
    run = _offline_run(wandb_offline.wandb_dir, project=PROJECT)
    run.log({"train/loss": 1.5}, step=0)
    run.alert(title="reward collapsed", text="train/reward fell to 0")
    _finish(run)
    with WandbServer(lifetime_s=60) as server:
        done = _sync(wandb_offline.wandb_dir, server.url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert _statuses(done.stdout) == {run.id: "synced"}
        # Sent by hand: an operation nobody implemented, and a known one in a shape the stand-in does not
        # know, are refused and recorded the same way.
        for query, variables, reason in (
            ("query Viewer { viewer { id } }", {}, "GraphQL operation not implemented by the stand-in"),
            ("mutation CommitArtifact($id: ID!) { x }", {"id": "a"}, "request shape not understood (KeyError: 'artifactID')"),
        ):  # fmt: skip
            request = urllib.request.Request(
                f"{server.url}/graphql",
                data=json.dumps({"query": query, "variables": variables}).encode(),
                headers={
                    "Authorization": "Basic YXBpOmtleQ==",
                    "Content-Type": "application/json",
                },  # api:key
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 400
            assert json.loads(refused.value.read()) == {"errors": [{"message": f"W&B stand-in: {reason}"}]}
    assert server.unexpected == [
        "POST /graphql NotifyScriptableRunAlert: GraphQL operation not implemented by the stand-in",
        "POST /graphql Viewer: GraphQL operation not implemented by the stand-in",
        "POST /graphql CommitArtifact: request shape not understood (KeyError: 'artifactID')",
    ]
    with pytest.raises(AssertionError) as failure:
        server.check()
    assert str(failure.value).startswith(
        "the W&B stand-in refused 3 request(s) it does not implement: POST /graphql NotifyScriptableRunAlert"
    )
    [log] = wandb_offline.wandb_dir.glob("wandb/logs/debug-sync*.log")
    assert "failed to notify scriptable run alert" in log.read_text()
    assert server.snapshot().run(run.id).history[0]["train/loss"] == 1.5  # the rest arrived


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

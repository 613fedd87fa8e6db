"""`wandb sync`: the real binary's dry run, and a fake `wandb` on PATH for the server-side outcomes."""

import http.server
import os
import socket
import stat
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from shopsimrl.tracking import StageLogger, WandbSettings
from shopsimrl.tracking.commands import wandb_group
from shopsimrl.tracking.sync import (
    SyncStatus,
    credentials_hint,
    credentials_source,
    default_base_url,
    find_offline_runs,
    format_table,
    sync_runs,
)

# A fake `wandb`: behaviour chosen per run id by FAKE_WANDB_<run id>; "marker" writes the .synced marker.
_FAKE = """#!/bin/sh
run_dir="$3"
run_file=$(ls "$run_dir"/run-*.wandb)
id=$(basename "$run_file" .wandb | sed 's/^run-//')
eval behaviour=\\$FAKE_WANDB_$id
echo "fake wandb $1 $2 for $id: $behaviour"
case "$behaviour" in
  marker) touch "$run_file.synced"; exit 0 ;;
  nomarker) echo "ERROR Error initializing run: connection refused"; exit 0 ;;
  fail) echo "Error: No API key configured."; exit 1 ;;
  hang) sleep 60 ;;
esac
"""


def _fake_run(root: Path, run_id: str) -> None:
    run_dir = root / "wandb" / f"offline-run-20260101_000000-{run_id}"
    run_dir.mkdir(parents=True)
    (run_dir / f"run-{run_id}.wandb").write_bytes(b":W&B\xe1\xbe\x00")


@pytest.fixture
def fake_wandb(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "wandb"
    script.write_text(_FAKE)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("WANDB_API_KEY", "local-" + "a" * 40)  # the credentials check passes; the fake needs none
    # The reachability check before syncing connects to the server: a listening socket stands in.
    with socket.create_server(("127.0.0.1", 0)) as server:
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
        yield script


def test_marker_not_exit_code_decides_and_hang_is_killed(tmp_path, fake_wandb, monkeypatch):
    root = tmp_path / "wandbdir"
    for run_id, behaviour in [("aaa1", "marker"), ("bbb2", "nomarker"), ("ccc3", "fail"), ("ddd4", "hang")]:
        _fake_run(root, run_id)
        monkeypatch.setenv(f"FAKE_WANDB_{run_id}", behaviour)
    _fake_run(root, "eee5")
    (root / "wandb" / "offline-run-20260101_000000-eee5" / "run-eee5.wandb.synced").touch()
    (root / "wandb" / "run-20260101_000000-online1").mkdir()  # an online run dir: never synced by us

    results = sync_runs(root, timeout_s=2)
    assert {r.run.run_id: r.status for r in results} == {
        "aaa1": SyncStatus.SYNCED,
        "bbb2": SyncStatus.NO_MARKER,
        "ccc3": SyncStatus.FAILED,
        "ddd4": SyncStatus.TIMEOUT,
        "eee5": SyncStatus.ALREADY_SYNCED,
    }
    by_id = {r.run.run_id: r for r in results}
    assert by_id["ccc3"].exit_code == 1
    assert by_id["ddd4"].seconds < 10
    assert "killed after 2 s" in by_id["ddd4"].detail
    assert "Error initializing run" in by_id["bbb2"].detail
    assert format_table(results).splitlines()[-1] == "5 run(s): 2 ok, 3 failed"

    # A second pass skips what is synced now and retries only the rest.
    monkeypatch.setenv("FAKE_WANDB_bbb2", "marker")
    monkeypatch.setenv("FAKE_WANDB_ccc3", "marker")
    monkeypatch.setenv("FAKE_WANDB_ddd4", "marker")
    result = CliRunner().invoke(wandb_group, ["sync", str(root), "--timeout", "5"])
    assert result.exit_code == 0, result.output
    assert [line.split()[:2] for line in result.output.splitlines()[1:-1]] == [
        ["aaa1", "already_synced"],
        ["bbb2", "synced"],
        ["ccc3", "synced"],
        ["ddd4", "synced"],
        ["eee5", "already_synced"],
    ]


def test_cli_exits_non_zero_when_a_run_fails(tmp_path, fake_wandb, monkeypatch):
    root = tmp_path / "wandbdir"
    _fake_run(root, "fff6")
    monkeypatch.setenv("FAKE_WANDB_fff6", "nomarker")
    result = CliRunner().invoke(wandb_group, ["sync", str(root)])
    assert result.exit_code == 1
    fields = result.output.splitlines()[1].split()
    assert (fields[0], fields[1], fields[3]) == ("fff6", "no_marker", "0")


def test_dry_run_with_the_real_wandb_binary(wandb_offline, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    settings = WandbSettings.from_env(overrides={"enabled": True})
    with StageLogger(tmp_path / "stage", stage="train", settings=settings) as log:
        log.log({"train/step": 1, "train/loss": 0.5})
    [run] = find_offline_runs(wandb_offline.wandb_dir)
    assert run.run_id == log.run_id
    results = sync_runs(wandb_offline.wandb_dir, dry_run=True, timeout_s=60)
    assert [(r.status, r.exit_code) for r in results] == [(SyncStatus.WOULD_SYNC, 0)]
    assert "Would sync 1 run(s)" in results[0].detail
    assert not run.synced


def test_missing_directory_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(wandb_group, ["sync", str(tmp_path / "nope")])
    assert result.exit_code == 1
    assert f"Error: W&B directory {tmp_path / 'nope'} does not exist" in result.output


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the block ends: nothing listens there


def _real_offline_run(tmp_path: Path) -> None:
    settings = WandbSettings.from_env(overrides={"enabled": True})
    with StageLogger(tmp_path / "stage", stage="train", settings=settings) as log:
        log.log({"train/step": 1, "train/loss": 0.5})


def test_an_unreachable_server_is_reported_before_any_upload(wandb_offline, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    _real_offline_run(tmp_path)
    port = _closed_port()
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_API_KEY", "local-" + "a" * 40)
    [result] = sync_runs(wandb_offline.wandb_dir, timeout_s=20)
    assert (result.status, result.exit_code) == (SyncStatus.UNREACHABLE, None)
    assert result.detail.startswith(f"server unreachable: cannot connect to 127.0.0.1:{port} (")
    assert not result.run.synced
    cli = CliRunner().invoke(wandb_group, ["sync", str(wandb_offline.wandb_dir), "--timeout", "20"])
    assert cli.exit_code == 1
    assert f"server unreachable: cannot connect to 127.0.0.1:{port}" in cli.output


class _Unauthorized(http.server.BaseHTTPRequestHandler):
    """A W&B server that refuses every request: `wandb sync` fails fast, after writing its debug log."""

    def _refuse(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"errors": [{"message": "unauthorized"}]}')

    do_GET = do_POST = _refuse

    def log_message(self, *args) -> None:
        pass


def test_wandb_sync_debug_log_stays_under_the_wandb_dir(wandb_offline, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    _real_offline_run(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unauthorized)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("WANDB_API_KEY", "local-" + "a" * 40)
        elsewhere = tmp_path / "cwd"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        monkeypatch.delenv("WANDB_DIR")  # the directory comes from the argument only
        [result] = sync_runs(wandb_offline.wandb_dir, timeout_s=60)
    finally:
        server.shutdown()
        thread.join()
    assert not result.status.ok
    assert list(elsewhere.rglob("*")) == []
    assert len(list(wandb_offline.wandb_dir.glob("wandb/logs/debug-sync*.log"))) == 1


def test_server_url_comes_from_the_environment_then_wandb_settings_file(tmp_path):
    from shopsimrl.tracking.sync import server_url

    (tmp_path / "settings").write_text("[default]\nbase_url = https://wandb.example.internal\n")
    env = {"WANDB_CONFIG_DIR": str(tmp_path)}
    assert server_url(env) == "https://wandb.example.internal"
    assert server_url({**env, "WANDB_BASE_URL": "http://127.0.0.1:8080"}) == "http://127.0.0.1:8080"
    import wandb

    # Without either, wandb's own default server (0.31 changed it), read from wandb itself.
    assert server_url({"WANDB_CONFIG_DIR": str(tmp_path / "none")}) == wandb.Settings().base_url


def test_without_credentials_nothing_is_uploaded_and_the_fix_is_named(wandb_offline, tmp_path, monkeypatch):
    """A real offline run, no WANDB_API_KEY and no netrc (wandb_offline isolates HOME and NETRC): the
    credentials are checked before the server (the closed port is never tried) and before any upload."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    _real_offline_run(tmp_path)
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("WANDB_BASE_URL", url)
    [result] = sync_runs(wandb_offline.wandb_dir, timeout_s=20)
    assert (result.status, result.exit_code, result.seconds) == (SyncStatus.NO_CREDENTIALS, None, 0.0)
    assert result.detail == f"no W&B credentials for 127.0.0.1; nothing uploaded (server {url})"
    assert not result.run.synced
    assert list(wandb_offline.wandb_dir.glob("wandb/logs/debug-sync*.log")) == []  # wandb sync never started
    cli = CliRunner().invoke(wandb_group, ["sync", str(wandb_offline.wandb_dir)])
    assert cli.exit_code == 1
    assert cli.stdout.splitlines()[1].split()[:2] == [result.run.run_id, "no_credentials"]
    assert cli.stderr == credentials_hint(url) + "\n"
    assert cli.stderr.startswith(
        "no W&B credentials for 127.0.0.1: nothing was uploaded. Provide them one of two ways, then sync again: "
        f"run `wandb login --host {url}` on this host (it writes ~/.netrc, which `make wandb-sync` mounts into "
        "the container), or export WANDB_API_KEY")
    # A dry run needs no credentials.
    [dry] = sync_runs(wandb_offline.wandb_dir, dry_run=True, timeout_s=60)
    assert dry.status is SyncStatus.WOULD_SYNC


def test_credentials_come_from_wandbs_own_sources(tmp_path):
    url = "http://127.0.0.1:8080"
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1:8080 login user password local-" + "b" * 40 + "\n"
                     "machine api.wandb.ai login user password\n")
    assert credentials_source(url, {"WANDB_API_KEY": "k", "NETRC": str(netrc)}) == "WANDB_API_KEY"
    assert credentials_source(url, {"WANDB_IDENTITY_TOKEN_FILE": "/t"}) == "WANDB_IDENTITY_TOKEN_FILE"
    assert credentials_source(url, {"NETRC": str(netrc)}) == f"netrc {netrc}"
    # An entry without a password, another host, compose's /dev/null stand-in, a missing file: none.
    assert credentials_source("https://api.wandb.ai", {"NETRC": str(netrc)}) is None
    assert credentials_source("http://127.0.0.1:9090", {"NETRC": str(netrc)}) is None
    assert credentials_source(url, {"NETRC": "/dev/null"}) is None
    assert credentials_source(url, {"HOME": str(tmp_path / "nobody")}) is None
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".netrc").write_text(netrc.read_text())
    assert credentials_source(url, {"HOME": str(tmp_path / "home")}) == f"netrc {tmp_path / 'home' / '.netrc'}"
    assert "run `wandb login` on this host" in credentials_hint(default_base_url())


@pytest.mark.parametrize("entries", [
    "machine api.forge.coreweave.com login user password local-{key}\n",  # what a 0.31 `wandb login` writes
    "machine api.wandb.ai login user password local-{key}\n",  # an older login: wandb still takes it
    "machine api.wandb.ai login user password\n",  # no key: neither takes it
    "machine wandb.example.internal login user password local-{key}\n",  # another server's entry
])
def test_netrc_credentials_agree_with_wandbs_own_reader(tmp_path, monkeypatch, entries):
    """The default server's credentials, as wandb's own netrc reader finds them (the reference)."""
    from wandb.sdk.lib.wbauth import wbnetrc
    from wandb.sdk.lib.wbauth.host_url import HostUrl

    netrc = tmp_path / "netrc"
    netrc.write_text(entries.format(key="c" * 40))
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    theirs = wbnetrc.read_netrc_auth_with_source(host=HostUrl(default_base_url()))
    ours = credentials_source(default_base_url(), {"NETRC": str(netrc)})
    assert (ours is not None) == (theirs is not None)

"""`shopsimrl wandb sync` of slime's offline layout (three runs, one id: tests/slime_offline_runs.py)
against the W&B stand-in (tests/wandb_server.py): the user finds one run with every process's rows,
as slime's online shared mode would have made it (shopsimrl/tracking/merge.py, docs/wandb.md)."""

import os
import subprocess
import sys
from pathlib import Path

from slime_offline_runs import ROLLOUTS, UPDATES_PER_ROLLOUT, write_slime_offline_runs

from shopsimrl.tracking.export import OfflineHistorySource, export_history
from shopsimrl.tracking.offline_reader import read_offline_run

BIN = Path(sys.executable).parent
API_KEY = "local-" + "a" * 40
GROUP = "slime-round-000"
_BOOKKEEPING = ("_step", "_runtime", "_timestamp")


def _sync(root: Path, url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_BASE_URL": url, "WANDB_API_KEY": API_KEY, "WANDB_ERROR_REPORTING": "false",
           "WANDB_X_GRAPHQL_RETRY_MAX": "1", "WANDB_X_GRAPHQL_RETRY_WAIT_MAX_SECONDS": "1",
           "WANDB_X_FILE_STREAM_RETRY_MAX": "1", "WANDB_X_FILE_TRANSFER_RETRY_MAX": "1"}  # fmt: skip
    return subprocess.run([str(BIN / "shopsimrl"), "wandb", "sync", str(root), "--timeout", "60"], env=env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip


def _metrics(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in _BOOKKEEPING}


def test_slimes_same_id_offline_runs_arrive_as_one_run_with_every_processs_rows(wandb_offline, wandb_server, tmp_path):
    files = write_slime_offline_runs(wandb_offline.wandb_dir, GROUP)
    run_id = files[0].stem.removeprefix("run-")
    local = sorted((row for f in files for row in read_offline_run(f).history), key=lambda row: row["_timestamp"])
    assert len(local) == ROLLOUTS * (2 + UPDATES_PER_ROLLOUT)

    done = _sync(wandb_offline.wandb_dir, wandb_server.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[1].split()[:2] == [run_id, "synced"]
    assert f"merged from 3 directories: {', '.join(f.parent.name for f in files)}" in done.stdout

    received = wandb_server.snapshot()
    assert [key.rsplit("/", 1)[1] for key in received.runs] == [run_id]  # one run, as online
    server = received.run(run_id)
    assert (server.group, server.name, server.complete, server.exit_code) == (GROUP, GROUP, True, 0)
    assert [_metrics(row) for row in server.history] == [_metrics(row) for row in local]
    assert [row["_step"] for row in server.history] == list(range(len(local)))
    last = {k: v for row in local for k, v in _metrics(row).items()}  # the last value of every key
    assert {k: server.summary[k] for k in last} == last

    again = _sync(wandb_offline.wandb_dir, wandb_server.url)
    assert again.returncode == 0 and again.stdout.splitlines()[1].split()[:2] == [run_id, "already_synced"]
    assert wandb_server.snapshot().run(run_id).history == server.history
    # The merged copy beside the sources is not a fourth source of the export.
    result = export_history([GROUP], OfflineHistorySource([wandb_offline.wandb_dir]), tmp_path / "out",
                            updates_per_rollout=UPDATES_PER_ROLLOUT, plots=False)  # fmt: skip
    assert result.summary["totals"] == {"rollout_steps": ROLLOUTS, "optimizer_updates": ROLLOUTS * UPDATES_PER_ROLLOUT}
    assert len(result.manifest["runs"]) == 3

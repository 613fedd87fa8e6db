"""Upload offline runs with `wandb sync`, one run at a time, trusting the `.synced` marker only.

`wandb sync` (0.31) exits 0 even when the run could not be initialised on the server, and hangs on an
unreachable server with its default retries. So each run is synced in its own process group under a
wall-clock timeout, and success is the marker `run-<id>.wandb.synced` that wandb writes next to the
run file after an upload, not the exit code. Runs that already have the marker are skipped.

    results = sync_runs(Path("wandb"), timeout_s=600)
    print(format_table(results))
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

SYNCED_SUFFIX = ".synced"
_TAIL = 400  # characters of wandb's output kept for a failed run


class SyncStatus(StrEnum):
    SYNCED = "synced"  # marker written by this sync
    ALREADY_SYNCED = "already_synced"  # marker existed before: skipped
    WOULD_SYNC = "would_sync"  # --dry-run: `wandb sync --dry-run` accepted the run
    NO_MARKER = "no_marker"  # wandb exited 0 but wrote no marker: nothing (or not everything) uploaded
    FAILED = "failed"  # non-zero exit
    TIMEOUT = "timeout"  # killed after the timeout

    @property
    def ok(self) -> bool:
        return self in (SyncStatus.SYNCED, SyncStatus.ALREADY_SYNCED, SyncStatus.WOULD_SYNC)


@dataclass(frozen=True)
class OfflineRunDir:
    path: Path  # the offline-run-<time>-<id> directory
    run_file: Path  # its run-<id>.wandb

    @property
    def run_id(self) -> str:
        return self.run_file.stem.removeprefix("run-")

    @property
    def marker(self) -> Path:
        return self.run_file.with_name(self.run_file.name + SYNCED_SUFFIX)

    @property
    def synced(self) -> bool:
        return self.marker.exists()


@dataclass(frozen=True)
class SyncResult:
    run: OfflineRunDir
    status: SyncStatus
    seconds: float
    exit_code: int | None
    detail: str


def find_offline_runs(wandb_dir: str | os.PathLike[str]) -> list[OfflineRunDir]:
    """`offline-run-*` dirs under WANDB_DIR: in `<dir>/wandb/`, `<dir>/.wandb/` or `<dir>` itself.

    Online `run-*` dirs are not offline runs (wandb decides by the directory name too); `latest-run`
    is a symlink to one of them and is not counted twice. A dir without a run file is skipped.
    """
    root = Path(wandb_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"W&B directory {root} does not exist")
    found: dict[Path, OfflineRunDir] = {}
    for parent in (root, root / "wandb", root / ".wandb"):
        if not parent.is_dir():
            continue
        for run_dir in sorted(parent.glob("offline-run-*")):
            if run_dir.is_symlink() or not run_dir.is_dir():
                continue
            run_files = sorted(run_dir.glob("run-*.wandb"))
            if run_files:
                found[run_dir.resolve()] = OfflineRunDir(run_dir, run_files[0])
    return [found[key] for key in sorted(found, key=lambda p: p.name)]


def default_wandb_executable() -> str:
    """`wandb` on PATH, else the one installed beside this Python."""
    on_path = shutil.which("wandb")
    if on_path:
        return on_path
    beside = Path(sys.executable).parent / "wandb"
    if beside.exists():
        return str(beside)
    raise FileNotFoundError("no `wandb` executable on PATH or beside the Python interpreter")


def sync_runs(
    wandb_dir: str | os.PathLike[str],
    *,
    dry_run: bool = False,
    timeout_s: float = 600.0,
    wandb_executable: str | None = None,
    extra_args: Iterable[str] = (),
) -> list[SyncResult]:
    """Sync every unsynced offline run under `wandb_dir`, one `wandb sync` process per run."""
    executable = wandb_executable or default_wandb_executable()
    results = []
    for run in find_offline_runs(wandb_dir):
        if run.synced:
            results.append(SyncResult(run, SyncStatus.ALREADY_SYNCED, 0.0, None, "marker present"))
            continue
        results.append(
            _sync_one(run, executable, dry_run=dry_run, timeout_s=timeout_s, extra=list(extra_args))
        )
    return results


def _sync_one(
    run: OfflineRunDir, executable: str, *, dry_run: bool, timeout_s: float, extra: list[str]
) -> SyncResult:
    command = [executable, "sync", *(["--dry-run"] if dry_run else ["--yes"]), *extra, str(run.path)]
    started = time.monotonic()
    # A new session: on timeout the whole group (wandb and its wandb-core child) is killed.
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return SyncResult(
            run,
            SyncStatus.TIMEOUT,
            time.monotonic() - started,
            None,
            f"killed after {timeout_s:g} s; {_tail(output)}",
        )
    seconds = time.monotonic() - started
    code = process.returncode
    if code != 0:
        return SyncResult(run, SyncStatus.FAILED, seconds, code, _tail(output))
    if dry_run:
        return SyncResult(run, SyncStatus.WOULD_SYNC, seconds, code, _tail(output))
    if run.synced:
        return SyncResult(run, SyncStatus.SYNCED, seconds, code, "marker written")
    return SyncResult(
        run, SyncStatus.NO_MARKER, seconds, code, f"exit 0 but no {run.marker.name}; {_tail(output)}"
    )


def _tail(output: str | None) -> str:
    text = " ".join((output or "").split())
    return text[-_TAIL:] if text else "(no output)"


def format_table(results: list[SyncResult]) -> str:
    header = ("run_id", "status", "seconds", "exit", "directory / detail")
    rows = [
        (
            r.run.run_id,
            r.status.value,
            f"{r.seconds:.1f}",
            "-" if r.exit_code is None else str(r.exit_code),
            f"{r.run.path.name}: {r.detail}",
        )
        for r in results
    ]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(4)]
    lines = [
        "  ".join(str(cell).ljust(widths[i]) if i < 4 else str(cell) for i, cell in enumerate(row))
        for row in [header, *rows]
    ]
    failed = sum(not r.status.ok for r in results)
    lines.append(f"{len(results)} run(s): {len(results) - failed} ok, {failed} failed")
    return "\n".join(lines)

"""Failure records: a crashed or terminated run leaves `<run_dir>/failures/<utc-time>/failure.json`.

What an on-call engineer needs to diagnose the crash without the process: run id, the config with
secrets scrubbed, device information, peak memory per device (CPU RSS; each CUDA device when
present), exception type, message and traceback, the signal when the run was terminated, child
processes still alive, and the checkpoint state. An infrastructure failure is never recorded as
reward 0: the record says so explicitly, and nothing here writes a metric.

    with failure_recording(run_dir, run_id=lambda: logger.run_id, config=cfg):
        train()
"""

from __future__ import annotations

import os
import platform
import resource
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from shopsimrl.storage import atomic_write_json
from shopsimrl.tracking.secrets import scrub_secrets

FAILURE_SCHEMA_VERSION = 1
FAILURES_DIR = "failures"
FAILURE_FILE = "failure.json"
_SIGNAL_EXIT_BASE = 128


def device_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "memory_total_bytes": psutil.virtual_memory().total,
        "cuda_devices": [],
    }
    torch = sys.modules.get("torch")  # only report torch if the run imported it; never import it here
    if torch is not None:
        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["cuda_devices"] = [
                {"index": i, "name": torch.cuda.get_device_name(i)} for i in range(torch.cuda.device_count())
            ]
    return info


def peak_memory() -> dict[str, Any]:
    """Peak resident memory of this process (and reaped children), and per CUDA device when present."""
    # ru_maxrss is in kilobytes on Linux.
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    out: dict[str, Any] = {
        "cpu": {
            "peak_rss_bytes": own,
            "peak_rss_children_bytes": children,
            "current_rss_bytes": psutil.Process().memory_info().rss,
        }
    }
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        out["cuda"] = [
            {
                "index": i,
                "max_allocated_bytes": torch.cuda.max_memory_allocated(i),
                "max_reserved_bytes": torch.cuda.max_memory_reserved(i),
            }
            for i in range(torch.cuda.device_count())
        ]
    return out


def leftover_children() -> list[dict[str, Any]]:
    """Child processes of this process that are still alive."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            out.append(
                {"pid": child.pid, "name": child.name(), "status": child.status(), "cmdline": child.cmdline()}
            )
        except psutil.NoSuchProcess:
            continue  # exited while we looked: not leftover
    return out


def checkpoint_state(checkpoint_dir: Path | None) -> dict[str, Any]:
    if checkpoint_dir is None:
        return {"configured": False, "note": "no checkpoint directory (checkpoint saving is off)"}
    path = Path(checkpoint_dir)
    if not path.exists():
        return {"configured": True, "path": str(path), "exists": False, "entries": []}
    entries = sorted(p.name for p in path.iterdir())
    return {
        "configured": True,
        "path": str(path),
        "exists": True,
        "entries": entries,
        "latest": entries[-1] if entries else None,
    }


def signal_of(exc: BaseException) -> str | None:
    """The signal behind a `SystemExit(128 + signum)` (how our SIGTERM handlers end a run)."""
    if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code > _SIGNAL_EXIT_BASE:
        try:
            return signal.Signals(exc.code - _SIGNAL_EXIT_BASE).name
        except ValueError:
            return None
    return None


def write_failure_record(
    run_dir: str | os.PathLike[str],
    exc: BaseException,
    *,
    run_id: str | None,
    config: Mapping[str, Any] | None,
    checkpoint_dir: Path | None = None,
    now: datetime | None = None,
) -> Path:
    """Write the record atomically; returns the path of failure.json."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S.%fZ")
    target = Path(run_dir) / FAILURES_DIR / stamp / FAILURE_FILE
    record = {
        "schema_version": FAILURE_SCHEMA_VERSION,
        "run_id": run_id,
        "utc_time": stamp,
        "pid": os.getpid(),
        "argv": list(sys.argv),
        "exception": {
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        },
        "signal": signal_of(exc),
        "config": scrub_secrets(dict(config or {})),
        "device": device_info(),
        "peak_memory": peak_memory(),
        "leftover_child_processes": leftover_children(),
        "checkpoint": checkpoint_state(checkpoint_dir),
        "recorded_as_reward": None,  # an infrastructure failure is never a reward of 0
        "note": "infrastructure failure: no trajectory of this run was scored because of it",
    }
    atomic_write_json(target, record)
    return target


def _is_clean_exit(exc: BaseException) -> bool:
    return isinstance(exc, SystemExit) and exc.code in (0, None)


@contextmanager
def failure_recording(
    run_dir: str | os.PathLike[str],
    *,
    run_id: Callable[[], str | None],
    config: Mapping[str, Any] | None,
    checkpoint_dir: Path | None = None,
    handle_sigterm: bool = True,
) -> Iterator[list[Path]]:
    """Record any exception leaving the block (SIGTERM included: it becomes SystemExit(143)), then re-raise.

    Yields a list that receives the record's path, for callers that report it.
    """
    written: list[Path] = []
    previous = None
    if handle_sigterm:
        previous = signal.signal(signal.SIGTERM, _raise_system_exit)
    try:
        yield written
    except BaseException as exc:
        if not _is_clean_exit(exc):
            try:
                written.append(
                    write_failure_record(
                        run_dir, exc, run_id=run_id(), config=config, checkpoint_dir=checkpoint_dir
                    )
                )
            except OSError as record_error:
                # Usually the same full or read-only disk that ended the run: say so in one line
                # and let the run's own exception (the one that matters) propagate unmasked.
                print(f"failure record not written: {record_error}", file=sys.stderr, flush=True)
        raise
    finally:
        if handle_sigterm:
            signal.signal(signal.SIGTERM, previous)


def _raise_system_exit(signum: int, _frame: Any) -> None:
    raise SystemExit(_SIGNAL_EXIT_BASE + signum)

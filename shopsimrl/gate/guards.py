"""What keeps a gate directory's record trustworthy: one gate at a time, one outcome per evaluation.

    with gate_lock(config.gate_dir):      # a second gate on the directory raises GateLocked
        ...
    refuse_conflicting_finals(gate_dir / "evaluations.jsonl", ("pair_id", "arm"))
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from shopsimrl.errors import ConfigError
from shopsimrl.evaluation.runner import EvaluationStatus
from shopsimrl.storage import read_jsonl

LOCK_FILE = "gate.lock"
OUTCOME_FIELDS = ("success", "reward", "strict_reward")  # what the estimate reads from a scored record


class GateLocked(RuntimeError):
    """Another process runs a gate on this directory."""


@contextmanager
def gate_lock(gate_dir: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on `gate_dir/gate.lock` for the block; the file names the holder's PID.

    Two gates on one directory would append to one evaluations.jsonl and both decide. The OS drops
    the lock when the holder's process ends however it ends (SIGKILL included), so a lock file left
    behind never blocks a resume; the file itself is never deleted (deleting it would let a third
    process lock a fresh file while the second still holds the old one).
    """
    gate_dir.mkdir(parents=True, exist_ok=True)
    handle = open(gate_dir / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 (held past this frame)
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"  # empty between the holder's lock and its write
        handle.close()
        raise GateLocked(f"{gate_dir} is in use by another gate (PID {holder}); wait for it to end") from None
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()  # releases the lock


def refuse_conflicting_finals(path: Path, key_fields: Sequence[str]) -> None:
    """Raise `ConfigError` naming every evaluation with two scored records whose outcomes differ.

    The evaluation state keeps the first final record of an evaluation (a duplicate is normally the
    same episode appended twice around a kill); two different outcomes mean two writers or an edited
    file, and picking one would decide on a coin the reader cannot see. Identical duplicates pass.
    """
    if not path.exists():  # an empty pool runs no evaluation
        return
    first: dict[tuple[str, ...], dict[str, Any]] = {}
    problems = []
    for record in read_jsonl(path).records:
        if record["status"] != EvaluationStatus.SCORED:
            continue
        key = tuple(str(record[name]) for name in key_fields)
        seen = first.setdefault(key, record)
        if _outcome(seen) != _outcome(record):
            episode = ", ".join(f"{name} {value}" for name, value in zip(key_fields, key, strict=True))
            problems.append(
                f"evaluation ({episode}) has two scored records with different outcomes: {_describe(seen)} "
                f"(attempt {seen['attempt']}) vs {_describe(record)} (attempt {record['attempt']})"
            )
    if problems:
        problems.append("no estimate from a record that contradicts itself: keep the right record, remove the other")
        raise ConfigError(str(path), problems)


def _outcome(record: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(record[name] for name in OUTCOME_FIELDS)


def _describe(record: dict[str, Any]) -> str:
    return ", ".join(f"{name} {record[name]}" for name in OUTCOME_FIELDS)

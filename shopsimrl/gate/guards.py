"""What keeps a gate directory's record trustworthy: one gate at a time, one outcome per evaluation.

    with gate_lock(config.gate_dir):      # a second gate on the directory raises GateLocked
        ...
    refuse_conflicting_finals(gate_dir / "evaluations.jsonl", ("pair_id", "arm"))
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from shopsimrl.errors import ConfigError, StopsTheCommand
from shopsimrl.evaluation.runner import EvaluationStatus
from shopsimrl.stages import directory_lock
from shopsimrl.storage import read_jsonl
from shopsimrl.storage.layout import GATE_LOCK_FILE as LOCK_FILE

OUTCOME_FIELDS = ("success", "reward", "strict_reward")  # what the estimate reads from a scored record


class GateLocked(StopsTheCommand, RuntimeError):
    """Another process runs a gate on this directory."""


@contextmanager
def gate_lock(gate_dir: Path) -> Iterator[None]:
    """Hold the stage kit's `directory_lock` on `gate_dir/gate.lock` for the block (it names the holder's PID).

    Two gates on one directory would append to one evaluations.jsonl and both decide.
    """

    def busy(holder: str) -> GateLocked:
        return GateLocked(f"{gate_dir} is in use by another gate (PID {holder}); wait for it to end")

    with directory_lock(gate_dir / LOCK_FILE, busy=busy):
        yield


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

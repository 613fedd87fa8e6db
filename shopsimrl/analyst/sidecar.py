"""The sidecar: follows `train/triage.jsonl` and appends one failure card per all-wrong group.

    shopsimrl training analyze-sidecar configs/local/analysis.yaml          # follow
    shopsimrl training analyze-sidecar configs/local/analysis.yaml --once   # catch up, exit

Restartable: cards are keyed by `triage_id`; on start the sidecar reads the cards already written
(and cuts a torn last line left by a kill), so a restart writes no duplicate and skips nothing.
One writer at a time: an exclusive lock (`analysis/.failure_cards.lock`, released by the kernel
when the holder dies) keeps a second sidecar or the analysis stage's rewrite out.
Validation- and test-split tasks are refused: they feed the gate and must never reach the Analyst.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shopsimrl.analyst.cards import (
    FailureCard,
    append_card,
    build_card,
    cards_path,
    read_cards,
    retry_request_id,
    sync_cards,
)
from shopsimrl.errors import StopsTheCommand
from shopsimrl.records import (
    TRIAGE_FILE,
    GroupTrace,
    RetryResult,
    TriageReason,
    TriageRecord,
    read_group_trace,
    read_retry_results,
)
from shopsimrl.stages import directory_lock
from shopsimrl.storage import read_jsonl, repair_torn_tail

logger = logging.getLogger(__name__)

LOCK_FILE = ".failure_cards.lock"


class CardsLockedError(StopsTheCommand, RuntimeError):
    """Another process (a sidecar or the analysis stage) is writing the failure cards."""


class ValidationTaskRefused(StopsTheCommand, ValueError):
    """A validation or test task was about to reach the Failure Analyst."""


def refuse_held_out(task_id: str, split: Any, where: str) -> None:
    """Raise `ValidationTaskRefused` unless the task is a train-split task (by split and by id)."""
    from shopsimrl.shop.tasks import split_of_task_id

    # "train-0-1" and a level's "budget-train-0-1" both name train; an id of neither shape is judged by its
    # first word, and the record's own validation then says what else is wrong with it.
    named = split_of_task_id(str(task_id)) or str(task_id).split("-", 1)[0]
    if split != "train" or named != "train":
        raise ValidationTaskRefused(
            f"{where}: task {task_id!r} is in split {split if split != 'train' else named!r}; "
            "only train tasks may reach the Failure Analyst (refused)"
        )


@contextmanager
def cards_lock(analysis_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the failure cards' writer lock, or raise `CardsLockedError` at once."""
    directory = Path(analysis_dir)
    path = directory / LOCK_FILE

    def busy(holder: str) -> CardsLockedError:
        return CardsLockedError(
            f"{path}: another sidecar or analysis stage is writing {cards_path(directory)}; stop it first"
        )

    with directory_lock(path, busy=busy):
        yield path


@dataclass
class SidecarStats:
    cards_written: int = 0
    refused: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # all-wrong groups whose trace could not be read on the last pass: triage_id -> (trace path, why)
    unreadable_traces: dict[str, tuple[str, str]] = field(default_factory=dict)


class Sidecar:
    """Turns new all-wrong triage records into pending cards. Hold `cards_lock` while using it."""

    def __init__(
        self,
        train_dir: str | os.PathLike[str],
        analysis_dir: str | os.PathLike[str],
        *,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self.train_dir = Path(train_dir)
        self.analysis_dir = Path(analysis_dir)
        self.echo = echo or (lambda line: logger.info("%s", line))
        self.stats = SidecarStats()
        repair_torn_tail(cards_path(self.analysis_dir))
        cards, problems = read_cards(self.analysis_dir)
        for problem in problems:
            self.echo(f"failure cards: {problem}")
        self.done: set[str] = {card.triage_id for card in cards}
        self._reported: set[str] = set()

    def process_new(self) -> list[FailureCard]:
        """One pass over triage.jsonl: a card for every all-wrong group that has none yet."""
        path = self.train_dir / TRIAGE_FILE
        if not path.exists():
            return []
        raw = read_jsonl(path, strict_middle=False)
        retries: dict[str, RetryResult] | None = None
        written = []
        for number, record in enumerate(raw.records, start=1):
            triage = self._triage(record, f"{path}:{number}")
            if triage is None or triage.triage_id in self.done or TriageReason.ALL_WRONG not in triage.reasons:
                continue
            trace = self._trace(triage)
            if trace is None:
                continue  # reported and kept in stats.unreadable_traces; the next pass tries again
            self.stats.unreadable_traces.pop(triage.triage_id, None)
            if retries is None:
                retries = {r.request_id: r for r in read_retry_results(self.train_dir).records}
            card = build_card(triage, trace, retries.get(retry_request_id(triage.triage_id)))
            append_card(self.analysis_dir, card)
            self.done.add(triage.triage_id)
            self.stats.cards_written += 1
            written.append(card)
        if written:
            sync_cards(self.analysis_dir)
        return written

    def follow(self, stop: threading.Event, poll_interval_s: float) -> None:
        """Pass after pass until `stop` is set (SIGTERM/SIGINT in the command)."""
        while not stop.is_set():
            for card in self.process_new():
                self.echo(f"card {card.card_id}: {card.failure_mode.value}")
            stop.wait(poll_interval_s)

    def _triage(self, record: Any, where: str) -> TriageRecord | None:
        if not isinstance(record, dict):
            self._report(where, f"{where}: not a JSON object")
            return None
        try:
            refuse_held_out(str(record.get("task_id")), record.get("split"), where)
        except ValidationTaskRefused as exc:
            if where not in self._reported:
                self.stats.refused.append(str(exc))
            self._report(where, str(exc))
            return None
        try:
            return TriageRecord.model_validate(record)
        except ValidationError as exc:
            first = exc.errors()[0]
            self._report(where, f"{where}: invalid triage record ({'.'.join(map(str, first['loc']))}: {first['msg']})")
            return None

    def _trace(self, triage: TriageRecord) -> GroupTrace | None:
        path = self.train_dir / triage.trace_path
        if not path.exists():
            # The log hook renames traces/step-<n> when slime's rollout id differs from the stashed step.
            moved = sorted(self.train_dir.glob(f"traces/step-*/group-{triage.group_index}.json"))
            if not moved:
                self.stats.unreadable_traces[triage.triage_id] = (str(path), "not found")
                self._report(triage.triage_id, f"triage {triage.triage_id}: trace {path} not found yet")
                return None
            path = moved[0]
        try:
            trace = read_group_trace(path)
        except ValueError as exc:
            self.stats.unreadable_traces[triage.triage_id] = (str(path), str(exc).removeprefix(f"{path}: "))
            self._report(triage.triage_id, str(exc))
            return None
        if trace.group_key != triage.group_key:
            self.stats.unreadable_traces[triage.triage_id] = (str(path), f"is group {trace.group_key!r}")
            self._report(triage.triage_id, f"triage {triage.triage_id}: {path} is group {trace.group_key!r}")
            return None
        return trace

    def _report(self, key: str, message: str) -> None:
        if key in self._reported:
            return
        self._reported.add(key)
        self.stats.problems.append(message)
        self.echo(message)

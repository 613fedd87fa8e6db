"""Append-only JSONL journals of the stage directory: triage, retry queue, retry results.

Appends are one line per write (shopsimrl.storage); readers return every valid record and report a
torn last line, an invalid record or an unknown schema version with file and line number.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from shopsimrl.records.schemas import RetryRequest, RetryResult, TriageRecord
from shopsimrl.storage import append_jsonl, read_jsonl

TRIAGE_FILE = "triage.jsonl"
RETRY_QUEUE_FILE = "retry_queue.jsonl"
RETRY_RESULTS_FILE = "retry_results.jsonl"

RecordT = TypeVar("RecordT", bound=BaseModel)


class ValidationSplitLeakError(ValueError):
    """A validation-split task was about to reach triage (and so the Failure Analyst)."""


@dataclass
class RecordsRead(Generic[RecordT]):
    records: list[RecordT] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "<file>:<line>: <what was wrong>"


def append_triage(run_dir: str | os.PathLike[str], record: TriageRecord) -> None:
    # The schema already pins split="train"; this guard also catches a model built with
    # model_construct (which skips validation), because a leak here reaches the Analyst.
    if record.split != "train":
        raise ValidationSplitLeakError(
            f"triage refused for task {record.task_id!r} (group_index={record.group_index}): split "
            f"{record.split!r}; only train tasks may reach the Failure Analyst"
        )
    append_jsonl(Path(run_dir) / TRIAGE_FILE, record.model_dump(mode="json"))


def append_retry_request(run_dir: str | os.PathLike[str], request: RetryRequest) -> None:
    append_jsonl(Path(run_dir) / RETRY_QUEUE_FILE, request.model_dump(mode="json"))


def append_retry_result(run_dir: str | os.PathLike[str], result: RetryResult) -> None:
    append_jsonl(Path(run_dir) / RETRY_RESULTS_FILE, result.model_dump(mode="json"))


def read_records(path: str | os.PathLike[str], model: type[RecordT]) -> RecordsRead[RecordT]:
    """Tolerant read of one journal; a missing file is an empty journal."""
    out: RecordsRead[RecordT] = RecordsRead()
    if not Path(path).exists():
        return out
    raw = read_jsonl(path, strict_middle=False)
    out.problems.extend(str(problem) for problem in raw.problems)
    for number, record in enumerate(raw.records, start=1):
        try:
            out.records.append(model.model_validate(record))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            out.problems.append(
                f"{path}: record {number}: invalid {model.__name__} ({where}: {first['msg']})"
            )
    return out


def read_triage(run_dir: str | os.PathLike[str]) -> RecordsRead[TriageRecord]:
    return read_records(Path(run_dir) / TRIAGE_FILE, TriageRecord)


def read_retry_requests(run_dir: str | os.PathLike[str]) -> RecordsRead[RetryRequest]:
    return read_records(Path(run_dir) / RETRY_QUEUE_FILE, RetryRequest)


def read_retry_results(run_dir: str | os.PathLike[str]) -> RecordsRead[RetryResult]:
    return read_records(Path(run_dir) / RETRY_RESULTS_FILE, RetryResult)

"""Append-only JSONL with one `write` per record, and a reader that survives a torn tail.

A crash can leave the last line incomplete. The reader returns every good record and reports the
torn line with file and line number instead of raising; a bad line that is *not* the last one is
corruption and raises `TornRecordError` (strict) or is reported too (tolerant).
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.errors import TornRecordError
from shopsimrl.storage.faults import storage_error

logger = logging.getLogger(__name__)


def _default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")


def dumps_record(record: Any) -> str:
    """One JSON line, no newline inside; NaN/Infinity kept (as JSON tokens) rather than lost."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=_default)


def append_jsonl(path: str | os.PathLike[str], record: Any, *, fsync: bool = False) -> None:
    """Append one record as one line with a single write call (O_APPEND keeps lines whole).

    A write the machine refuses raises `StorageError` ("cannot write <path>: disk full"). A short
    write (the disk filled up during the write) is continued; if the rest cannot be written, the
    partial record is cut off again, so the file keeps only whole lines.
    """
    target = Path(path)
    line = (dumps_record(record) + "\n").encode("utf-8")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # the umask decides, as open()
    except OSError as exc:
        raise storage_error(target, exc) from exc
    try:
        written = os.write(fd, line)
        if written != len(line):
            _finish_short_write(fd, line, written)
        if fsync:
            os.fsync(fd)
    except OSError as exc:
        raise storage_error(target, exc) from exc
    finally:
        os.close(fd)


def _finish_short_write(fd: int, line: bytes, written: int) -> None:
    try:
        while written < len(line):
            more = os.write(fd, line[written:])
            if more == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            written += more
    except OSError:
        # O_APPEND: the offset is the end of our partial record. Cutting it keeps the file whole
        # lines (another process appending to the same file at this instant would lose its line).
        os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_CUR) - written)
        raise


@dataclass
class JsonlReadResult:
    records: list[Any] = field(default_factory=list)
    problems: list[TornRecordError] = field(default_factory=list)

    @property
    def torn_tail(self) -> TornRecordError | None:
        return self.problems[-1] if self.problems else None


def repair_torn_tail(path: str | os.PathLike[str]) -> bool:
    """Cut an incomplete last line (an append interrupted by a kill); True if something was cut."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return False
    with open(path, "rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return False
        handle.seek(0)
        data = handle.read()
        keep = data.rfind(b"\n") + 1
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    logger.warning("%s: cut a torn last line (%d bytes) left by an interrupted append", path, len(data) - keep)
    return True


def iter_jsonl_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    with open(path, encoding="utf-8", errors="replace") as handle:
        yield from enumerate(handle, start=1)


def read_jsonl(path: str | os.PathLike[str], *, strict_middle: bool = True) -> JsonlReadResult:
    """Read every good record. A torn *last* line is reported in `problems`, never raised.

    With `strict_middle`, an unreadable line followed by good lines raises `TornRecordError`,
    since that is corruption rather than an interrupted append.
    """
    result = JsonlReadResult()
    pending: TornRecordError | None = None
    for number, line in iter_jsonl_lines(path):
        if not line.strip():
            continue
        if pending is not None:
            if strict_middle:
                raise pending
            result.problems.append(pending)
            pending = None
        try:
            result.records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            reason = "no newline at end (torn write)" if not line.endswith("\n") else exc.msg
            pending = TornRecordError(str(path), number, reason)
    if pending is not None:
        result.problems.append(pending)
    return result


def is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

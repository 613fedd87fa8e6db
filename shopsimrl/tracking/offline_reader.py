"""Reader for offline W&B transaction logs (`run-<id>.wandb`), the source of truth of an offline run.

Format (wandb 0.31; pinned, and checked by a canary test against `wandb leet inspect --json`):
a 7-byte header (`:W&B`, uint16 0xBEE1, version 0), then LevelDB-log style 32 KiB blocks of chunks
`crc32 (uint32 LE) | length (uint16 LE) | type (uint8) | payload`, with the CRC over the type byte
and the payload; FULL=1, FIRST=2, MIDDLE=3, LAST=4; under 7 bytes left in a block are padding. Each
reassembled payload is a `wandb_internal_pb2.Record`.

A run that was killed or is still being written ends in a torn chunk: the reader stops at the last
good record and reports where and why (`OfflineRun.torn`), never raising for it. Records are read
block by block, so a history can be streamed (`iter_history`) without loading the file.

    run = read_offline_run("wandb/wandb/offline-run-…/run-abc123.wandb")
    run.info.group, run.history[0]["_step"], run.summary, run.exit_code, run.torn
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_BLOCK = 32768
_HEADER = 7
_MAGIC = (b":W&B", 0xBEE1, 0)
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
MERGED_RUNS_DIR = "merged"  # <WANDB_DIR>/wandb/merged/: one run merged from slime's same-id runs


class OfflineRunFormatError(ValueError):
    """The file is not a version-0 W&B transaction log."""


@dataclass(frozen=True)
class TornTail:
    """Where reading stopped early: byte offset of the bad chunk and the reason."""

    path: str
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: stopped at byte {self.offset} ({self.reason}); records before it are intact"


@dataclass
class RunInfo:
    run_id: str = ""
    entity: str = ""
    project: str = ""
    group: str = ""
    job_type: str = ""
    name: str = ""
    tags: list[str] = field(default_factory=list)
    start_time: float | None = None  # epoch seconds


@dataclass
class TableRef:
    """A W&B Table logged in a history row (the JSON lives in the run's files/ dir)."""

    key: str
    step: int
    path: str  # relative to <run dir>/files
    nrows: int
    ncols: int
    sha256: str


@dataclass
class ArtifactRecord:
    name: str
    type: str
    digest: str
    files: dict[str, str]  # path inside the artifact -> local staged path (absolute)


@dataclass
class OfflineRun:
    path: Path
    info: RunInfo = field(default_factory=RunInfo)
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, str]] = field(default_factory=list)  # define_metric: name/glob -> step_metric
    tables: list[TableRef] = field(default_factory=list)
    artifacts: list[ArtifactRecord] = field(default_factory=list)
    exit_code: int | None = None  # None: no exit record (killed, or still running)
    torn: TornTail | None = None
    record_count: int = 0

    @property
    def run_dir(self) -> Path:
        return self.path.parent

    def load_table(self, ref: TableRef) -> dict[str, Any]:
        """The table's columns and data from `files/<path>`."""
        with open(self.run_dir / "files" / ref.path, encoding="utf-8") as handle:
            return json.load(handle)


class RecordScan:
    """Block-wise chunk scanner; sets `torn` when it stops before the end of the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.torn: TornTail | None = None

    def payloads(self) -> Iterator[bytes]:
        with open(self.path, "rb") as handle:
            header = handle.read(_HEADER)
            if len(header) < _HEADER:
                raise OfflineRunFormatError(f"{self.path}: {len(header)} bytes, shorter than the W&B header")
            if struct.unpack("<4sHB", header) != _MAGIC:
                raise OfflineRunFormatError(f"{self.path}: not a W&B v0 transaction log (header {header!r})")
            offset = _HEADER
            block = header + handle.read(_BLOCK - _HEADER)
            block_start = 0
            pending: bytearray | None = None
            while True:
                pos = offset - block_start
                if _BLOCK - pos < _HEADER:  # block trailer padding: move to the next block
                    block_start += _BLOCK
                    offset = block_start
                    block = handle.read(_BLOCK)
                    if not block:
                        break
                    continue
                if pos >= len(block):
                    break  # clean end of file
                if pos + _HEADER > len(block):
                    self._stop(offset, "truncated chunk header")
                    break
                crc, length, kind = struct.unpack_from("<IHB", block, pos)
                if crc == 0 and length == 0 and kind == 0:
                    if any(block[pos:]):
                        self._stop(offset, "zero chunk header followed by data")
                    break  # zero-filled preallocated space: end of data
                data = block[pos + _HEADER : pos + _HEADER + length]
                if len(data) < length:
                    self._stop(offset, f"truncated chunk ({len(data)} of {length} bytes)")
                    break
                if zlib.crc32(data, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
                    self._stop(offset, "checksum mismatch")
                    break
                chunk_offset = offset
                offset += _HEADER + length
                if kind == _FULL:
                    pending = None
                    yield bytes(data)
                elif kind == _FIRST:
                    pending = bytearray(data)
                elif kind in (_MIDDLE, _LAST) and pending is not None:
                    pending += data
                    if kind == _LAST:
                        yield bytes(pending)
                        pending = None
                else:
                    self._stop(chunk_offset, f"unexpected chunk type {kind}")
                    break
            if pending is not None and self.torn is None:
                self._stop(offset, "record split across blocks is incomplete")

    def _stop(self, offset: int, reason: str) -> None:
        self.torn = TornTail(str(self.path), offset, reason)


def iter_records(path: str | os.PathLike[str], scan: RecordScan | None = None) -> Iterator[Any]:
    """Every intact `wandb_internal_pb2.Record` of the file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb  # wandb is needed only when reading runs

    scanner = scan or RecordScan(Path(path))
    for payload in scanner.payloads():
        record = pb.Record()
        record.ParseFromString(payload)
        yield record


def _path(item: Any) -> list[str]:
    # 0.31 writes nested_key (a path: a Table's fields are [key, "_type"], ...); older files use key.
    return list(item.nested_key) if item.nested_key else [item.key]


def _set(target: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        child = target.get(part)
        if not isinstance(child, dict):
            child = target[part] = {}
        target = child
    target[path[-1]] = value


def _pop(target: dict[str, Any], path: list[str]) -> None:
    for part in path[:-1]:
        child = target.get(part)
        if not isinstance(child, dict):
            return
        target = child
    target.pop(path[-1], None)


def _value(text: str) -> Any:
    # Most history values are plain numbers: int()/float() are several times faster than json.loads.
    if text and text[0] in "-0123456789":
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                pass
    return json.loads(text)


def history_row(record: Any) -> dict[str, Any]:
    """One history row; nested values (Tables, media) are rebuilt as dicts, as W&B shows them."""
    row: dict[str, Any] = {}
    for item in record.history.item:
        nested = item.nested_key
        if len(nested) == 1:
            row[nested[0]] = _value(item.value_json)
        else:
            _set(row, _path(item), _value(item.value_json))
    return row


def iter_history(path: str | os.PathLike[str], scan: RecordScan | None = None) -> Iterator[dict[str, Any]]:
    """Stream the history rows (each a dict with `_step`, `_runtime`, `_timestamp` and the metrics)."""
    for record in iter_records(path, scan):
        if record.WhichOneof("record_type") == "history":
            yield history_row(record)


class HistoryStream:
    """Stream the history rows of a run; after the stream ends, `exit_code` and `torn` are known."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.info = RunInfo()
        self.exit_code: int | None = None
        self.torn: TornTail | None = None
        self.rows_read = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        scan = RecordScan(self.path)
        for record in iter_records(self.path, scan):
            kind = record.WhichOneof("record_type")
            if kind == "history":
                self.rows_read += 1
                yield history_row(record)
            elif kind == "run":
                self.info = _run_info(record.run)
            elif kind == "exit":
                self.exit_code = record.exit.exit_code
        self.torn = scan.torn


def read_run_info(path: str | os.PathLike[str]) -> RunInfo:
    """Only the run record (id, project, group, ...): stops reading right after it."""
    for record in iter_records(path):
        if record.WhichOneof("record_type") == "run":
            return _run_info(record.run)
    return RunInfo()


def _run_info(run: Any) -> RunInfo:
    start = run.start_time.ToDatetime().timestamp() if run.HasField("start_time") else None
    return RunInfo(
        run_id=run.run_id,
        entity=run.entity,
        project=run.project,
        group=run.run_group,
        job_type=run.job_type,
        name=run.display_name,
        tags=list(run.tags),
        start_time=start,
    )


def read_offline_run(path: str | os.PathLike[str]) -> OfflineRun:
    """Everything in the transaction log; stops cleanly at a torn tail (see `OfflineRun.torn`)."""
    scan = RecordScan(Path(path))
    out = OfflineRun(path=Path(path))
    for record in iter_records(path, scan):
        out.record_count += 1
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out.info = _run_info(record.run)
            _apply(out.config, record.run.config.update, ())
        elif kind == "config":
            _apply(out.config, record.config.update, record.config.remove)
        elif kind == "history":
            row = history_row(record)
            out.history.append(row)
            out.tables.extend(_tables_in(row))
        elif kind == "summary":
            _apply(out.summary, record.summary.update, record.summary.remove)
        elif kind == "metric":
            metric = record.metric
            out.metrics.append({"name": metric.name or metric.glob_name, "step_metric": metric.step_metric})
        elif kind == "artifact":
            artifact = record.artifact
            out.artifacts.append(
                ArtifactRecord(
                    name=artifact.name,
                    type=artifact.type,
                    digest=artifact.digest,
                    files={entry.path: entry.local_path for entry in artifact.manifest.contents},
                )
            )
        elif kind == "exit":
            out.exit_code = record.exit.exit_code
    out.config.pop("_wandb", None)
    out.torn = scan.torn
    return out


def _apply(target: dict[str, Any], updates: Any, removes: Any) -> None:
    for item in updates:
        _set(target, _path(item), json.loads(item.value_json))
    for item in removes:
        _pop(target, _path(item))


def _tables_in(row: dict[str, Any]) -> list[TableRef]:
    refs = []
    for key, value in row.items():
        if isinstance(value, dict) and value.get("_type") == "table-file":
            refs.append(
                TableRef(
                    key=key,
                    step=int(row.get("_step", -1)),
                    path=str(value["path"]),
                    nrows=int(value.get("nrows", 0)),
                    ncols=int(value.get("ncols", 0)),
                    sha256=str(value.get("sha256", "")),
                )
            )
    return refs


def find_run_files(root: str | os.PathLike[str]) -> list[Path]:
    """Every `run-*.wandb` under `root` (a WANDB_DIR, its `wandb/` dir, or a run dir), sorted by path.

    The merged copies `wandb sync` uploads for slime's same-id runs (under `merged/`, see
    shopsimrl.tracking.merge) are not counted: their sources are.
    """
    base = Path(root)
    if base.is_file():
        return [base]
    return sorted(
        path
        for path in base.rglob("run-*.wandb")
        if path.is_file() and not {"latest-run", MERGED_RUNS_DIR} & set(path.relative_to(base).parts)
    )

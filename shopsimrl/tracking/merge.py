"""One offline run from the same-id offline runs of one slime launch, for `wandb sync`.

slime v0.3.1 in offline mode writes three offline runs with ONE run id per training launch, each in
its own `offline-run-<time>-<id>` directory (slime/utils/wandb_utils.py): the driver's
(`init_wandb_primary`: group, name, config, no history), the RolloutManager's and actor rank 0's
(`init_wandb_secondary`: `id=<the driver's>, resume="allow"`; rollout/* and train/* histories).
Synced one by one, the second and third are resumes of the first: each restarts its history at
`_step` 0 and asks the server for the run's resume state, so what a user finds on the server is not
the three histories side by side. Online, slime's shared mode makes them one run; this makes the
offline copy the same one run before upload (docs/wandb.md):

- the driver's records (run, config, telemetry, metric definitions, console), its `files/`;
- every history row of every process, in `_timestamp` order, renumbered `_step` 0..n-1, `_runtime`
  counted from the driver's start;
- every process's summary updates (later ones win, as in a shared run) and metric definitions;
- the driver's exit record, or the first non-zero one of any process.

System metrics and console output of the other processes stay in their own directories (and in
slime's log). The sources are not changed; the merged run is written atomically beside them.

    merged = merge_offline_runs([driver_file, rollout_file, actor_file], out_dir)  # out_dir/run-<id>.wandb
"""

from __future__ import annotations

import shutil
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl.storage import atomic_write_bytes
from shopsimrl.tracking.offline_reader import MERGED_RUNS_DIR, iter_records

_BLOCK = 32768
_CHUNK_HEADER = 7
_FILE_HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_HEAD_KINDS = ("history", "summary", "exit", "final", "footer")  # taken from every process, not the driver's head
_BOOKKEEPING = ("_step", "_runtime", "_timestamp")


class MergeError(ValueError):
    """The runs cannot be one run (different ids, no run record)."""


def _kind(record: Any) -> str:
    return str(record.WhichOneof("record_type"))


def _item_path(item: Any) -> list[str]:
    return list(item.nested_key) if item.nested_key else [item.key]


def _timestamp(record: Any) -> float:
    for item in record.history.item:
        if _item_path(item) == ["_timestamp"]:
            return float(item.value_json)
    return 0.0


def merge_offline_runs(run_files: Sequence[Path], out_dir: Path) -> Path:
    """Write `out_dir/run-<id>.wandb` from the run files of one id (any order); returns its path."""
    sources = [list(iter_records(path)) for path in run_files]
    runs = [next((r.run for r in records if _kind(r) == "run"), None) for records in sources]
    if any(run is None for run in runs):
        missing = [str(path) for path, run in zip(run_files, runs, strict=True) if run is None]
        raise MergeError(f"no run record in {', '.join(missing)}")
    ids = {run.run_id for run in runs}
    if len(ids) != 1:
        raise MergeError(f"runs of different ids cannot be merged: {sorted(ids)}")
    # The driver's run is the one that is not a resume (slime's secondaries pass resume="allow").
    primary = next((i for i, run in enumerate(runs) if not run.resume), 0)
    start = runs[primary].start_time.ToDatetime().timestamp()

    head = [r for r in sources[primary] if _kind(r) not in _HEAD_KINDS]
    seen_metrics = {r.SerializeToString() for r in head if _kind(r) == "metric"}
    metrics = []
    for index, records in enumerate(sources):
        for record in records:
            if index != primary and _kind(record) == "metric" and record.SerializeToString() not in seen_metrics:
                seen_metrics.add(record.SerializeToString())
                metrics.append(record)
    history = sorted(
        ((_timestamp(r), index, order, r) for index, records in enumerate(sources)
         for order, r in enumerate(records) if _kind(r) == "history"),
        key=lambda entry: entry[:3],
    )  # fmt: skip
    for step, (stamp, _, _, record) in enumerate(history):
        record.history.step.num = step
        for item in record.history.item:
            if _item_path(item) == ["_step"]:
                item.value_json = str(step)
            elif _item_path(item) == ["_runtime"] and stamp:
                item.value_json = repr(max(stamp - start, 0.0))
    order = [primary, *(i for i in range(len(sources)) if i != primary)]
    summaries = [r for i in order for r in sources[i] if _kind(r) == "summary"]
    for record in summaries:  # each process's own _step/_runtime/_timestamp: the merged run's come last
        kept = [item for item in record.summary.update if _item_path(item) not in ([k] for k in _BOOKKEEPING)]
        del record.summary.update[:]
        record.summary.update.extend(kept)
    if history:
        summaries.append(_bookkeeping_summary(history[-1][3]))
    exits = [r for i in order for r in sources[i] if _kind(r) == "exit"]
    failed = [r for r in exits if r.exit.exit_code != 0]
    exit_record = failed[:1] or exits[:1]

    records = [*head, *metrics, *(entry[3] for entry in history), *summaries, *exit_record]
    for number, record in enumerate(records, start=1):
        record.num = number
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"run-{runs[primary].run_id}.wandb"
    atomic_write_bytes(target, _chunks([record.SerializeToString() for record in records]))
    files = Path(run_files[primary]).parent / "files"
    if files.is_dir():  # config.yaml, wandb-metadata.json, ...: what the driver's file records name
        shutil.copytree(files, out_dir / "files", dirs_exist_ok=True)
    return target


def _bookkeeping_summary(last_row: Any) -> Any:
    from wandb.proto import wandb_internal_pb2 as pb

    record = pb.Record()
    for item in last_row.history.item:
        if _item_path(item) in ([k] for k in _BOOKKEEPING):
            record.summary.update.add(nested_key=_item_path(item), value_json=item.value_json)
    return record


def _chunks(payloads: Sequence[bytes]) -> bytes:
    """The transaction log's body after its header: 32 KiB blocks of crc | length | type | data
    chunks, a record split FIRST/MIDDLE/LAST across blocks, under 7 bytes at a block's end padded."""
    out = bytearray(_FILE_HEADER)
    for payload in payloads:
        remaining, first = memoryview(payload), True
        while True:
            space = _BLOCK - len(out) % _BLOCK
            if space < _CHUNK_HEADER:
                out += b"\0" * space
                continue
            piece = remaining[: space - _CHUNK_HEADER]
            remaining = remaining[len(piece) :]
            last = not remaining
            kind = (_FULL if last else _FIRST) if first else (_LAST if last else _MIDDLE)
            crc = zlib.crc32(piece, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF
            out += struct.pack("<IHB", crc, len(piece), kind) + piece
            first = False
            if last:
                break
    return bytes(out)


__all__ = ["MERGED_RUNS_DIR", "MergeError", "merge_offline_runs"]

"""Compare a stage's `metrics.jsonl` (the audit record) with its W&B history, value by value.

Each numeric value is identified by (metric, its step axis, the axis value): a `rollout/*` value by
its `rollout/step`, a `train/*` value by its `train/step`, other keys (and rows that lack their axis)
by W&B's `_step`, which StageLogger also writes into metrics.jsonl. Duplicated identities are
matched in order. The second seed's check ("all 3,118 overlapping values identical") is
`report.equal == 3118 and report.ok`.

    report = verify_stage("runs/round-000/train", offline_history("wandb/.../run-abc.wandb"))
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.errors import RecordFormatError
from shopsimrl.storage import read_jsonl
from shopsimrl.tracking.axes import WANDB_STEP, axis_for, merged_axes
from shopsimrl.tracking.logger import METRICS_FILE, STATUS_FILE, STATUS_SCHEMA_VERSION

_EXAMPLES = 20  # how many differences / missing values a report keeps for display

Identity = tuple[str, str, float]


@dataclass(frozen=True)
class ValueDifference:
    key: str
    axis: str
    axis_value: float
    local: float
    wandb: float


@dataclass
class VerifyReport:
    local_rows: int = 0
    wandb_rows: int = 0
    equal: int = 0
    different: int = 0
    missing_in_wandb: int = 0  # local values W&B never received
    wandb_only: int = 0  # W&B values absent locally (e.g. slime's own metrics)
    differences: list[ValueDifference] = field(default_factory=list)
    missing_examples: list[tuple[str, str, float]] = field(default_factory=list)
    local_problems: list[str] = field(default_factory=list)  # torn tail of metrics.jsonl, ...

    @property
    def overlapping(self) -> int:
        return self.equal + self.different

    @property
    def ok(self) -> bool:
        return self.different == 0 and self.missing_in_wandb == 0

    def lines(self) -> list[str]:
        out = [
            f"local rows: {self.local_rows}   W&B history rows: {self.wandb_rows}",
            f"overlapping numeric values: {self.overlapping}   equal: {self.equal}   different: {self.different}",
            f"local values missing in W&B: {self.missing_in_wandb}   W&B-only values: {self.wandb_only}",
        ]
        out += [f"problem: {problem}" for problem in self.local_problems]
        for diff in self.differences:
            out.append(
                f"DIFFERENT {diff.key} at {diff.axis}={_fmt(diff.axis_value)}: "
                f"local {diff.local!r} != W&B {diff.wandb!r}"
            )
        for key, axis, value in self.missing_examples:
            out.append(f"MISSING in W&B: {key} at {axis}={_fmt(value)}")
        out.append("OK: every local value is in W&B, identical" if self.ok else "FAILED")
        return out


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def same_number(a: float, b: float) -> bool:
    # Exact equality by value (W&B returns 1.0 as 1); NaN matches NaN, as both sides logged "NaN".
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _identities(key: str, row: Mapping[str, Any], axes: Mapping[str, str]) -> list[Identity]:
    found: list[Identity] = []
    axis = axis_for(key, axes)
    if axis != WANDB_STEP and is_number(row.get(axis)):
        found.append((key, axis, float(row[axis])))
    if is_number(row.get(WANDB_STEP)):
        found.append((key, WANDB_STEP, float(row[WANDB_STEP])))
    return found


def verify_stage(
    stage_dir: str | os.PathLike[str],
    wandb_history: Iterable[Mapping[str, Any]],
    *,
    step_axes: Mapping[str, str] | None = None,
) -> VerifyReport:
    """Compare `<stage_dir>/metrics.jsonl` with W&B history rows (streamed; only local is held)."""
    axes = merged_axes(step_axes)
    report = VerifyReport()
    result = read_jsonl(Path(stage_dir) / METRICS_FILE, strict_middle=False)
    report.local_problems = [str(problem) for problem in result.problems]
    pending: dict[Identity, deque[float]] = {}
    for row in result.records:
        report.local_rows += 1
        for key, value in row.items():
            if key.startswith("_") or not is_number(value):
                continue
            identities = _identities(key, row, axes)
            if identities:
                pending.setdefault(identities[0], deque()).append(value)
    for row in wandb_history:
        report.wandb_rows += 1
        for key, value in row.items():
            if key.startswith("_") or not is_number(value):
                continue
            for identity in _identities(key, row, axes):
                queue = pending.get(identity)
                if queue:
                    local = queue.popleft()
                    if same_number(local, value):
                        report.equal += 1
                    else:
                        report.different += 1
                        if len(report.differences) < _EXAMPLES:
                            report.differences.append(
                                ValueDifference(key, identity[1], identity[2], local, value)
                            )
                    break
            else:
                report.wandb_only += 1
    for identity, queue in pending.items():
        report.missing_in_wandb += len(queue)
        if queue and len(report.missing_examples) < _EXAMPLES:
            report.missing_examples.append(identity)
    return report


def offline_history(run_file: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    from shopsimrl.tracking.offline_reader import iter_history

    return iter_history(run_file)


def online_history(run_path: str, *, page_size: int = 1000) -> Iterator[dict[str, Any]]:
    """Every row of an online run through the public API's full iterator (never the sampled history())."""
    import wandb

    run = wandb.Api().run(run_path)
    return iter(run.scan_history(page_size=page_size))


def stage_run_file(stage_dir: str | os.PathLike[str]) -> Path:
    """The offline run file StageLogger recorded in `<stage_dir>/wandb_status.json`.

    A status file of another schema version is refused (RecordFormatError): its `run_file` may not
    mean what this version reads it as.
    """
    import json

    status_path = Path(stage_dir) / STATUS_FILE
    if not status_path.exists():
        raise FileNotFoundError(f"{status_path} not found: pass --run-file or --run-path")
    try:
        status = json.loads(status_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordFormatError(
            str(status_path), f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except UnicodeDecodeError:
        raise RecordFormatError(str(status_path), "not UTF-8 text") from None
    if not isinstance(status, dict):
        raise RecordFormatError(str(status_path), f"expected a JSON object, got {type(status).__name__}")
    version = status.get("schema_version")
    if type(version) is not int or version != STATUS_SCHEMA_VERSION:
        raise RecordFormatError(
            str(status_path),
            f"schema_version {version!r} is not supported (this version reads {STATUS_SCHEMA_VERSION})",
        )
    run_file = status.get("run_file")
    if not run_file:
        raise FileNotFoundError(f"{status_path} names no W&B run file (W&B was off or failed to start)")
    return Path(run_file)


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)

"""Group traces: every sibling and every segment of one completed group, one atomic JSON file.

Path: `<run_dir>/traces/step-<rollout_step>/group-<group_index>.json`. Written before the dynamic
filter's decision matters, so dropped and surplus groups are on disk like accepted ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl.contract import ShopSimMeta, get_meta, status_value
from shopsimrl.metrics.groups import GroupSummary
from shopsimrl.records.schemas import GroupTrace, OutcomeRecord, SegmentTrace, TrajectoryTrace
from shopsimrl.storage import atomic_write_many, json_bytes

TRACES_DIR = "traces"


def trace_path(run_dir: str | os.PathLike[str], rollout_step: int, group_index: int) -> Path:
    return Path(run_dir) / TRACES_DIR / f"step-{rollout_step}" / f"group-{group_index}.json"


def _segment(sample: Any, meta: ShopSimMeta) -> SegmentTrace:
    extra = meta.model_extra or {}
    return SegmentTrace(
        segment_index=meta.segment.index,
        segment_count=meta.segment.count,
        sample_index=sample.index,
        status=status_value(sample),
        total_tokens=len(sample.tokens),
        response_tokens=sample.response_length,
        trained_tokens=sum(sample.loss_mask) if sample.loss_mask is not None else sample.response_length,
        messages=extra.get("messages"),
        transcript=extra.get("transcript"),
    )


def build_group_trace(
    summary: GroupSummary,
    leaves: Sequence[Any],
    rollout_step: int,
    reward_key: str,
    metas: Sequence[ShopSimMeta] | None = None,
) -> GroupTrace:
    """The trace of one group from its summary and its (flattened) samples (and their parsed metadata)."""
    if metas is None:
        metas = [get_meta(s) for s in leaves]
    segments: dict[Any, list[tuple[Any, ShopSimMeta]]] = {}
    for sample, meta in zip(leaves, metas, strict=True):
        key = sample.rollout_id if sample.rollout_id is not None else f"sample-{sample.index}"
        segments.setdefault(key, []).append((sample, meta))
    trajectories = []
    retry: dict[str, Any] | None = None
    for trajectory in summary.trajectories:
        pairs = sorted(segments[trajectory.rollout_id], key=lambda pair: pair[1].segment.index)
        meta = pairs[0][1]
        retry = meta.retry.model_dump(mode="json") if meta.retry is not None else None
        trajectories.append(
            TrajectoryTrace(
                rollout_id=trajectory.rollout_id,
                outcome=OutcomeRecord(
                    reward=trajectory.reward,
                    strict_reward=trajectory.strict_reward,
                    success=trajectory.success,
                    scorable=trajectory.scorable,
                    technical_error=trajectory.technical_error,
                ),
                gold_audit=(meta.model_extra or {}).get("gold_audit"),
                segments=[_segment(sample, seg_meta) for sample, seg_meta in pairs],
            )
        )
    return GroupTrace(
        rollout_step=rollout_step,
        group_index=summary.group_index,
        group_key=summary.group_key,
        task_id=summary.task_id,
        split=summary.split,
        arm=summary.arm.value,
        mask=list(summary.mask),
        q=summary.q,
        rho=summary.rho,
        retry=retry,
        technical_error=summary.has_technical_error,
        all_wrong=summary.all_wrong,
        zero_std=summary.is_zero_std(reward_key),
        trajectories=trajectories,
    )


def write_group_trace(run_dir: str | os.PathLike[str], trace: GroupTrace) -> Path:
    """Atomically write one trace (temp file, fsync, rename); returns its path."""
    return write_group_traces(run_dir, [trace])[0]


def write_group_traces(run_dir: str | os.PathLike[str], traces: Sequence[GroupTrace]) -> list[Path]:
    """Atomically write a step's traces together (one fsync round, not two fsyncs per file)."""
    files = {
        trace_path(run_dir, t.rollout_step, t.group_index): json_bytes(t.model_dump(mode="json"), indent=None)
        for t in traces
    }
    if len(files) != len(traces):
        raise ValueError("two traces of one step name the same group_index")
    return atomic_write_many(files)


def read_group_trace(path: str | os.PathLike[str]) -> GroupTrace:
    """Read and validate a trace; errors name the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    try:
        return GroupTrace.model_validate(data)
    except ValueError as exc:
        raise ValueError(f"{path}: not a group trace of schema_version 1: {exc}") from None

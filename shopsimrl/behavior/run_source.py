"""Where a run's behaviour lives on disk: its group traces and its metrics.jsonl (no server).

A RUN_DIR is a round directory (`runs/<group>/`, whose training stage is `train/`) or the training
stage directory itself. The round label is the round directory's name (the W&B group).
Traces are read one file at a time, in rollout-step then group order.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl.metrics import names as m
from shopsimrl.metrics.alerts import METRICS_FILE, load_rollout_steps
from shopsimrl.records import GroupTrace, read_group_trace
from shopsimrl.records.traces import TRACES_DIR

_STEP_DIR = re.compile(r"step-(\d+)")
_GROUP_FILE = re.compile(r"group-(\d+)\.json")
TRAIN_STAGE = "train"


class ProblemLog:
    """Problem lines (unreadable files, torn rows): counted in full, the first `keep` kept verbatim."""

    def __init__(self, keep: int = 100) -> None:
        self.keep = keep
        self.count = 0
        self.first: list[str] = []

    def append(self, problem: str) -> None:
        self.count += 1
        if len(self.first) < self.keep:
            self.first.append(problem)

    def extend(self, problems: list[str]) -> None:
        for problem in problems:
            self.append(problem)


@dataclass(frozen=True)
class RunSource:
    round_label: str
    stage_dir: Path

    @property
    def traces_dir(self) -> Path:
        return self.stage_dir / TRACES_DIR

    @property
    def metrics_path(self) -> Path:
        return self.stage_dir / METRICS_FILE


def resolve_run(run_dir: str | os.PathLike[str]) -> RunSource:
    """The stage holding `traces/`; raises FileNotFoundError naming the directory otherwise."""
    root = Path(run_dir)
    if (root / TRAIN_STAGE / TRACES_DIR).is_dir():
        return RunSource(round_label=root.resolve().name, stage_dir=root / TRAIN_STAGE)
    if (root / TRACES_DIR).is_dir():
        label = root.resolve().parent.name if root.resolve().name == TRAIN_STAGE else root.resolve().name
        return RunSource(round_label=label, stage_dir=root)
    raise FileNotFoundError(f"{root}: no {TRACES_DIR}/ directory here or in {root / TRAIN_STAGE}")


def _numbered(directory: Path, pattern: re.Pattern[str]) -> list[tuple[int, Path]]:
    found = []
    with os.scandir(directory) as entries:
        for entry in entries:
            match = pattern.fullmatch(entry.name)
            if match:
                found.append((int(match.group(1)), Path(entry.path)))
    return sorted(found)


def trace_files(source: RunSource) -> Iterator[Path]:
    """Every group trace file, step by step; only one step's file names are held at a time."""
    for _, step_dir in _numbered(source.traces_dir, _STEP_DIR):
        if step_dir.is_dir():
            for _, path in _numbered(step_dir, _GROUP_FILE):
                yield path


def iter_traces(source: RunSource, problems: ProblemLog) -> Iterator[GroupTrace]:
    """Valid traces; an unreadable one is a problem line naming the file, not a crash."""
    for path in trace_files(source):
        try:
            yield read_group_trace(path)
        except (OSError, ValueError) as exc:
            problems.append(str(exc).splitlines()[0])


@dataclass(frozen=True)
class SlimeStep:
    """slime's own per-Sample numbers of one rollout step (accepted Samples only)."""

    response_len_mean: float | None
    truncated_ratio: float | None


def slime_steps(source: RunSource, problems: ProblemLog) -> dict[int, SlimeStep]:
    """`rollout/response_len/mean` and `rollout/truncated_ratio` per rollout step of metrics.jsonl."""
    if not source.metrics_path.is_file():
        problems.append(f"{source.metrics_path}: missing; slime's per-Sample columns are empty")
        return {}
    rows, read_problems = load_rollout_steps(source.metrics_path)
    problems.extend(read_problems)
    return {step: SlimeStep(_number(row, m.ROLLOUT_RESPONSE_LEN_MEAN.name),
                            _number(row, m.ROLLOUT_TRUNCATED_RATIO.name))
            for step, row in rows.items()}  # fmt: skip


def _number(row: dict[str, Any], key: str) -> float | None:
    value = row.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

"""Turn a run's history rows into rollout-step rows and optimizer-update rows (streamed).

W&B `_step` counts log events, not training iterations. slime logs a rollout batch in several
events (rollout manager, train-side rollout data, perf), all carrying `rollout/step`; they are
merged into one rollout row. Every event carrying `train/step` is one optimizer update, whose
ordinal and rollout step are derived from `train/step` (slime: `train/step = rollout_id * k +
step_id` with `k` updates per rollout):

    update_ordinal = train/step - (k - 1)        (k = 2: train/step - 1)
    rollout_step   = floor(train/step / k)       (k = 2: floor(train/step / 2))

which assumes, like the seed, that the first rollout id is 1. A value absent from a row stays
absent: nothing is interpolated or carried forward.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TextIO

from shopsimrl.tracking.axes import ROLLOUT_STEP, SLIME_STEP_AXES, TRAIN_STEP, WANDB_STEP, axis_for
from shopsimrl.tracking.export.history_source import ExportError

ROLLOUT_ID_COLUMNS = ("round", "group", "run_id", "rollout_step", "wandb_steps")
UPDATE_ID_COLUMNS = ("round", "group", "run_id", "wandb_step", "train_step", "update_ordinal", "rollout_step")
# How many rollout steps may be open at once while merging (slime's async loop can interleave the
# rollout manager's log of step r+1 with the trainer's logs of step r).
MERGE_WINDOW = 8


@lru_cache(maxsize=65536)
def _slime_axis(key: str) -> str:
    # A pure function of the key, called for every value of a million-row history: cached.
    return axis_for(key, SLIME_STEP_AXES)


def is_rollout_key(key: str) -> bool:
    return key != ROLLOUT_STEP and _slime_axis(key) == ROLLOUT_STEP


def is_update_key(key: str) -> bool:
    return key != TRAIN_STEP and _slime_axis(key) == TRAIN_STEP


def update_position(train_step: int, updates_per_rollout: int) -> tuple[int, int]:
    """(update ordinal, rollout step) of an optimizer update (see the module docstring)."""
    return train_step - (updates_per_rollout - 1), train_step // updates_per_rollout


@dataclass
class RolloutRow:
    rollout_step: int
    wandb_steps: list[int] = field(default_factory=list)
    values: dict[str, float] = field(default_factory=dict)


@dataclass
class UpdateRow:
    wandb_step: int
    train_step: int
    update_ordinal: int
    rollout_step: int
    values: dict[str, float] = field(default_factory=dict)


@dataclass
class SplitStats:
    conflicts: int = 0  # same key, same rollout step, different values in two events: first kept
    conflict_examples: list[str] = field(default_factory=list)
    rows_without_axis: int = 0  # rows with neither rollout/step nor train/step (eval/*, analysis/*)


def _as_int(value: Any, what: str, row: dict[str, Any]) -> int:
    if not float(value).is_integer():
        raise ExportError(f"{what}={value!r} is not an integer (W&B _step {row.get(WANDB_STEP)})")
    return int(value)


def split_rows(
    rows: Iterable[dict[str, Any]],
    updates_per_rollout: int,
    on_rollout: Callable[[RolloutRow], None],
    on_update: Callable[[UpdateRow], None],
    stats: SplitStats,
) -> None:
    """Stream `rows` of one run into merged rollout rows and update rows, in order."""
    if updates_per_rollout < 1:
        raise ExportError(f"updates per rollout must be >= 1, got {updates_per_rollout}")
    open_steps: dict[int, RolloutRow] = {}
    closed_max: int | None = None
    for row in rows:
        used = False
        if isinstance(row.get(TRAIN_STEP), (int, float)):
            train_step = _as_int(row[TRAIN_STEP], TRAIN_STEP, row)
            ordinal, rollout_step = update_position(train_step, updates_per_rollout)
            values = {k: v for k, v in row.items() if is_update_key(k)}
            on_update(UpdateRow(int(row.get(WANDB_STEP, -1)), train_step, ordinal, rollout_step, values))
            used = True
        if isinstance(row.get(ROLLOUT_STEP), (int, float)):
            step = _as_int(row[ROLLOUT_STEP], ROLLOUT_STEP, row)
            values = {k: v for k, v in row.items() if is_rollout_key(k)}
            if values or step in open_steps:
                if closed_max is not None and step <= closed_max and step not in open_steps:
                    raise ExportError(
                        f"rollout/step {step} logged again after {MERGE_WINDOW} later steps were seen "
                        f"(W&B _step {row.get(WANDB_STEP)}); the history is not in rollout order"
                    )
                merged = open_steps.setdefault(step, RolloutRow(step))
                merged.wandb_steps.append(int(row.get(WANDB_STEP, -1)))
                for key, value in values.items():
                    if key in merged.values and not _same(merged.values[key], value):
                        stats.conflicts += 1
                        if len(stats.conflict_examples) < 10:
                            stats.conflict_examples.append(
                                f"{key} at rollout/step {step}: {merged.values[key]!r} kept, {value!r} ignored"
                            )
                        continue
                    merged.values.setdefault(key, value)
                while len(open_steps) > MERGE_WINDOW:
                    oldest = min(open_steps)
                    on_rollout(open_steps.pop(oldest))
                    closed_max = oldest if closed_max is None else max(closed_max, oldest)
            used = True
        if not used:
            stats.rows_without_axis += 1
    for step in sorted(open_steps):
        on_rollout(open_steps[step])


def _same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)  # NaN == NaN for this purpose


class CsvTable:
    """A CSV with identifying columns and then metric columns; empty cell = not logged."""

    def __init__(self, handle: TextIO, id_columns: tuple[str, ...], metric_columns: list[str]) -> None:
        self.metric_columns = metric_columns
        self.writer = csv.writer(handle, lineterminator="\n")
        self.writer.writerow([*id_columns, *metric_columns])
        self.rows = 0

    def write(self, ids: list[Any], values: dict[str, float]) -> None:
        self.writer.writerow([*ids, *(_cell(values.get(c)) for c in self.metric_columns)])
        self.rows += 1


def _cell(value: float | None) -> str:
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)

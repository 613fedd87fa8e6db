"""Per-round means and the list of zero-gradient updates, accumulated while rows stream past."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from shopsimrl.tracking.axes import TRAIN_STEP
from shopsimrl.tracking.export.keys import GRAD_NORM, ROUND_MEANS
from shopsimrl.tracking.export.tables import RolloutRow, UpdateRow


@dataclass
class _Mean:
    total: float = 0.0
    count: int = 0

    def add(self, value: float) -> None:
        if isinstance(value, (int, float)) and math.isfinite(value):
            self.total += value
            self.count += 1

    @property
    def value(self) -> float | None:
        return self.total / self.count if self.count else None


@dataclass
class RoundSummary:
    round: str
    group: str
    run_ids: list[str] = field(default_factory=list)
    rollout_steps: int = 0
    updates: int = 0
    rollout_step_range: list[int] = field(default_factory=list)  # [min, max]
    train_step_range: list[int] = field(default_factory=list)
    means: dict[str, _Mean] = field(default_factory=lambda: {m.key: _Mean() for m in ROUND_MEANS})

    def add_rollout(self, row: RolloutRow) -> None:
        self.rollout_steps += 1
        self.rollout_step_range = _extend(self.rollout_step_range, row.rollout_step)
        for metric in ROUND_MEANS:
            if metric.axis != TRAIN_STEP and metric.key in row.values:
                self.means[metric.key].add(row.values[metric.key])

    def add_update(self, row: UpdateRow) -> None:
        self.updates += 1
        self.train_step_range = _extend(self.train_step_range, row.train_step)
        for metric in ROUND_MEANS:
            if metric.axis == TRAIN_STEP and metric.key in row.values:
                self.means[metric.key].add(row.values[metric.key])

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "group": self.group,
            "run_ids": self.run_ids,
            "rollout_steps": self.rollout_steps,
            "optimizer_updates": self.updates,
            "rollout_step_range": self.rollout_step_range,
            "train_step_range": self.train_step_range,
            "means": {key: mean.value for key, mean in self.means.items()},
            "value_counts": {key: mean.count for key, mean in self.means.items()},
        }


def _extend(span: list[int], value: int) -> list[int]:
    return [value, value] if not span else [min(span[0], value), max(span[1], value)]


def zero_gradient(row: UpdateRow) -> bool:
    return row.values.get(GRAD_NORM) == 0

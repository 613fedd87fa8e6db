"""PNG plots of the main curves, each against its own x-axis (matplotlib, Agg backend).

`train/*` curves use the optimizer update ordinal, `rollout/*` and `perf/*` curves the rollout
step; one colour per round. A row on the axis without the metric is a gap in the line (NaN),
never an interpolated point.
"""

from __future__ import annotations

import io
from array import array
from pathlib import Path

from shopsimrl.storage import atomic_write_bytes
from shopsimrl.tracking.axes import TRAIN_STEP
from shopsimrl.tracking.export.keys import PLOTTED, SummaryMetric
from shopsimrl.tracking.export.tables import RolloutRow, UpdateRow

_NAN = float("nan")


class CurveCollector:
    """x/y arrays per (metric, round): 16 bytes per point, not whole history rows."""

    def __init__(self) -> None:
        self.series: dict[str, dict[str, tuple[array[float], array[float]]]] = {m.key: {} for m in PLOTTED}

    def _add(self, metric: SummaryMetric, round_label: str, x: float, values: dict[str, float]) -> None:
        xs, ys = self.series[metric.key].setdefault(round_label, (array("d"), array("d")))
        xs.append(x)
        value = values.get(metric.key)
        ys.append(_NAN if value is None else float(value))

    def add_rollout(self, round_label: str, row: RolloutRow) -> None:
        for metric in PLOTTED:
            if metric.axis != TRAIN_STEP:
                self._add(metric, round_label, row.rollout_step, row.values)

    def add_update(self, round_label: str, row: UpdateRow) -> None:
        for metric in PLOTTED:
            if metric.axis == TRAIN_STEP:
                self._add(metric, round_label, row.update_ordinal, row.values)

    def render(self, out_dir: Path) -> list[Path]:
        """One PNG per metric that has at least one value; returns the files written."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        written = []
        out_dir.mkdir(parents=True, exist_ok=True)
        for metric in PLOTTED:
            per_round = self.series[metric.key]
            if not any(y == y for _, ys in per_round.values() for y in ys):
                continue
            figure, axes = plt.subplots(figsize=(8, 4), dpi=100)
            for label, (xs, ys) in per_round.items():
                axes.plot(xs, ys, marker="." if len(xs) <= 400 else None, linewidth=1, label=label)
            axes.set_xlabel(
                "optimizer update (train/step - (k - 1))" if metric.axis == TRAIN_STEP else "rollout/step"
            )
            axes.set_ylabel(metric.key)
            axes.set_title(metric.label)
            axes.grid(alpha=0.3)
            axes.legend(fontsize="small")
            figure.tight_layout()
            path = out_dir / (metric.key.replace("/", "_") + ".png")
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png")
            plt.close(figure)
            atomic_write_bytes(path, buffer.getvalue())
            written.append(path)
        return written

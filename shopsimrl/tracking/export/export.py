"""History export of slime or local runs: frozen numeric histories, CSVs, summary, manifest, plots, report.

    result = export_history(["qwen35-4b-round-000", "qwen35-4b-round-001"],
                            OfflineHistorySource(["wandb"]), Path("artifacts/analysis/wandb"))

Two streaming passes, so memory does not grow with the history length: (1) every run's history
is read from its source (offline run file, or `scan_history`) and written as a frozen numeric JSON
(`runs/<round>_<run_id>.json`) while the metric columns are collected; (2) the frozen files are
read back line by line into `rollout_steps.csv` and `optimizer_updates.csv`, while per-round
means, zero-gradient updates and the plot curves accumulate. Everything is written atomically.

One run id can have several sources: slime in offline mode writes the driver's, the RolloutManager's
and actor rank 0's run under one id, each in its own directory (docs/wandb.md). Each source is frozen
on its own (`runs/<round>_<run_id>.<k>.json`, k in start order) and the sources of one id are read
back as one run, their rows merged by rollout step (a train/step by the rollout it belongs to).
"""

from __future__ import annotations

import hashlib
import heapq
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shopsimrl import __version__
from shopsimrl.storage import atomic_open, atomic_write_json, atomic_write_text
from shopsimrl.tracking.axes import ROLLOUT_STEP, TRAIN_STEP
from shopsimrl.tracking.export.frozen import iter_frozen, numeric_only, write_frozen
from shopsimrl.tracking.export.history_source import ExportError, HistorySource, RunRef
from shopsimrl.tracking.export.plots import CurveCollector
from shopsimrl.tracking.export.report import render_report
from shopsimrl.tracking.export.summary import RoundSummary, zero_gradient
from shopsimrl.tracking.export.tables import (
    ROLLOUT_ID_COLUMNS,
    UPDATE_ID_COLUMNS,
    CsvTable,
    RolloutRow,
    SplitStats,
    UpdateRow,
    is_rollout_key,
    is_update_key,
    split_rows,
    update_position,
)

SCHEMA_VERSION = 1
ROLLOUT_CSV = "rollout_steps.csv"
UPDATES_CSV = "optimizer_updates.csv"
SUMMARY_JSON = "summary.json"
MANIFEST_JSON = "manifest.json"
REPORT_MD = "report.md"
RUNS_DIR = "runs"
PLOTS_DIR = "plots"
DEFAULT_OUT = Path("artifacts/analysis/wandb")


@dataclass
class _RunExport:
    round: str
    ref: RunRef
    frozen: Path
    rows: int = 0


@dataclass
class ExportResult:
    out_dir: Path
    files: list[Path] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def export_history(
    groups: list[str],
    source: HistorySource,
    out_dir: Path = DEFAULT_OUT,
    *,
    updates_per_rollout: int = 2,
    plots: bool = True,
) -> ExportResult:
    """Export the full history of every run of `groups` (one round per group, in the given order)."""
    if not groups:
        raise ExportError("give at least one --group")
    if len(set(groups)) != len(groups):
        raise ExportError(f"a group is given twice: {groups}")
    exported_at = datetime.now(UTC).isoformat(timespec="seconds")
    out_dir.mkdir(parents=True, exist_ok=True)

    # Pass 1: source -> frozen numeric JSON per run; collect the metric columns.
    runs: list[_RunExport] = []
    rollout_keys: set[str] = set()
    update_keys: set[str] = set()
    for index, group in enumerate(groups):
        refs = source.runs_for_group(group)
        if not refs:
            raise ExportError(f"no runs of group {group!r} in {source.kind} source {source.location}")
        parts = Counter(ref.run_id for ref in refs)
        seen: Counter[str] = Counter()
        for ref in refs:  # in start order: a run id's sources are numbered as they started
            seen[ref.run_id] += 1
            name = ref.run_id if parts[ref.run_id] == 1 else f"{ref.run_id}.{seen[ref.run_id]}"
            item = _RunExport(f"R{index}", ref, out_dir / RUNS_DIR / f"R{index}_{name}.json")
            rows = _collect_keys(source.scan(ref), rollout_keys, update_keys)
            item.rows = _freeze(item, rows)
            runs.append(item)

    # Pass 2: frozen files -> CSVs, summary, curves.
    rollout_columns, update_columns = sorted(rollout_keys), sorted(update_keys)
    rounds = {f"R{i}": RoundSummary(f"R{i}", group) for i, group in enumerate(groups)}
    zero_updates: list[dict[str, Any]] = []
    curves = CurveCollector()
    stats = SplitStats()
    outside = 0
    with (
        atomic_open(out_dir / ROLLOUT_CSV) as rollout_file,
        atomic_open(out_dir / UPDATES_CSV) as update_file,
    ):
        rollout_csv = CsvTable(rollout_file, ROLLOUT_ID_COLUMNS, rollout_columns)
        update_csv = CsvTable(update_file, UPDATE_ID_COLUMNS, update_columns)
        for parts in _by_run(runs):
            item = parts[0]
            summary = rounds[item.round]
            summary.run_ids.append(item.ref.run_id)
            run_rollout_steps: set[int] = set()
            derived_steps: Counter[int] = Counter()  # rollout step of each update, for the axis check
            ids = [item.round, item.ref.group, item.ref.run_id]

            def on_rollout(
                row: RolloutRow,
                ids: list[str] = ids,
                summary: RoundSummary = summary,
                steps: set[int] = run_rollout_steps,
                label: str = item.round,
            ) -> None:
                rollout_csv.write([*ids, row.rollout_step, ";".join(map(str, row.wandb_steps))], row.values)
                summary.add_rollout(row)
                curves.add_rollout(label, row)
                steps.add(row.rollout_step)

            def on_update(
                row: UpdateRow,
                ids: list[str] = ids,
                summary: RoundSummary = summary,
                derived: Counter[int] = derived_steps,
                label: str = item.round,
                run_id: str = item.ref.run_id,
            ) -> None:
                update_csv.write(
                    [*ids, row.wandb_step, row.train_step, row.update_ordinal, row.rollout_step], row.values
                )
                summary.add_update(row)
                curves.add_update(label, row)
                derived[row.rollout_step] += 1
                if zero_gradient(row):
                    zero_updates.append(
                        {
                            "round": label,
                            "run_id": run_id,
                            "update_ordinal": row.update_ordinal,
                            "train_step": row.train_step,
                            "rollout_step": row.rollout_step,
                        }
                    )

            rows = _merged_rows([iter_frozen(part.frozen) for part in parts], updates_per_rollout)
            split_rows(rows, updates_per_rollout, on_rollout, on_update, stats)
            outside += sum(n for step, n in derived_steps.items() if step not in run_rollout_steps)

    summary_doc = {
        "schema_version": SCHEMA_VERSION,
        "exported_at": exported_at,
        "updates_per_rollout": updates_per_rollout,
        "rounds": [rounds[label].to_dict() for label in rounds],
        "totals": {
            "rollout_steps": rollout_csv.rows,
            "optimizer_updates": update_csv.rows,
        },
        "zero_gradient_updates": zero_updates,
        "axis_check": {
            "updates_outside_run_rollout_steps": outside,
            "rollout_merge_conflicts": stats.conflicts,
            "rollout_merge_conflict_examples": stats.conflict_examples,
            "rows_without_rollout_or_train_step": stats.rows_without_axis,
        },
    }
    plot_files = curves.render(out_dir / PLOTS_DIR) if plots else []
    atomic_write_json(out_dir / SUMMARY_JSON, summary_doc)
    files = [item.frozen for item in runs] + [
        out_dir / ROLLOUT_CSV,
        out_dir / UPDATES_CSV,
        out_dir / SUMMARY_JSON,
        *plot_files,
    ]
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "exported_at": exported_at,
        "tool": f"shopsimrl {__version__}",
        "source": {
            "kind": source.kind,
            "location": source.location,
            "history_api": "full history (offline transaction log / scan_history); never sampled",
        },
        "groups": groups,
        "updates_per_rollout": updates_per_rollout,
        "runs": [
            {
                "round": item.round,
                "group": item.ref.group,
                "run_id": item.ref.run_id,
                "name": item.ref.name,
                "job_type": item.ref.job_type,
                "state": item.ref.state,
                "source": item.ref.location,
                "torn_tail": item.ref.torn,
                "history_rows": item.rows,
                "frozen_file": item.frozen.relative_to(out_dir).as_posix(),
            }
            for item in runs
        ],
        "row_counts": {
            ROLLOUT_CSV: rollout_csv.rows,
            UPDATES_CSV: update_csv.rows,
            "history_rows": sum(item.rows for item in runs),
        },
        "files": {path.relative_to(out_dir).as_posix(): _file_entry(path) for path in files},
    }
    report = render_report(manifest, summary_doc, [p.relative_to(out_dir).as_posix() for p in plot_files])
    atomic_write_text(out_dir / REPORT_MD, report)
    manifest["files"][REPORT_MD] = _file_entry(out_dir / REPORT_MD)
    atomic_write_json(out_dir / MANIFEST_JSON, manifest)
    return ExportResult(
        out_dir, [*files, out_dir / REPORT_MD, out_dir / MANIFEST_JSON], manifest, summary_doc
    )


def _by_run(runs: list[_RunExport]) -> list[list[_RunExport]]:
    """The exported sources grouped by (round, run id), in the order each run first appears."""
    grouped: dict[tuple[str, str], list[_RunExport]] = {}
    for item in runs:
        grouped.setdefault((item.round, item.ref.run_id), []).append(item)
    return list(grouped.values())


def _merged_rows(sources: list[Iterable[dict[str, Any]]], updates_per_rollout: int) -> Iterator[dict[str, Any]]:
    """One run's rows from several sources, merged by rollout step (each source is in order itself);
    a row without an axis keeps the position of the row before it in its source."""
    if len(sources) == 1:
        yield from sources[0]
        return

    def positioned(index: int, rows: Iterable[dict[str, Any]]) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
        position = -1
        for order, row in enumerate(rows):
            if isinstance(row.get(ROLLOUT_STEP), (int, float)):
                position = int(row[ROLLOUT_STEP])
            elif isinstance(row.get(TRAIN_STEP), (int, float)):
                position = update_position(int(row[TRAIN_STEP]), updates_per_rollout)[1]
            yield position, index, order, row

    for _, _, _, row in heapq.merge(*(positioned(i, rows) for i, rows in enumerate(sources))):
        yield row


def _collect_keys(
    rows: Iterator[dict[str, Any]], rollout_keys: set[str], update_keys: set[str]
) -> Iterator[dict]:
    for row in rows:
        numeric = numeric_only(row)
        for key in numeric:
            if key not in rollout_keys and key not in update_keys:
                if is_rollout_key(key):
                    rollout_keys.add(key)
                elif is_update_key(key):
                    update_keys.add(key)
        yield numeric


def _freeze(item: _RunExport, rows: Iterator[dict[str, Any]]) -> int:
    ref = item.ref

    def header(count: int) -> dict[str, Any]:
        # Called after the last row, when an offline run's state and torn tail are known.
        return {
            "run_id": ref.run_id,
            "group": ref.group,
            "round": item.round,
            "name": ref.name,
            "job_type": ref.job_type,
            "state": ref.state,
            "source": ref.location,
            "torn_tail": ref.torn,
            "history_rows": count,
        }

    return write_frozen(item.frozen, rows, header)


def _file_entry(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    rows = 0
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            rows += chunk.count(b"\n")
    entry: dict[str, Any] = {"sha256": digest.hexdigest(), "bytes": path.stat().st_size}
    if path.suffix == ".csv":
        entry["rows"] = rows - 1  # minus the header
    return entry

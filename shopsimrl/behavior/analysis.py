"""Behaviour analysis of one or more runs (rounds) from their local traces, in one streaming pass.

    result = analyze_runs(["runs/qwen35-4b-round-000", "runs/qwen35-4b-round-001"], Path("artifacts/analysis/behavior"))

Writes `behavior_analysis.md`, PNG plots and CSVs into the output directory (docs/behavior_analysis.md).
Memory holds one group trace at a time plus per-(round, arm) and per-(round, step) aggregates.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shopsimrl.behavior.episode import EpisodeFacts, group_episodes
from shopsimrl.behavior.plots import render_plots
from shopsimrl.behavior.report import REPORT_FILE, render_report
from shopsimrl.behavior.run_source import (
    ProblemLog,
    RunSource,
    SlimeStep,
    iter_traces,
    resolve_run,
    slime_steps,
)
from shopsimrl.behavior.tables import (
    EPISODE_COLUMNS,
    EPISODES_CSV,
    StreamingCsv,
    episode_row,
    write_aggregate_tables,
)
from shopsimrl.behavior.tally import Tally
from shopsimrl.records import GroupTrace
from shopsimrl.storage import atomic_write_text

DEFAULT_OUT = Path("artifacts/analysis/behavior")


@dataclass
class AnalysisResult:
    out_dir: Path
    report: Path
    tally: Tally
    files: list[Path] = field(default_factory=list)
    problems: ProblemLog = field(default_factory=ProblemLog)


def tally_traces(
    traces: Iterable[GroupTrace], round_label: str, tally: Tally, episodes_csv: StreamingCsv | None = None
) -> None:
    """Fold group traces into `tally` (and `episodes.csv`); diagnostic retry groups are skipped."""
    for trace in traces:
        if trace.retry is not None:
            tally.retry_groups_skipped += 1
            continue
        tally.groups += 1
        for episode in group_episodes(trace, round_label):
            tally.add(episode)
            if episodes_csv is not None:
                episodes_csv.write(episode_row(episode))


def tally_episodes(episodes: Iterable[EpisodeFacts], tally: Tally) -> None:
    for episode in episodes:
        tally.add(episode)


def analyze_runs(run_dirs: Sequence[str | os.PathLike[str]], out_dir: Path = DEFAULT_OUT) -> AnalysisResult:
    """Analyse every RUN_DIR (a round directory or its train stage) into `out_dir`.

    Raises FileNotFoundError naming a RUN_DIR without traces, ValueError for two RUN_DIRs of one round.
    """
    if not run_dirs:
        raise ValueError("no RUN_DIR given")
    sources = [resolve_run(run_dir) for run_dir in run_dirs]
    labels = [s.round_label for s in sources]
    duplicated = sorted({label for label in labels if labels.count(label) > 1})
    if duplicated:
        raise ValueError(f"round {duplicated[0]!r} is given twice; give each round directory once")
    tally = Tally()
    problems = ProblemLog()
    slime: dict[str, dict[int, SlimeStep]] = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    with StreamingCsv(out_dir / EPISODES_CSV, EPISODE_COLUMNS) as episodes_csv:
        for source in sources:
            before = tally.groups + tally.retry_groups_skipped
            tally_traces(iter_traces(source, problems), source.round_label, tally, episodes_csv)
            if tally.groups + tally.retry_groups_skipped == before:
                problems.append(f"{source.traces_dir}: no readable group trace")
            slime[source.round_label] = slime_steps(source, problems)
    files = [out_dir / EPISODES_CSV, *write_aggregate_tables(out_dir, tally, slime)]
    plots = render_plots(out_dir, tally, slime)
    report = atomic_write_text(out_dir / REPORT_FILE, render_report(sources, tally, slime, plots, problems))
    return AnalysisResult(
        out_dir=out_dir, report=report, tally=tally, files=[*files, *plots, report], problems=problems
    )


__all__ = ["DEFAULT_OUT", "AnalysisResult", "RunSource", "analyze_runs", "tally_episodes", "tally_traces"]

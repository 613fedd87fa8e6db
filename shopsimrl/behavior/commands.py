"""`shopsimrl behavior ...`: a thin click layer over `shopsimrl.behavior`."""

from __future__ import annotations

from pathlib import Path

import click

from shopsimrl.behavior.analysis import DEFAULT_OUT, analyze_runs


@click.group()
def behavior() -> None:
    """Behaviour of trained agents, counted per episode from the local traces (no server).

    Example: shopsimrl behavior analyze runs/qwen35-4b-round-000
    """


@behavior.command("analyze")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--out", "out_dir", default=DEFAULT_OUT, show_default=True, type=click.Path(file_okay=False, path_type=Path),
    help="Directory for behavior_analysis.md, the PNG plots and the CSVs.",
)  # fmt: skip
def analyze(run_dirs: tuple[Path, ...], out_dir: Path) -> None:
    """Per-episode turns, tokens, tool calls, endings and failure modes of RUN_DIR... (rounds).

    Each RUN_DIR is a round directory (runs/<group>, traces under train/traces) or its train stage.
    Episodes are shown beside slime's per-Sample rollout/response_len/mean and
    rollout/truncated_ratio of the same steps (from metrics.jsonl), by round and by arm.

    Example: shopsimrl behavior analyze runs/qwen35-4b-round-000 runs/qwen35-4b-round-001 --out artifacts/analysis/behavior
    """
    try:
        result = analyze_runs(run_dirs, out_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    for problem in result.problems.first:
        click.echo(f"warning: {problem}", err=True)
    tally = result.tally
    episodes = sum(tally.by_arm[(r, "all")].episodes for r in tally.rounds)
    click.echo(
        f"{episodes} episodes in {tally.groups} groups of {len(tally.rounds)} round(s) -> {result.report}"
    )

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


@behavior.command("panels")
@click.option("--group", help="W&B group (the round), e.g. qwen35-4b-round-000. Default: WANDB_GROUP.")
@click.option("--project", help="W&B project. Default: WANDB_PROJECT.")
@click.option("--entity", help="W&B entity (needed to save). Default: WANDB_ENTITY.")
@click.option("--mode", type=click.Choice(["online", "offline", "disabled"]), help="Default: WANDB_MODE.")
@click.option(
    "--skillbank", type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Skillbank JSON: one curriculum panel per chunk (else one regex panel for all chunks).",
)  # fmt: skip
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path),
    help="Workspace file. Default: artifacts/analysis/workspace-<group>.json.",
)  # fmt: skip
@click.option(
    "--from-file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Save a workspace file written earlier (where W&B was unreachable) instead of building one.",
)  # fmt: skip
def panels(
    group: str | None, project: str | None, entity: str | None, mode: str | None, skillbank: Path | None,
    out: Path | None, from_file: Path | None,
) -> None:  # fmt: skip
    """Build the five panel sections of the monitoring guide for a W&B group (panels as code).

    Writes the workspace spec to a file; with USE_WANDB=1, mode online and an entity it also saves it
    to W&B as a saved view (wandb-workspaces) and prints its URL.

    Example: shopsimrl behavior panels --group qwen35-4b-round-000 --skillbank configs/skillbank.example.json

    Example (later, online): USE_WANDB=1 WANDB_MODE=online shopsimrl behavior panels --from-file artifacts/analysis/workspace-qwen35-4b-round-000.json
    """
    from shopsimrl.errors import ConfigError
    from shopsimrl.tracking import WandbSettings
    from shopsimrl.tracking.workspace import publish_workspace

    try:
        settings = WandbSettings.from_env(
            overrides={"group": group, "project": project, "entity": entity, "mode": mode}
        )
        result = publish_workspace(settings, skillbank=skillbank, out=out, from_file=from_file)
    except (ConfigError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    if result.path is not None:
        click.echo(f"workspace spec for {result.group}: {result.sections} sections -> {result.path}")
    if result.url is not None:
        click.echo(f"saved: {result.url}")

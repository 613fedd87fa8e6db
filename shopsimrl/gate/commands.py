"""`shopsimrl training online-gate CONFIG`: the validation gate from the command line (thin layer over stage.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from shopsimrl.cli_errors import cli_errors
from shopsimrl.cli_options import parse_sets, wandb_options


@click.command("online-gate")
@click.argument("config_path", metavar="CONFIG", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a config value (repeatable).")
@click.option("--no-progress", is_flag=True, help="No progress lines.")
@wandb_options
def online_gate(config_path: Path, sets: tuple[str, ...], no_progress: bool, wandb_settings: Any) -> None:
    """Validate the Analyst's candidate skill edits on a fixed checkpoint (randomized paired deltas).

    Runs (or resumes) the pre-registered design of CONFIG, estimates each candidate's effect and
    writes runs/<round>/gate/ (docs/gate.md). Re-running the same command resumes a killed gate;
    a changed input is refused. W&B: one run of job type gate, logged once at completion or abort.

    Example: python scripts/run_shopsimrl.py training online-gate configs/trace2skill_online_gate.yaml
    --wandb --wandb-project "$WANDB_PROJECT" --wandb-group "$WANDB_GROUP"
    """
    from shopsimrl.gate.config import load_gate_config
    from shopsimrl.gate.stage import run_gate

    with cli_errors("gate"):
        config = load_gate_config(config_path, parse_sets(sets, example="design.tasks=8"))
        result = run_gate(config, settings=wandb_settings, echo=click.echo, progress=not no_progress)
    for line in result.lines:
        click.echo(line)

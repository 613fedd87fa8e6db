"""`shopsimrl training round CONFIG`: one whole round from the command line (thin layer over runner.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from shopsimrl.config.overrides import parse_sets
from shopsimrl.errors import ConfigError, StartupError, StorageError
from shopsimrl.tracking.settings import WandbSettings, wandb_options


def _round_group(group: str, settings: WandbSettings) -> WandbSettings:
    """The three runs go into the round's group. A `--wandb-group` naming another round is refused; a
    WANDB_GROUP from the environment (the Makefile exports its default) is overridden, with a note."""
    if settings.group in (None, group):
        return replace(settings, group=group)
    source = click.get_current_context().get_parameter_source("wandb_group")
    if source is click.core.ParameterSource.COMMANDLINE:
        raise click.ClickException(f"--wandb-group {settings.group!r} is not the round {group!r} of the config "
                                   "(round.group); use the same name for both")  # fmt: skip
    if settings.enabled:
        click.echo(f"note: WANDB_GROUP={settings.group!r} is not the round {group!r} of the config; "
                   f"the round's three runs go into {group!r}", err=True)  # fmt: skip
    return replace(settings, group=group)


@click.command("round")
@click.argument("config_path", metavar="CONFIG", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a config value (repeatable).")
@wandb_options
def round_command(config_path: Path, sets: tuple[str, ...], wandb_settings: WandbSettings) -> None:
    """One whole round: train -> analyze -> gate -> the next round's inputs and runs/<group>/round_report.md.

    The three stages log into one W&B group, the config's round.group (W&B settings as for every
    stage: USE_WANDB/WANDB_* or the --wandb* flags; offline unless WANDB_MODE says otherwise).
    Re-running the same command resumes a killed round: finished stages (runs/<group>/round_state.json)
    are never re-run. At the end it prints the command that starts the next round.

    Example: python -m shopsimrl.cli training round configs/local/demo_round.yaml --wandb
    """
    from shopsimrl.analyst.sidecar import CardsLockedError
    from shopsimrl.analyst.stage import AnalysisError
    from shopsimrl.evaluation.runner import RunnerAborted
    from shopsimrl.local.progress import ProgressPrinter
    from shopsimrl.models.checkpoint import CheckpointError
    from shopsimrl.models.smollm2 import ModelUnavailableError
    from shopsimrl.round.config import load_round_config
    from shopsimrl.round.runner import run_round
    from shopsimrl.round.state import RoundError
    from shopsimrl.round.summary import round_summary

    try:
        config = load_round_config(config_path, parse_sets(sets, example="train.driver.num_rollout=1"))
        settings = _round_group(config.group, wandb_settings)
        printer = ProgressPrinter(config.train_config(), enabled=True)
        try:
            result = run_round(config, settings=settings, echo=click.echo, on_train_event=printer.on_event,
                               progress=True)
        finally:
            printer.close()
    except (ConfigError, RoundError, CheckpointError, StartupError, StorageError, ModelUnavailableError,
            AnalysisError, CardsLockedError) as exc:
        raise click.ClickException(str(exc)) from None
    except RunnerAborted as exc:
        raise click.ClickException(f"gate incomplete: {exc}; re-run the same command to resume") from None
    except FileNotFoundError as exc:
        raise click.ClickException(f"{exc.filename}: not found") from None
    click.echo(round_summary(config, result))

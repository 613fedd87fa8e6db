"""`shopsimrl training round CONFIG` and `shopsimrl training rounds CONFIG --count N` (thin layers over
runner.py and chain.py)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from shopsimrl.cli_errors import cli_errors
from shopsimrl.cli_options import parse_sets, wandb_options
from shopsimrl.errors import ConfigError
from shopsimrl.tracking.settings import WandbSettings

_WANDB_FLAGS = {"wandb": "enabled", "wandb_project": "project", "wandb_entity": "entity", "wandb_mode": "mode",
                "wandb_dir": "dir"}  # fmt: skip


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


def _settings_for(env_settings: WandbSettings) -> Callable[[Any], WandbSettings]:
    """A round's W&B settings: a --wandb* flag on the command line > the config's `tracking:` (a next
    round's is its predecessor's) > the environment (USE_WANDB, WANDB_*). ctx.params keeps the raw flags."""
    context = click.get_current_context()
    given = {key: context.params.get(name) for name, key in _WANDB_FLAGS.items()
             if context.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE}  # fmt: skip

    def settings_for(config: Any) -> WandbSettings:
        if config.tracking is None:
            settings = env_settings
        else:
            try:
                settings = WandbSettings.from_env(overrides={**config.tracking.overrides(), **given})
            except ConfigError as exc:
                raise click.ClickException(str(exc)) from None
        return _round_group(config.group, settings)

    return settings_for


backend_options = [
    click.option("--compose", default=None, metavar="COMMAND",
                 help="docker backend: the compose command (make passes its COMPOSE; default: "
                      "docker compose --env-file docker/versions.env)."),  # fmt: skip
    click.option("--dry-run", is_flag=True, help="docker backend: print each stage's compose command; run nothing."),
]


def _with(options: list[Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def _round_errors() -> AbstractContextManager[None]:
    # A stage the round ran stays unfinished in round_state.json: the same command retries or resumes it.
    return cli_errors("gate", prefix="round: ", aborted_hint="; re-run the same command to resume")


def _progress(config: Any) -> Any:
    from shopsimrl.local.progress import ProgressPrinter

    return ProgressPrinter(config.train_config(), enabled=config.backend == "local")


@click.command("round")
@click.argument("config_path", metavar="CONFIG", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a config value (repeatable).")
@_with(backend_options)
@wandb_options
def round_command(config_path: Path, sets: tuple[str, ...], compose: str | None, dry_run: bool,
                  wandb_settings: WandbSettings) -> None:  # fmt: skip
    """One whole round: train -> analyze -> gate -> the next round's inputs and runs/<group>/round_report.md.

    round.backend of the config says where the stages run: `local` (this process, CPU) or `docker`
    (the compose services train/analyze/gate; --dry-run prints their commands). The three stages log
    into one W&B group, the config's round.group; W&B settings: a --wandb* flag, else the config's
    `tracking:` (a next round keeps its predecessor's), else USE_WANDB/WANDB_* (offline by default).
    Re-running the same command resumes a killed round: finished stages (runs/<group>/round_state.json)
    are never re-run. At the end it prints the command that starts the next round.

    Example: python -m shopsimrl.cli training round configs/local/demo_round.yaml --wandb
    """
    from shopsimrl.round.backends import backend_for
    from shopsimrl.round.config import load_round_config
    from shopsimrl.round.runner import run_round
    from shopsimrl.round.summary import round_summary

    settings_for = _settings_for(wandb_settings)
    with _round_errors():
        config = load_round_config(config_path, parse_sets(sets, example="train.driver.num_rollout=1"))
        backend = backend_for(config, compose=compose, dry_run=dry_run)
        printer = _progress(config) if config.backend == "local" else None
        try:
            result = run_round(config, settings=settings_for(config), echo=click.echo,
                               on_train_event=printer.on_event if printer else None, progress=True,
                               backend=backend)  # fmt: skip
        finally:
            if printer:
                printer.close()
    if result.next_round is not None:
        click.echo(round_summary(config, result))


@click.command("rounds")
@click.argument("config_path", metavar="CONFIG", type=click.Path(path_type=Path))
@click.option("--count", type=click.IntRange(min=1), required=True, help="How many rounds, this one included.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a value of the first round's config.")
@_with(backend_options)
@wandb_options
def rounds_command(config_path: Path, count: int, sets: tuple[str, ...], compose: str | None, dry_run: bool,
                   wandb_settings: WandbSettings) -> None:  # fmt: skip
    """COUNT rounds unattended: each trains on from the last one's checkpoint with the skillbank its gate
    selected (runs/<group>/next_round.yaml), new seeds, no second warm start, the same W&B settings.

    Killed at any point, the same command resumes where it stopped without re-running finished work.
    At the end: runs/<name>-rounds/rounds_report.md (+ rounds_curves.png), one row per round.

    Example: python -m shopsimrl.cli training rounds configs/local/demo_round.yaml --count 2 --wandb
    """
    from shopsimrl.round.backends import backend_for
    from shopsimrl.round.chain import run_rounds
    from shopsimrl.round.config import load_round_config
    from shopsimrl.round.summary import round_summary

    settings_for = _settings_for(wandb_settings)
    with _round_errors():
        first = load_round_config(config_path, parse_sets(sets, example="train.driver.num_rollout=1"))
        backend = backend_for(first, compose=compose, dry_run=dry_run)
        printer = _progress(first) if first.backend == "local" else None
        try:
            results, report = run_rounds(first, count=count, settings_for=settings_for, backend=backend,
                                         echo=click.echo, on_train_event=printer.on_event if printer else None,
                                         progress=True)  # fmt: skip
        finally:
            if printer:
                printer.close()
    if report is not None:
        last_config, last = results[-1]
        click.echo(round_summary(last_config, last))
        click.echo(f"rounds report: {report}")

"""`shopsimrl training demo|run|smoke`: the local CPU backend from the command line (thin layer over run.py)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from shopsimrl.cli_errors import cli_errors
from shopsimrl.cli_options import parse_sets
from shopsimrl.errors import ConfigError

DEFAULT_DEMO_CONFIG = Path("configs/local/demo_round.yaml")  # its `train:` section is the demo's training
DEFAULT_SMOKE_CONFIG = Path("configs/local/smoke.yaml")


def _load(
    config_path: Path, sets: tuple[str, ...], extra: dict[str, Any] | None = None, *, round_train: bool = False
) -> Any:
    """The run config at `config_path`; `round_train`: the `train:` section of the round config there."""
    from shopsimrl.local.config import load_round_train_config, load_run_config

    load = load_round_train_config if round_train else load_run_config
    try:
        return load(config_path, {**(extra or {}), **parse_sets(sets, example="model.name=tiny")})
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    except FileNotFoundError:
        raise click.ClickException(f"config file not found: {config_path}") from None
    except OSError as exc:
        raise click.ClickException(f"cannot read config file {config_path}: {exc.strerror or exc}") from None


def _run(config: Any, *, settings: Any = None, progress: bool = True) -> Any:
    from shopsimrl.local.progress import ProgressPrinter
    from shopsimrl.local.run import run_training

    printer = ProgressPrinter(config, enabled=progress)
    # StorageError (a full or read-only disk mid-run) is one line too: the failure record (if it
    # could be written) already holds the traceback, the operator needs the path and the cause.
    try:
        with cli_errors("train"):
            return run_training(config, settings=settings, echo=click.echo, on_event=printer.on_event)
    finally:
        printer.close()


def _utc_suffix() -> str:
    # To the microsecond: two smokes started in the same second still get two run directories.
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def demo_run_group(base: str) -> str:
    """The run directory group of one demo: `base` plus a UTC time to the microsecond.

    A demo is re-run as a matter of course; each run gets its own directory (a run directory is
    never shared, docs/local_backend.md) while W&B keeps all demos in the one group `base`.
    """
    return f"{base}-{_utc_suffix()}"


set_option = click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a config value (repeatable)."
)


@click.group("training")
def train() -> None:
    """Train on the local CPU backend (slime's rollout loop and GRPO in one process).

    Example: shopsimrl training smoke --config configs/local/smoke.yaml --set model.name=tiny
    """


@train.command("demo")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=DEFAULT_DEMO_CONFIG,
    show_default=True,
    help="A round config; the demo runs its `train:` section (run.group etc. from its `round:`).",
)
@set_option
def demo_command(config_path: Path, sets: tuple[str, ...]) -> None:
    """One round on the demo model: warm start, a few GRPO steps, W&B offline, then a summary.

    The training is the `train:` section of configs/local/demo_round.yaml (what `make demo` trains in
    its round), with the round's own seeds and saves left out. W&B logs offline into ./wandb unless
    USE_WANDB / WANDB_MODE / WANDB_DIR say otherwise, always in the demo's own group (round.group of
    the config, local-demo-round-000). Each demo writes its own run directory,
    runs/<round.group>-<UTC time>/train; `--set` takes run-config keys (driver.num_rollout=1).

    Example: shopsimrl training demo
    """
    from shopsimrl.local.summary import demo_summary
    from shopsimrl.tracking import WandbSettings

    base = _load(config_path, sets, round_train=True)
    config = _load(config_path, sets, {"run.group": demo_run_group(base.run.group)}, round_train=True)
    env = dict(os.environ)
    env.setdefault("USE_WANDB", "1")
    env.setdefault("WANDB_MODE", "offline")
    # The demo is its own round: it never logs into a production group that WANDB_GROUP names.
    env.pop("WANDB_RUN_GROUP", None)
    env["WANDB_GROUP"] = base.run.group
    try:
        settings = WandbSettings.from_env(env)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    result = _run(config, settings=settings)
    click.echo(demo_summary(result))


@train.command("run")
@click.option("--config", "config_path", type=click.Path(path_type=Path), required=True)
@set_option
@click.option("--no-progress", is_flag=True, help="No progress bars (logs only).")
def run_command(config_path: Path, sets: tuple[str, ...], no_progress: bool) -> None:
    """Run the round a config describes; W&B settings come from USE_WANDB/WANDB_* (docs/wandb.md).

    The run directory runs_root/run.group/train must be new: a directory that already holds a run is
    refused (exit 1), never appended to; give each run its own run.group.

    Example: shopsimrl training run --config configs/local/train.yaml --set driver.num_rollout=5
    """
    from shopsimrl.local.summary import demo_summary

    result = _run(_load(config_path, sets), progress=not no_progress)
    click.echo(demo_summary(result))


@train.command("smoke")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=DEFAULT_SMOKE_CONFIG,
    show_default=True,
)
@set_option
@click.option("--no-progress", is_flag=True, help="No progress bars.")
def smoke_command(config_path: Path, sets: tuple[str, ...], no_progress: bool) -> None:
    """Minimal round with an acceptance report: <run_dir>/smoke_report.json; exit 1 if a required check fails.

    Each smoke gets its own run directory (a UTC timestamp is appended to run.group).

    Example: shopsimrl training smoke --config configs/local/smoke.yaml
    """
    from shopsimrl.local.run import RunResult
    from shopsimrl.local.smoke import evaluate_smoke, write_smoke_report
    from shopsimrl.metrics.smoke import report_lines
    from shopsimrl.skills.skillbank import load_skillbank

    base = _load(config_path, sets)
    if base.run.mode.value != "smoke":
        raise click.ClickException(
            f"{config_path}: run.mode is {base.run.mode.value!r}; a smoke config needs run.mode: smoke"
        )
    config = _load(config_path, sets, {"run.group": f"{base.run.group}-{_utc_suffix()}"})
    result: RunResult = _run(config, progress=not no_progress)
    chunks = load_skillbank(config.shopsim.skillbank).active_ids if config.shopsim.skillbank else []
    report = evaluate_smoke(
        result.stage_dir,
        result.summary_line,
        active_chunks=chunks,
        in_group_reward_difference=any(r.in_group_reward_difference for r in result.reports),
        ppo=config.uses_critic,
    )
    path = write_smoke_report(report, result.stage_dir)
    for line in report_lines(report, path):
        click.echo(line)
    if not report.passed:
        raise SystemExit(1)

"""`shopsimrl training analyze` and `shopsimrl training analyze-sidecar` (attached in shopsimrl/cli.py)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlparse

import click

from shopsimrl.cli_errors import cli_errors
from shopsimrl.cli_options import parse_sets, wandb_options
from shopsimrl.errors import ConfigError
from shopsimrl.tracking.settings import WandbMode, WandbSettings

# The public W&B cloud: wandb 0.31's default server is CoreWeave Forge's proxy of api.wandb.ai.
PUBLIC_WANDB_DOMAINS = ("wandb.ai", "forge.coreweave.com")


def upload_notice(settings: WandbSettings, environ: Mapping[str, str] | None = None) -> str | None:
    """The plain warning to show before failure cards could leave the cluster, or None (seed §4)."""
    if not settings.enabled or settings.mode is WandbMode.DISABLED:
        return None
    env = os.environ if environ is None else environ
    from shopsimrl.tracking.sync import default_base_url

    host = urlparse(env.get("WANDB_BASE_URL") or default_base_url()).hostname or ""
    public = any(host == domain or host.endswith("." + domain) for domain in PUBLIC_WANDB_DOMAINS)
    if settings.mode is WandbMode.ONLINE and public:
        return (
            f"WARNING: failure_cards.jsonl holds privileged, gold-aware audits (gold products, attributes, "
            f"price ceilings). With --wandb in online mode it is uploaded to the public W&B cloud ({host}) "
            "inside the artifact shopsimrl-analysis. To keep it inside the cluster, pass --keep-cards-local, "
            "use --wandb-mode offline or a private W&B host, or drop --wandb; the local files are written either way."
        )
    if settings.mode is WandbMode.OFFLINE:
        return (
            "note: failure_cards.jsonl (privileged, gold-aware) is staged in the offline run's artifact "
            "shopsimrl-analysis; `wandb sync` uploads it later. Pass --keep-cards-local to leave it out."
        )
    return None


def _load(config_path: Path, sets: tuple[str, ...] = ()) -> Any:
    from shopsimrl.analyst.config import load_analysis_config

    overrides = parse_sets(sets, example="run.group=qwen35-4b-round-001")
    try:
        return load_analysis_config(config_path, overrides)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _round_group(config: Any, settings: WandbSettings) -> WandbSettings:
    """The run goes into the round's group. A `--wandb-group` on the command line must name the
    round (checked by the stage); a WANDB_GROUP from the environment that names another round (the
    Makefile exports its default) is overridden, with a line saying so."""
    source = click.get_current_context().get_parameter_source("wandb_group")
    if source is click.core.ParameterSource.COMMANDLINE or settings.group in (None, config.run.group):
        return settings
    if settings.enabled:
        click.echo(f"note: WANDB_GROUP={settings.group!r} is not the round {config.run.group!r} of the config; "
                   f"the analysis run goes into {config.run.group!r}", err=True)  # fmt: skip
    return replace(settings, group=config.run.group)


@click.command("analyze")
@click.argument("config_path", metavar="CONFIG", type=click.Path(path_type=Path))
@click.option(
    "--keep-cards-local",
    is_flag=True,
    help="Leave failure_cards.jsonl (privileged) out of the W&B artifact; the local file is written anyway.",
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a config value (repeatable), e.g. run.group=qwen35-4b-round-001.")
@wandb_options
def analyze(config_path: Path, sets: tuple[str, ...], wandb_settings: WandbSettings, keep_cards_local: bool) -> None:
    """Failure Analyst: cards, lessons, counterfactual trials, candidate pool, ledger (docs/analyst.md).

    Reads runs/<group>/train/, writes runs/<group>/analysis/{failure_cards.jsonl,
    candidate_pool.json, proposal_ledger.jsonl, analysis_summary.json}; with --wandb one run
    (job type analysis) logs six analysis/* scalars and the artifact shopsimrl-analysis.

    Example: python scripts/run_shopsimrl.py training analyze configs/local/analysis.yaml
    --wandb --wandb-project "$WANDB_PROJECT"
    """
    from shopsimrl.analyst.stage import check_wandb_group, run_analysis

    config = _load(config_path, sets)
    wandb_settings = _round_group(config, wandb_settings)
    with cli_errors("analysis"):
        check_wandb_group(config, wandb_settings)
    notice = upload_notice(wandb_settings)
    if notice and not keep_cards_local:
        click.echo(notice, err=True)
        if wandb_settings.mode is WandbMode.ONLINE and sys.stdin.isatty():
            keep_cards_local = not click.confirm("Upload failure_cards.jsonl to the public W&B cloud?", default=False)
    # An incomplete analysis wrote every file: its counts first, then the retry line.
    with cli_errors("analysis", on_incomplete=lambda exc: _echo_result(exc.result)):
        result = run_analysis(config, settings=wandb_settings, echo=click.echo, keep_cards_local=keep_cards_local)
    _echo_result(result)


def _echo_result(result: Any) -> None:
    for key, value in result.metrics.items():
        click.echo(f"{key} = {value}")
    click.echo(f"analysis: {result.analysis_dir}")


@click.command("analyze-sidecar")
@click.argument("config_path", metavar="CONFIG", type=click.Path(path_type=Path))
@click.option("--once", is_flag=True, help="Write the cards that are due and exit (default: follow).")
@click.option("--poll-interval", type=float, default=None, help="Seconds between passes (default: sidecar.poll_interval_s).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a config value (repeatable), e.g. run.group=qwen35-4b-round-001.")
def analyze_sidecar(config_path: Path, once: bool, poll_interval: float | None, sets: tuple[str, ...]) -> None:
    """Follow runs/<group>/train/triage.jsonl and append a failure card per all-wrong group.

    Runs beside training until SIGTERM/SIGINT; restartable (cards are keyed by triage_id).

    Example: shopsimrl training analyze-sidecar configs/local/analysis.yaml
    """
    from shopsimrl.analyst.sidecar import CardsLockedError, Sidecar, cards_lock

    config = _load(config_path, sets)
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        with cards_lock(config.analysis_dir):
            sidecar = Sidecar(config.train_dir, config.analysis_dir, echo=click.echo)
            if once:
                sidecar.process_new()
            else:
                sidecar.follow(stop, poll_interval or config.sidecar.poll_interval_s)
    except CardsLockedError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"sidecar: {sidecar.stats.cards_written} card(s) written, {len(sidecar.stats.refused)} refused")

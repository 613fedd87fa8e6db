"""`shopsimrl monitor ...`: a thin click layer over `shopsimrl.metrics.alerts`."""

from __future__ import annotations

from pathlib import Path

import click

from shopsimrl.metrics.alerts import AlertConfig, check_run


class _CheckError(click.ClickException):
    exit_code = 2  # 1 is reserved for "findings"


@click.group()
def monitor() -> None:
    """Monitoring of training runs (alert rules of docs/metrics.md).

    Example: shopsimrl monitor check runs/qwen35-4b-round-000
    """


@monitor.command("check")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--window", default=10, show_default=True, help="Rollout steps pooled per drift/trend test.")
@click.option("--z-threshold", default=3.0, show_default=True, help="Binomial z beyond which a rate drifts.")
@click.option(
    "--min-rise", default=0.05, show_default=True, help="Rise of a rate across a window that counts."
)
@click.option(
    "--retry-success",
    default=0.5,
    show_default=True,
    help="Full-skill retry success rate that counts as 'retries succeed'.",
)
@click.option(
    "--negative-ev-steps",
    default=5,
    show_default=True,
    help="PPO: rollout steps in a row with negative explained variance that fire an alert.",
)
def check(
    run_dir: Path, window: int, z_threshold: float, min_rise: float, retry_success: float, negative_ev_steps: int
) -> None:
    """Evaluate the alert rules on RUN_DIR/metrics.jsonl (or RUN_DIR/train/metrics.jsonl).

    Prints each finding with the rollout steps involved; exits 1 when there are findings, 0 when
    there are none, 2 when the file cannot be read.

    Example: shopsimrl monitor check runs/qwen35-4b-round-000 --window 20
    """
    try:
        config = AlertConfig(
            window=window, z_threshold=z_threshold, min_rise=min_rise, retry_success=retry_success,
            negative_ev_steps=negative_ev_steps,
        )
        report = check_run(run_dir, config)
    except (FileNotFoundError, ValueError) as exc:
        raise _CheckError(str(exc)) from None
    for problem in report.problems:
        click.echo(f"warning: {problem}", err=True)
    span = f"steps {report.steps[0]}-{report.steps[-1]}" if report.steps else "no rollout steps"
    click.echo(f"{report.metrics_path}: {len(report.steps)} rollout steps ({span})")
    for finding in report.findings:
        click.echo(finding.render())
    if report.findings:
        click.echo(f"{len(report.findings)} finding(s)")
        click.get_current_context().exit(1)
    click.echo("no findings")

"""`shopsimrl preflight` and `shopsimrl canary`: thin click layers over shopsimrl.ops."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click


@click.command("preflight")
@click.option(
    "--runner",
    type=click.Choice(["docker", "local"]),
    default=lambda: os.environ.get("RUNNER", "docker"),
    show_default="$RUNNER or docker",
    help="How the training targets will run.",
)
@click.option(
    "--inside-container",
    is_flag=True,
    help="Run the in-container checks (GPUs, bind mounts, slime source); used by the compose service.",
)
@click.option(
    "--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option(
    "--min-free-gib",
    type=float,
    default=10.0,
    show_default=True,
    help="Margin in GiB on top of what the formal slime profile will write (saves x checkpoint size).",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Repository root (or /workspace inside the container).",
)
@click.option(
    "--json-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the report as JSON (atomically) to this file.",
)
def preflight(
    runner: str,
    inside_container: bool,
    output_format: str,
    min_free_gib: float,
    root: Path,
    json_out: Path | None,
) -> None:
    """Check the host (and the train container) before a long run.

    Prints PASS / WARN / FAIL / SKIP per check, with the fix under each failure, and exits 1 on any
    FAIL. With RUNNER=local, the checks that need Docker or a GPU are SKIP.

    Example: shopsimrl preflight --runner local
    """
    from shopsimrl.ops.preflight import (
        PreflightContext,
        Runner,
        failed,
        render_table,
        report_dict,
        run_preflight,
    )
    from shopsimrl.storage import atomic_write_json

    # In one of our images the host's checks (Docker, compose, images) cannot run: check the container.
    inside_container = inside_container or os.environ.get("SHOPSIMRL_IN_CONTAINER") == "1"
    mode = Runner.CONTAINER if inside_container else Runner(runner)
    if inside_container and not (root / "docker" / "versions.env").is_file():
        root = Path("/opt/shopsimrl") if Path("/opt/shopsimrl").is_dir() else root
    ctx = PreflightContext(root=root.resolve(), runner=mode, min_free_gib=min_free_gib)
    results = run_preflight(ctx)
    report = report_dict(results, mode)
    if json_out is not None:
        atomic_write_json(json_out, report)
    click.echo(json.dumps(report, indent=2) if output_format == "json" else render_table(results))
    if failed(results):
        raise SystemExit(1)


@click.command("canary")
@click.option(
    "--tasks", type=click.IntRange(min=1), default=10, show_default=True, help="Tasks to run end to end."
)
@click.option(
    "--backend",
    type=click.Choice(["local", "sglang"]),
    default="local",
    show_default=True,
    help="local: a Hugging Face model in this process; sglang: a running SGLang server.",
)
@click.option("--model", default=None, help="local backend: model directory (default: the demo model).")
@click.option("--url", default=None, help="sglang backend: server URL, e.g. http://127.0.0.1:30000")
@click.option("--tokenizer", default=None, help="sglang backend: tokenizer directory (default: --model).")
@click.option(
    "--split", type=click.Choice(["train", "validation", "test"]), default="test", show_default=True
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs/canary"),
    show_default=True,
    help="Directory for canary_report.json and the trajectories.",
)
def canary(
    tasks: int,
    backend: str,
    model: str | None,
    url: str | None,
    tokenizer: str | None,
    split: str,
    seed: int,
    out_dir: Path,
) -> None:
    """Run N tasks through the full rollout path with the current policy.

    Each task must yield a reward (0 is allowed, none is not), a parseable trajectory and no technical
    error. Writes canary_report.json with P50/P95 of the setup, agent and reward phases; exits 1 if
    any task failed.

    Example: shopsimrl canary --tasks 10 --backend sglang --url http://127.0.0.1:30000 --tokenizer /models/Qwen3.5-4B
    """
    from shopsimrl.errors import ConfigError
    from shopsimrl.ops.canary import CanarySettings, render_canary, run_canary

    try:
        settings = CanarySettings(
            tasks=tasks,
            backend=backend,
            model=model,
            url=url,
            tokenizer=tokenizer,
            split=split,
            seed=seed,
            out_dir=str(out_dir),
        )
        report = run_canary(settings)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(render_canary(report))
    if not report.passed:
        raise SystemExit(1)

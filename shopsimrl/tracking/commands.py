"""`shopsimrl wandb ...`: sync, verify, export and inspect (a thin layer over the library)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import click

from shopsimrl.errors import ConfigError


@click.group("wandb")
def wandb_group() -> None:
    """Offline-first W&B: sync offline runs, verify them against metrics.jsonl, export histories.

    Example: shopsimrl wandb sync wandb --dry-run
    """


@wandb_group.command("sync")
@click.argument("wandb_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Only list what would be synced (runs `wandb sync --dry-run`).")
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=600.0,
    show_default=True,
    help="Seconds one run's `wandb sync` may take before it is killed.",
)
def sync_command(wandb_dir: Path | None, dry_run: bool, timeout_s: float) -> None:
    """Sync every unsynced offline-run-* under WANDB_DIR (default: $WANDB_DIR, else ./wandb).

    Success is the run-<id>.wandb.synced marker, not wandb's exit code. Exits 1 if any run failed.
    Credentials (WANDB_API_KEY, or `wandb login`'s netrc) are checked before anything is uploaded.

    Example: shopsimrl wandb sync /persistent/wandb --timeout 900
    """
    from shopsimrl.errors import StageInterrupted
    from shopsimrl.tracking.settings import ENV_DIR
    from shopsimrl.tracking.sync import (
        SyncStatus,
        credentials_hint,
        find_offline_runs,
        format_table,
        server_url,
        sync_runs,
    )

    root = wandb_dir or Path(os.environ.get(ENV_DIR) or "wandb")

    def _interrupt(signum: int, _frame: object) -> None:
        # Raised inside the wait on `wandb sync`, which kills that run's process group (its marker
        # stays unwritten, so the next sync uploads it again); the runs already marked stay synced.
        synced = sum(run.synced for run in find_offline_runs(root))
        raise StageInterrupted("wandb sync", signum, f"{synced} run(s) under {root} are marked synced, "
                               "the others are not; run the same command again to upload them")

    # In a container the command is PID 1, which the kernel spares SIGTERM's default action.
    previous = {signum: signal.signal(signum, _interrupt) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        results = sync_runs(root, dry_run=dry_run, timeout_s=timeout_s)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from exc
    except StageInterrupted as exc:
        click.echo(str(exc), err=True)
        raise SystemExit(exc.code) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if not results:
        click.echo(f"no offline runs under {root}")
        return
    click.echo(format_table(results))
    if any(result.status is SyncStatus.NO_CREDENTIALS for result in results):
        click.echo(credentials_hint(server_url()), err=True)
    if any(not result.status.ok for result in results):
        raise SystemExit(1)


@wandb_group.command("verify")
@click.argument("stage_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--run-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Offline run-<id>.wandb (default: the one named in STAGE_DIR/wandb_status.json).",
)
@click.option(
    "--run-path", help="Online run ENTITY/PROJECT/RUN_ID, read with the full scan_history iterator."
)
def verify_command(stage_dir: Path, run_file: Path | None, run_path: str | None) -> None:
    """Compare STAGE_DIR/metrics.jsonl with the run's W&B history, value by value.

    Reports overlapping numeric values equal / different and local values missing in W&B; exits 1
    on any difference or missing value.

    Example: shopsimrl wandb verify runs/qwen35-4b-round-000/train
    """
    from shopsimrl.errors import RecordFormatError
    from shopsimrl.tracking.offline_reader import OfflineRunFormatError
    from shopsimrl.tracking.verify import offline_history, online_history, stage_run_file, verify_stage

    if run_file and run_path:
        raise click.UsageError("give --run-file or --run-path, not both")
    try:
        if run_path:
            history = online_history(run_path)
            source = run_path
        else:
            path = run_file or stage_run_file(stage_dir)
            history = offline_history(path)
            source = str(path)
        report = verify_stage(stage_dir, history)
    except (FileNotFoundError, OfflineRunFormatError, RecordFormatError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"verify {stage_dir} against {source}")
    for line in report.lines():
        click.echo(line)
    if not report.ok:
        raise SystemExit(1)


@wandb_group.command("export")
@click.option(
    "--group",
    "groups",
    multiple=True,
    required=True,
    help="W&B group of one round; repeat for several rounds, in round order.",
)
@click.option(
    "--offline-dir",
    "offline_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Read offline run files under this dir (repeatable) instead of the W&B server "
    "(default when WANDB_MODE is not online: $WANDB_DIR, the runs as they were written).",
)
@click.option("--project-path", help="Online source ENTITY/PROJECT (default: $WANDB_ENTITY/$WANDB_PROJECT).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("artifacts/analysis/wandb"),
    show_default=True,
    help="Output directory.",
)
@click.option(
    "--updates-per-rollout",
    type=int,
    default=2,
    show_default=True,
    help="Optimizer updates per rollout batch (slime's num_steps_per_rollout).",
)
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
def export_command(
    groups: tuple[str, ...],
    offline_dirs: tuple[Path, ...],
    project_path: str | None,
    out_dir: Path,
    updates_per_rollout: int,
    no_plots: bool,
) -> None:
    """Export the full numeric history of the runs of each --group: frozen JSON per run,
    rollout_steps.csv, optimizer_updates.csv, summary.json, manifest.json, plots and report.md.

    Never interpolates and never uses the sampled history() API.

    Example: shopsimrl wandb export --group qwen35-4b-round-000 --group qwen35-4b-round-001 --offline-dir wandb
    """
    from shopsimrl.errors import StorageError
    from shopsimrl.tracking.export import (
        ExportError,
        OfflineHistorySource,
        OnlineHistorySource,
        export_history,
    )
    from shopsimrl.tracking.settings import WandbMode, WandbSettings

    try:
        settings = WandbSettings.from_env()
        if not offline_dirs and not project_path and settings.mode is not WandbMode.ONLINE:
            # Offline (the default): the runs on disk are the record; the server may never have seen them.
            offline_dirs = (settings.dir,)
            click.echo(f"reading the offline runs under {settings.dir} (WANDB_MODE={settings.mode.value})")
        if offline_dirs:
            source = OfflineHistorySource(list(offline_dirs))
        else:
            if not project_path:
                entity = os.environ.get("WANDB_ENTITY")
                if not entity:
                    raise click.UsageError(
                        "online export needs --project-path ENTITY/PROJECT or WANDB_ENTITY"
                    )
                project_path = f"{entity}/{settings.project}"
            source = OnlineHistorySource(project_path)
        result = export_history(
            list(groups), source, out_dir, updates_per_rollout=updates_per_rollout, plots=not no_plots
        )
    except (ExportError, ConfigError, StorageError) as exc:
        raise click.ClickException(str(exc)) from exc
    totals = result.summary["totals"]
    click.echo(
        f"exported {len(result.manifest['runs'])} run(s): {totals['rollout_steps']} rollout steps, "
        f"{totals['optimizer_updates']} optimizer updates -> {out_dir}"
    )
    for path in result.files:
        click.echo(f"  {path}")


@wandb_group.command("inspect")
@click.argument("run_file", type=click.Path(exists=True, path_type=Path))
def inspect_command(run_file: Path) -> None:
    """Print what an offline run holds: run record, history and summary counts, exit code, torn tail.

    Example: shopsimrl wandb inspect wandb/wandb/latest-run/run-abc123.wandb
    """
    from shopsimrl.tracking.offline_reader import OfflineRunFormatError, find_run_files, read_offline_run

    files = find_run_files(run_file)
    if not files:
        raise click.ClickException(f"no run-*.wandb under {run_file}")
    for path in files:
        try:
            run = read_offline_run(path)
        except OfflineRunFormatError as exc:
            raise click.ClickException(str(exc)) from exc
        info = run.info
        click.echo(f"{path}")
        click.echo(
            f"  run {info.run_id}  project {info.project}  group {info.group or '-'}  "
            f"job_type {info.job_type or '-'}"
        )
        click.echo(
            f"  records {run.record_count}  history rows {len(run.history)}  "
            f"summary keys {len(run.summary)}  config keys {len(run.config)}"
        )
        click.echo(
            f"  tables {len(run.tables)}  artifacts {len(run.artifacts)}  "
            f"exit code {'none (killed or running)' if run.exit_code is None else run.exit_code}"
        )
        if run.torn:
            click.echo(f"  torn tail: {run.torn}")

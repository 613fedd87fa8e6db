"""`shopsimrl eval [CONFIG]`: evaluate a checkpoint on a fixed split (thin layer over stage.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from shopsimrl.cli_errors import cli_errors
from shopsimrl.cli_options import parse_sets, wandb_options
from shopsimrl.errors import ConfigError
from shopsimrl.storage.layout import EVAL_REPORT_FILE

_FLAGS = ("checkpoint", "split", "tasks", "seeds", "mask", "skillbank", "name", "group")


@click.command("eval")
@click.argument("config_path", metavar="[CONFIG]", required=False, type=click.Path(path_type=Path))
@click.option("--checkpoint", help="HF model directory, a checkpoints parent (its latest), or 'demo'.")
@click.option("--split", type=click.Choice(["validation", "test", "train"]),
              help="Held-out split [validation]; train measures the tasks the policy trains on.")
@click.option("--tasks", type=int, help="The first N tasks of the split.")
@click.option("--seeds", type=int, help="Episodes per task (each with its own fixed seeds).")
@click.option("--mask", help="Skill chunks in the prompt: full, none, or chunk ids 'a,b'.")
@click.option("--skillbank", help="The skillbank the mask draws from.")
@click.option("--name", help="Directory name under runs/<group>/eval/ (default: checkpoint-split-mask).")
@click.option("--group", help="runs/<group>/eval/...; also the W&B group unless --wandb-group is given.")
@click.option("--compare", "compare_dir", type=click.Path(path_type=Path, file_okay=False),
              help="An earlier evaluation directory with the same plan: paired test after - before.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a config value (repeatable).")
@click.option("--no-progress", is_flag=True, help="No progress lines.")
@wandb_options
def eval_command(config_path: Path | None, compare_dir: Path | None, sets: tuple[str, ...], no_progress: bool,
                 wandb_settings: Any, **flags: Any) -> None:
    """Evaluate a checkpoint on held-out tasks: success and reward with confidence intervals.

    Runs the first --tasks tasks of --split, --seeds episodes each, through the real agent loop with
    every seed fixed (the same checkpoint and plan give the same numbers), and writes
    runs/<group>/eval/<name>/: eval_plan.json, episodes.jsonl, eval_report.json. A killed
    evaluation resumes when re-run. W&B: one run of job type eval (eval/* at eval/step = the
    GRPO rollouts trained into the checkpoint). docs/evaluation.md.

    Example: shopsimrl eval configs/local/eval.yaml --checkpoint checkpoints/local-demo-round-000
    """
    from shopsimrl.evaluation.config import load_eval_config
    from shopsimrl.evaluation.stage import run_eval

    overrides = {key: value for key, value in flags.items() if key in _FLAGS and value is not None}
    overrides |= parse_sets(sets, example="episode.temperature=0.7")
    with cli_errors("eval"):
        config = load_eval_config(config_path, overrides)
        settings = wandb_settings if wandb_settings.group else replace(wandb_settings, group=config.group)
        baseline = _load_baseline(compare_dir) if compare_dir is not None else None
        result = run_eval(config, settings=settings, echo=click.echo, progress=not no_progress,
                          compare_with=None if baseline is None else (f"--compare {baseline[0]}", baseline[1]))
    for line in result.lines:
        click.echo(line)
    click.echo(f"  report: {result.eval_dir / EVAL_REPORT_FILE}")
    if baseline is not None:
        _compare(baseline, result, config.bootstrap_samples, config.seed)


def _load_baseline(directory: Path) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    from shopsimrl.config.files import parse_json, read_config_text
    from shopsimrl.evaluation.stage import EPISODES_FILE

    report_path = directory / EVAL_REPORT_FILE
    if not report_path.is_file():
        raise ConfigError(str(directory), [f"--compare: no {EVAL_REPORT_FILE} (not a finished evaluation)"])
    report = parse_json(read_config_text(report_path), str(report_path))
    return directory, report, _scored(directory / EPISODES_FILE)


def _scored(path: Path) -> list[dict[str, Any]]:
    from shopsimrl.evaluation.runner import EvaluationStatus
    from shopsimrl.storage import read_jsonl

    try:
        records = read_jsonl(path).records
    except (FileNotFoundError, ValueError) as exc:  # missing, or an unreadable line mid-file
        raise ConfigError(str(path), [f"--compare: {exc}"]) from None
    return [r for r in records if r.get("status") == EvaluationStatus.SCORED]


def _compare(baseline: tuple[Path, dict[str, Any], list[dict[str, Any]]], result: Any, samples: int, seed: int) -> None:
    from shopsimrl.evaluation.report import compare, comparison_lines
    from shopsimrl.evaluation.stage import EPISODES_FILE
    from shopsimrl.storage import atomic_write_json

    directory, before, before_records = baseline  # pairable: run_eval checked the plans before any episode
    after_records = _scored(result.eval_dir / EPISODES_FILE)
    comparison = compare(before, before_records, result.report, after_records, bootstrap_samples=samples, seed=seed)
    comparison["before"]["eval_dir"] = str(directory)
    comparison["after"]["eval_dir"] = str(result.eval_dir)
    path = result.eval_dir / f"comparison_vs_{directory.name}.json"
    atomic_write_json(path, comparison)
    for line in comparison_lines(comparison):
        click.echo(line)
    click.echo(f"  comparison: {path}")

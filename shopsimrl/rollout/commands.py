"""`shopsimrl tasks`: the task data a slime run reads (`--prompt-data`)."""

from __future__ import annotations

from pathlib import Path

import click

from shopsimrl.errors import ConfigError


@click.group("tasks")
def tasks() -> None:
    """ShopSim task data for slime.

    Example: shopsimrl tasks export --config configs/shopsim.smoke.yaml --out runs/prompts/shopsim_train.jsonl
    """


@tasks.command("export")
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="plugin options YAML (the file given to slime with --custom-config-path)")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="prompt-data JSONL to write (atomically)")
@click.option("--limit", type=int, default=None, help="export only the first N train tasks")
def export(config_path: str, out_path: str, limit: int | None) -> None:
    """Write slime prompt data: one line per train task of the configured catalog (no gold).

    Each line's `prompt` is a list of chat messages (the instruction as one user message), the
    shape slime needs with --apply-chat-template for checkpoints that ship a processor (Qwen3.5);
    `metadata.task_id` names the task our generate hook plays.

    Only the train split is exported: validation tasks belong to the gate and never reach training
    or the Failure Analyst.

    Example: shopsimrl tasks export --config configs/shopsim.formal.yaml --out runs/prompts/shopsim_train.jsonl
    """
    from shopsimrl.config import load_options_file
    from shopsimrl.rollout.datasource import export_prompt_data
    from shopsimrl.shop import load_split

    try:
        options = load_options_file(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    catalog = options.catalog.build()
    count = export_prompt_data(load_split(catalog, options.split, limit=limit), Path(out_path))
    click.echo(f"wrote {count} {options.split} tasks to {out_path}")

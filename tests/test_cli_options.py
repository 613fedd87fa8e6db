"""The command line's shared options (shopsimrl/cli_options.py): library errors become click usage errors here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from shopsimrl.cli_options import parse_sets, wandb_options

PACKAGE = Path(__file__).resolve().parents[1] / "shopsimrl"
# The command-line layer: cli.py and its helpers, and each package's commands module(s).
CLI_LAYER = re.compile(r"cli(_[a-z]+)?\.py|[a-z_]+/([a-z]+_)?commands\.py")


def test_only_the_command_line_layer_imports_click():
    """The library raises its own errors (ConfigError, ...); click's exceptions and options live at the edge."""
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # function-local imports too
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])  # fmt: skip
            if any(name == "click" or name.startswith("click.") for name in names):
                importers.append(path.relative_to(PACKAGE).as_posix())
                break
    assert [name for name in importers if not CLI_LAYER.fullmatch(name)] == []
    assert "cli_options.py" in importers


def test_a_set_item_without_key_is_a_usage_error_on_the_set_option():
    with pytest.raises(click.BadParameter, match=r"'model.name' is not KEY=VALUE \(e.g. model.name=tiny\)") as error:
        parse_sets(("model.name",), example="model.name=tiny")
    assert error.value.param_hint == "--set"
    assert parse_sets(("driver.num_rollout=3",), example="x=1") == {"driver.num_rollout": 3}


@click.command()
@wandb_options
def _show(wandb_settings):
    """Show the settings. Example: show --wandb"""
    click.echo(
        f"{wandb_settings.enabled} {wandb_settings.project} {wandb_settings.group} "
        f"{wandb_settings.entity} {wandb_settings.mode.value} {wandb_settings.dir}"
    )


def test_click_flags_default_to_the_environment(tmp_path):
    env = {
        "USE_WANDB": "1",
        "WANDB_PROJECT": "proj",
        "WANDB_GROUP": "round-000",
        "WANDB_ENTITY": "team",
        "WANDB_MODE": "online",
        "WANDB_DIR": str(tmp_path),
    }
    result = CliRunner().invoke(_show, [], env=env)
    assert result.exit_code == 0, result.output
    assert result.output == f"True proj round-000 team online {tmp_path}\n"
    result = CliRunner().invoke(
        _show, ["--no-wandb", "--wandb-group", "round-001", "--wandb-mode", "offline"], env=env
    )
    assert result.output == f"False proj round-001 team offline {tmp_path}\n"


def test_click_bad_use_wandb_is_a_usage_error_unless_the_flag_decides():
    result = CliRunner().invoke(_show, [], env={"USE_WANDB": "2"})
    assert result.exit_code == 2
    assert 'USE_WANDB must be exactly "0" or "1", got "2"' in result.output
    assert CliRunner().invoke(_show, ["--wandb"], env={"USE_WANDB": "2"}).exit_code == 0

"""Every CLI command has help with an example and is documented (sqlite-utils' test_docs idea)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from shopsimrl.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parent.parent
DOCS = "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def _walk(command: click.Command, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            found += _walk(command.get_command(ctx, name), (*path, name))
    return found


ALL = [(path, cmd) for path, cmd in _walk(main, ()) if path]


def test_every_registered_group_loads() -> None:
    ctx = click.Context(main)
    assert sorted(main.list_commands(ctx)) == sorted(COMMANDS)
    for name in COMMANDS:
        assert main.get_command(ctx, name) is not None, name


@pytest.mark.parametrize("path", [" ".join(p) for p, _ in ALL])
def test_command_has_help_with_example(path: str) -> None:
    result = CliRunner().invoke(main, [*path.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output, f"`shopsimrl {path} --help` shows no example"


@pytest.mark.parametrize("path", [" ".join(p) for p, c in ALL if not isinstance(c, click.Group)])
def test_command_is_documented(path: str) -> None:
    assert f"shopsimrl {path}" in DOCS, f"`shopsimrl {path}` appears in no README/docs page"


def test_script_shim_runs_the_cli() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "run_shopsimrl.py"), "--help"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Usage: run_shopsimrl.py" in result.stdout
    for name in COMMANDS:
        assert name in result.stdout


def test_a_write_the_machine_refuses_is_one_line_from_any_command(tmp_path, read_only_dir) -> None:
    directory, cause = read_only_dir
    out = directory / "prompts.jsonl"
    config = ROOT / "configs" / "shopsim.smoke.yaml"
    result = CliRunner().invoke(main, ["tasks", "export", "--config", str(config), "--out", str(out), "--limit", "2"])
    assert result.exit_code == 1
    assert result.output == f"Error: cannot write {out}: {cause}\n"

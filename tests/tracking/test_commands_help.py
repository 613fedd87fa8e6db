import pytest
from click.testing import CliRunner

from shopsimrl.tracking.commands import wandb_group


@pytest.mark.parametrize("command", ["sync", "verify", "export", "inspect"])
def test_every_wandb_command_has_help_with_an_example(command):
    result = CliRunner().invoke(wandb_group, [command, "--help"])
    assert result.exit_code == 0
    assert f"Example: shopsimrl wandb {command}" in result.output


def test_group_help_lists_the_commands():
    result = CliRunner().invoke(wandb_group, ["--help"])
    assert result.exit_code == 0
    assert [line.split()[0] for line in result.output.split("Commands:")[1].strip().splitlines()] == [
        "export",
        "inspect",
        "sync",
        "verify",
    ]

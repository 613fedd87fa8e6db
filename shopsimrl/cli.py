"""The `shopsimrl` command line: a thin click layer over library functions.

Command groups live next to the code they drive and are imported only when invoked, so
`shopsimrl --help` stays fast and a broken optional stack (torch, wandb) cannot break other commands.
"""

from __future__ import annotations

import importlib

import click

# name -> "module:attribute" of a click command or group
COMMANDS: dict[str, str] = {
    "shop": "shopsimrl.shop.commands:shop",
    "tasks": "shopsimrl.rollout.commands:tasks",
    "monitor": "shopsimrl.metrics.commands:monitor",
    "behavior": "shopsimrl.behavior.commands:behavior",
    "wandb": "shopsimrl.tracking.commands:wandb_group",
    "training": "shopsimrl.local.commands:train",
    "preflight": "shopsimrl.ops.commands:preflight",
    "canary": "shopsimrl.ops.commands:canary",
    "eval": "shopsimrl.evaluation.commands:eval_command",
    "slime": "shopsimrl.ops.slime_commands:slime",
}


# Old names that still work; not listed in --help.
ALIASES: dict[str, str] = {"train": "training"}

# Commands attached to a group from other packages, "module:attribute" each, one per line.
GROUP_COMMANDS: dict[str, tuple[str, ...]] = {
    "training": (
        "shopsimrl.analyst.commands:analyze",
        "shopsimrl.analyst.commands:analyze_sidecar",
        "shopsimrl.gate.commands:online_gate",
        "shopsimrl.round.commands:round_command",
        "shopsimrl.round.commands:rounds_command",
    ),
}


def _load(target: str) -> click.Command:
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd_name = ALIASES.get(cmd_name, cmd_name)
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        command = _load(target)
        if isinstance(command, click.Group):
            for extra in GROUP_COMMANDS.get(cmd_name, ()):
                sub = _load(extra)
                if sub.name not in command.commands:
                    command.add_command(sub)
        return command

    def invoke(self, ctx: click.Context) -> object:
        # A write the machine refused (disk full, read-only, permission denied) is not a bug of ours:
        # one line with the path and the cause, exit 1, from whichever command hit it.
        from shopsimrl.errors import StorageError
        from shopsimrl.storage.faults import ENVIRONMENT_ERRNOS, os_error_cause

        try:
            return super().invoke(ctx)
        except StorageError as exc:
            raise click.ClickException(str(exc)) from exc
        except OSError as exc:
            if exc.errno not in ENVIRONMENT_ERRNOS or not exc.filename:
                raise
            raise click.ClickException(f"{exc.filename}: {os_error_cause(exc)}") from exc


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="shopsimrl")
def main() -> None:
    """ShopSimRL: train LLM shopping agents with GRPO and a skill curriculum.

    Example: shopsimrl shop expert --tasks 20
    """


if __name__ == "__main__":
    main()

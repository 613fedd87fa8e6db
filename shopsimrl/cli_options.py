"""What several commands share on the command line: `--set KEY=VALUE` values and the `--wandb-*` flags.

    @click.command()
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE")
    @wandb_options
    def gate(sets, wandb_settings):
        config = load_gate_config(path, parse_sets(sets, example="design.tasks=8"))

The library parses and validates (config/overrides.py, tracking/settings.py) and raises its own
errors; only here do they become click's usage errors (exit 2), as a malformed flag should.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from shopsimrl.config.overrides import MalformedOverride, parse_overrides
from shopsimrl.errors import ConfigError
from shopsimrl.tracking.settings import (
    DEFAULT_DIR,
    DEFAULT_MODE,
    DEFAULT_PROJECT,
    ENV_DIR,
    ENV_ENTITY,
    ENV_GROUP,
    ENV_MODE,
    ENV_PROJECT,
    ENV_RUN_GROUP,
    WandbSettings,
)


def parse_sets(values: tuple[str, ...], *, example: str) -> dict[str, Any]:
    """`--set` values as {dotted key: YAML value}; an item that is not KEY=VALUE is click's usage error."""
    try:
        return parse_overrides(values, example=example)
    except MalformedOverride as exc:
        raise click.BadParameter(exc.problems[0], param_hint="--set") from None


_F = TypeVar("_F", bound=Callable[..., Any])


def _env_default(name: str) -> Callable[[], str | None]:
    # Evaluated when the command runs, not at import: the environment of the invocation counts.
    return lambda: os.environ.get(name) or None


def wandb_options(func: _F) -> _F:
    """Add `--wandb/--no-wandb --wandb-project --wandb-group --wandb-entity --wandb-mode --wandb-dir`.

    Every flag defaults to its environment variable; the command receives one keyword argument,
    `wandb_settings` (a validated `WandbSettings`). A bad value becomes a usage error.
    """
    names = ("wandb", "wandb_project", "wandb_group", "wandb_entity", "wandb_mode", "wandb_dir")

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name in names}
        try:
            kwargs["wandb_settings"] = WandbSettings.from_env(
                overrides={
                    "enabled": given["wandb"],
                    "project": given["wandb_project"],
                    "group": given["wandb_group"],
                    "entity": given["wandb_entity"],
                    "mode": given["wandb_mode"],
                    "dir": given["wandb_dir"],
                }
            )
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from exc
        return func(*args, **kwargs)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    wrapper.__wrapped__ = func  # type: ignore[attr-defined]
    decorated: Any = wrapper
    options = [
        click.option(
            "--wandb/--no-wandb",
            "wandb",
            default=None,  # None = not given: from_env reads USE_WANDB and rejects a bad value
            help="Log to W&B (default: USE_WANDB, which must be 0 or 1; unset means off).",
        ),
        click.option(
            "--wandb-project",
            default=_env_default(ENV_PROJECT),
            help=f"W&B project (default: {ENV_PROJECT}, else {DEFAULT_PROJECT!r}).",
        ),
        click.option(
            "--wandb-group",
            default=_env_default(ENV_GROUP),
            help=f"W&B run group, one per round (default: {ENV_GROUP}, else {ENV_RUN_GROUP}).",
        ),
        click.option(
            "--wandb-entity", default=_env_default(ENV_ENTITY), help=f"W&B entity (default: {ENV_ENTITY})."
        ),
        click.option(
            "--wandb-mode",
            default=_env_default(ENV_MODE),
            help=f"W&B mode: online, offline or disabled (default: {ENV_MODE}, else {DEFAULT_MODE.value!r}).",
        ),
        click.option(
            "--wandb-dir",
            default=_env_default(ENV_DIR),
            help=f"Root of the offline runs (default: {ENV_DIR}, else ./{DEFAULT_DIR}).",
        ),
    ]
    for option in reversed(options):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]

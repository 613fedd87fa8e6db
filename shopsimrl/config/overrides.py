"""`--set KEY=VALUE` overrides of a YAML config, shared by every command that takes a config file.

    overrides = parse_overrides(("driver.num_rollout=1", "model.name=tiny"), example="model.name=tiny")
    for dotted, value in overrides.items():
        set_dotted(raw, dotted, value, source="configs/local/smoke.yaml")

Values are YAML (so `1` is an int and `[a, b]` a list), parsed with the same duplicate-key check as
config files; an item that is not KEY=VALUE is a `MalformedOverride` (the command line turns it into
click's usage error on `--set`: shopsimrl/cli_options.py). A dotted key creates missing sections; a
key that runs through a non-section is a `ConfigError` naming the override.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shopsimrl.config.files import parse_yaml
from shopsimrl.errors import ConfigError


class MalformedOverride(ConfigError):
    """A `--set` item without `KEY=`; its one problem says which item and gives an example."""

    def __init__(self, item: str, example: str):
        super().__init__("--set", [f"{item!r} is not KEY=VALUE (e.g. {example})"])


def parse_overrides(values: Iterable[str], *, example: str) -> dict[str, Any]:
    """`KEY=VALUE` items as {dotted key: YAML value}; `example` is shown when an item has no `KEY=`."""
    overrides: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise MalformedOverride(item, example)
        overrides[key] = parse_yaml(raw, f"--set {item}")
    return overrides


def set_dotted(raw: Any, dotted: str, value: Any, source: str) -> None:
    """Set `raw[a][b][c] = value` for `dotted` = "a.b.c", creating missing sections."""
    node = raw
    parts = dotted.split(".")
    for part in parts[:-1]:
        if not isinstance(node, dict):
            raise ConfigError(source, [f"override {dotted}: {part!r} is not a section"])
        node = node.setdefault(part, {})
    if not isinstance(node, dict):
        raise ConfigError(source, [f"override {dotted}: not inside a section"])
    node[parts[-1]] = value

"""Reading config files: UTF-8 text of a regular file, YAML/JSON mappings without duplicate keys.

Every config reader goes through here, so a binary file, a directory given as a config, or a key
given twice (YAML and JSON would both silently keep the last value) is one `ConfigError` naming the
file and the line, never a traceback or a silently different run.

    raw = load_yaml_file("configs/local/smoke.yaml")   # ConfigError on any of the above
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from shopsimrl.errors import ConfigError


def read_config_text(path: str | os.PathLike[str]) -> str:
    """The file's text; ConfigError for a directory or bytes that are not UTF-8.

    A missing file raises FileNotFoundError (callers say "not found" in their own words).
    """
    target = Path(path)
    if target.is_dir():
        raise ConfigError(str(path), ["is a directory, not a config file"])
    data = target.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            str(path), [f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} (offset {exc.start})"]
        ) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load that records every key given twice in one mapping (with both lines)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[int, str]] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` merges are YAML's own way of overriding keys
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: SafeLoader itself reports it below
            if first is not None:
                self.duplicates.append((line, f"line {line}: key {key!r} is given twice (first at line {first})"))
            else:
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, source: str) -> Any:
    """YAML text to Python; ConfigError for invalid YAML or any duplicate key (all listed)."""
    loader = _UniqueKeyLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"not valid YAML: {exc}"]) from None
    finally:
        loader.dispose()
    if loader.duplicates:
        raise ConfigError(source, [message for _, message in sorted(loader.duplicates)])
    return data


def load_yaml_file(path: str | os.PathLike[str]) -> Any:
    return parse_yaml(read_config_text(path), str(path))


def parse_json(text: str, source: str) -> Any:
    """JSON text to Python; ConfigError for invalid JSON or a key given twice in one object."""
    duplicates: list[str] = []

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                duplicates.append(f"key {key!r} is given twice in one object")
            out[key] = value
        return out

    try:
        data = json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise ConfigError(source, [f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"]) from None
    if duplicates:
        raise ConfigError(source, duplicates)
    return data


# pydantic's prefixes of a message raised by our own validators: they say nothing to a user.
_VALIDATOR_PREFIXES = ("Value error, ", "Assertion failed, ")


def validation_problem(error: Any, prefix: str = "") -> str:
    """One pydantic validation error as "where: what" (`where` dotted; `prefix.where` under a section).

    One line: never pydantic's multi-line summary with its documentation URL (`str(ValidationError)`),
    and without the "Value error, " that pydantic puts before our validators' own messages.
    """
    where = ".".join(str(part) for part in error["loc"]) or "top level"
    message = " ".join(str(error["msg"]).split())
    for noise in _VALIDATOR_PREFIXES:
        message = message.removeprefix(noise)
    return f"{prefix}.{where}: {message}" if prefix else f"{where}: {message}"


def validation_problems(exc: Any, prefix: str = "") -> list[str]:
    """Every error of a pydantic `ValidationError` as `validation_problem` lines."""
    return [validation_problem(error, prefix) for error in exc.errors()]

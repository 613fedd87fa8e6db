"""Reading config files: UTF-8 text of a regular file, YAML/JSON mappings without duplicate keys.

Every config reader goes through here, so a binary file, a directory given as a config, or a key
given twice (YAML and JSON would both silently keep the last value) is one `ConfigError` naming the
file and the line, never a traceback or a silently different run.

    raw = load_yaml_file("configs/local/smoke.yaml")   # ConfigError on any of the above
"""

from __future__ import annotations

import json
import os
import re
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
# The name pydantic gives a union's branch inside an error's location: a type ("int", "constrained-int"),
# a parametrised one ("literal['power']", "list[str]") or a model class ("CatalogOptions").
_BRANCH = re.compile(r"(constrained-)?(int|float|str|bool|bytes|none)|[a-z][a-z-]*\[.*\]|[A-Z][A-Za-z0-9]*")
_PARSE_DETAIL = re.compile(r", (unable to parse|got a number) .*$")  # after "a valid integer": how it failed
_EXPECTED = "Input should be "


def validation_problems(exc: Any, prefix: str = "") -> list[str]:
    """Every error of a pydantic `ValidationError` as one "where: what" line (`where` dotted; `prefix.where`
    under a section).

    One line per problem: never pydantic's multi-line summary with its documentation URL
    (`str(ValidationError)`), without the "Value error, " that pydantic puts before our validators' own
    messages, and without pydantic's names of a union's branches. A value no branch of a union accepts
    is one line naming what each branch expects and the value given (`design.replicates: Input should
    be greater than or equal to 1 or 'power' (got 0)`); a value of a branch's type that fails inside it
    (a list of the wrong items, a section with a wrong key) reports only that branch's own errors.
    """
    problems = []
    for loc, message in _flatten_unions([(tuple(e["loc"]), _message(e["msg"]), e.get("input")) for e in exc.errors()]):
        where = ".".join(str(part) for part in loc) or "top level"
        problems.append(f"{prefix}.{where}: {message}" if prefix else f"{where}: {message}")
    return problems


def _message(raw: str) -> str:
    message = " ".join(str(raw).split())
    for noise in _VALIDATOR_PREFIXES:
        message = message.removeprefix(noise)
    return message


Error = tuple[tuple[Any, ...], str, Any]  # (location, message, input)


def _flatten_unions(errors: list[Error]) -> list[tuple[tuple[Any, ...], str]]:
    """`errors` with each union's branch errors merged into what a user reads (see validation_problems).

    A union shows as two or more branch names at the same place of the errors' locations (one error
    per failed branch); a lone name-like key is a key, not a branch. Each pass removes one union's
    branch names, outermost first, until none is left.
    """
    while True:
        unions: dict[tuple[Any, ...], dict[str, list[int]]] = {}
        for index, (loc, _, _) in enumerate(errors):
            for depth in range(1, len(loc)):
                if isinstance(loc[depth], str) and _BRANCH.fullmatch(loc[depth]):
                    unions.setdefault(loc[:depth], {}).setdefault(loc[depth], []).append(index)
        found = next(((at, branches) for at, branches in unions.items() if len(branches) >= 2), None)
        if found is None:
            return [(loc, message) for loc, message, _ in errors]
        at, branches = found
        members = sorted(index for indices in branches.values() for index in indices)
        inside = [indices for indices in branches.values() if any(len(errors[i][0]) > len(at) + 1 for i in indices)]
        if inside:  # the value had this branch's type: its own errors, the branch with fewest first
            best = min(inside, key=len)
            merged = [(at + errors[i][0][len(at) + 1:], errors[i][1], errors[i][2]) for i in best]
        else:
            expected = [_PARSE_DETAIL.sub("", errors[i][1].removeprefix(_EXPECTED)) for i in members]
            given = repr(errors[members[0]][2])
            given = given if len(given) <= 60 else given[:57] + "..."
            merged = [(at, f"{_EXPECTED}{' or '.join(dict.fromkeys(expected))} (got {given})", None)]
        first = members[0]
        errors = [e for i, e in enumerate(errors) if i not in members[1:] and i != first]
        errors[first:first] = merged

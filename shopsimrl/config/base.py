"""One way to load a config file: read (UTF-8, no key given twice), apply `--set` overrides, validate.

Every YAML config of the project is a `StrictModel` (an unknown key is an error, never ignored) and
is loaded by `load_config`, which reports every problem of the file in one `ConfigError`:

    config = load_config("configs/local/gate.yaml", GateConfig, {"design.tasks": 8})

`checks` are cross-field rules the model alone does not state (e.g. "trial.min_successes <=
trial.attempts"): functions of the validated config returning their problems, all reported together.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from shopsimrl.config.files import load_yaml_file, validation_problems
from shopsimrl.config.overrides import set_dotted
from shopsimrl.errors import ConfigError


class StrictModel(BaseModel):
    """A config section: a key the model does not declare is an error."""

    model_config = ConfigDict(extra="forbid")


M = TypeVar("M", bound=BaseModel)
Check = Callable[[Any], list[str]]


def read_config(
    path: str | os.PathLike[str] | None, overrides: dict[str, Any] | None = None, *, source: str | None = None
) -> dict[str, Any]:
    """The file's top-level mapping with dotted `overrides` applied; `path` None starts from {} (flags only)."""
    source = source or str(path)
    try:
        raw = {} if path is None else load_yaml_file(path)
    except FileNotFoundError:
        raise ConfigError(source, ["file not found"]) from None
    except OSError as exc:
        raise ConfigError(source, [f"cannot read file: {exc.strerror or exc}"]) from None
    if not isinstance(raw, dict):
        raise ConfigError(source, [f"top level: expected a mapping, got {type(raw).__name__}"])
    for dotted, value in (overrides or {}).items():
        set_dotted(raw, dotted, value, source)
    return raw


def validate_config(raw: Any, model: type[M], source: str, checks: Iterable[Check] = ()) -> M:
    """`raw` as a `model`, then every check; one `ConfigError` with every problem."""
    if not isinstance(raw, dict):
        raise ConfigError(source, [f"top level: expected a mapping, got {type(raw).__name__}"])
    try:
        config = model.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(source, validation_problems(exc)) from None
    problems = [problem for check in checks for problem in check(config)]
    if problems:
        raise ConfigError(source, problems)
    return config


def load_config(
    path: str | os.PathLike[str] | None,
    model: type[M],
    overrides: dict[str, Any] | None = None,
    checks: Iterable[Check] = (),
    *,
    source: str | None = None,
) -> M:
    """Read `path` through config/files.py, apply `overrides` ({"design.tasks": 8}), validate, check."""
    source = source or str(path)
    return validate_config(read_config(path, overrides, source=source), model, source, checks)


def schema_version_check(supported: int) -> Check:
    """The check that a config's `schema_version` is the one this version reads."""

    def check(config: Any) -> list[str]:
        if config.schema_version == supported:
            return []
        return [f"schema_version: {config.schema_version} is not supported (this version reads {supported})"]

    return check

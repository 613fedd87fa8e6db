"""compose.yaml: validation against the compose-spec JSON schema, and the persistent-volume rule.

The schema is the copy of the compose-spec schema vendored in the `check-jsonschema` package (a
pinned dev dependency), so no downloaded schema is committed here. The persistent-volume rule is
ours: every service that writes runs/, checkpoints/ or wandb/ must bind-mount them from the host,
or a container that goes away takes the run with it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

# Inside every container the project's persistent directories sit under /workspace.
CONTAINER_WORKSPACE = "/workspace"
PERSISTENT_DIRS: tuple[str, ...] = ("runs", "checkpoints", "wandb")
# Services that must keep their outputs (the list, plus the in-container preflight/canary).
PERSISTENT_SERVICES: tuple[str, ...] = ("train", "train-smoke", "wandb-sync", "report")

_SCHEMA_PACKAGE = "check_jsonschema.builtin_schemas.vendor"
_SCHEMA_FILE = "compose-spec.json"


class ComposeFileError(ValueError):
    """compose.yaml cannot be read as a YAML mapping."""


def load_compose_schema() -> dict[str, Any]:
    """The compose-spec JSON schema shipped with check-jsonschema (raises ModuleNotFoundError if absent)."""
    text = resources.files(_SCHEMA_PACKAGE).joinpath(_SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def read_compose(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ComposeFileError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ComposeFileError(f"{path}: expected a mapping at the top level")
    return data


def schema_errors(compose: dict[str, Any], schema: dict[str, Any] | None = None) -> list[str]:
    """Every schema violation as `<json path>: <message>`, sorted; empty when valid."""
    import jsonschema  # dev/lint dependency: imported only when validating

    validator_cls = jsonschema.validators.validator_for(schema or load_compose_schema())
    validator = validator_cls(schema or load_compose_schema())
    problems = []
    for error in validator.iter_errors(compose):
        location = "/".join(str(part) for part in error.absolute_path) or "(root)"
        problems.append(f"{location}: {error.message}")
    return sorted(problems)


def _bind_targets(volumes: Iterable[Any]) -> dict[str, str]:
    """target -> host source of every bind mount (short `src:dst[:mode]` and long syntax)."""
    binds: dict[str, str] = {}
    for volume in volumes:
        if isinstance(volume, str):
            parts = volume.split(":")
            # A short-syntax entry is a bind mount when its source is a path, not a named volume.
            if len(parts) >= 2 and parts[0].startswith((".", "/", "~", "$")):
                binds[parts[1]] = parts[0]
        elif isinstance(volume, dict) and volume.get("type") == "bind":
            binds[str(volume.get("target"))] = str(volume.get("source"))
    return binds


def persistent_mount_problems(
    compose: dict[str, Any], services: Iterable[str] = PERSISTENT_SERVICES
) -> list[str]:
    """Services among `services` that lack a host bind mount of runs/, checkpoints/ or wandb/."""
    defined = compose.get("services") or {}
    problems = []
    for name in services:
        if name not in defined:
            problems.append(f"services.{name}: not defined")
            continue
        binds = _bind_targets(defined[name].get("volumes") or [])
        for directory in PERSISTENT_DIRS:
            target = f"{CONTAINER_WORKSPACE}/{directory}"
            if target not in binds:
                problems.append(f"services.{name}: {target} is not a bind mount of a host directory")
        environment = defined[name].get("environment") or {}
        for variable in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR"):
            value = str(environment.get(variable, ""))
            if not value.startswith(f"{CONTAINER_WORKSPACE}/wandb"):
                problems.append(
                    f"services.{name}: {variable}={value or '(unset)'} is not inside {CONTAINER_WORKSPACE}/wandb"
                )
    return problems

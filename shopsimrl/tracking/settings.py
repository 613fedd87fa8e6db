"""W&B settings from the environment, overridable by CLI flags (`--wandb-*`: shopsimrl/cli_options.py).

Variables (and defaults):

| variable        | default       | meaning |
| --------------- | ------------- | ------- |
| `USE_WANDB`     | `0`           | exactly `0` or `1`; `0` means local files only (no wandb import) |
| `WANDB_PROJECT` | `shopsimrl`   | project |
| `WANDB_GROUP`   | none          | run group (one per round); wandb itself reads `WANDB_RUN_GROUP`, accepted too |
| `WANDB_ENTITY`  | none          | team or user; none means the credential's default entity |
| `WANDB_MODE`    | `offline`     | `online`, `offline` or `disabled`; offline is the safe default on training hosts |
| `WANDB_DIR`     | `./wandb`     | root of the offline runs (`<dir>/wandb/offline-run-*`) |
| `WANDB_DATA_DIR`| `<dir>/data`  | artifact staging (the offline run points at these files until sync) |
| `WANDB_CACHE_DIR`| `<dir>/cache`| wandb's cache and core logs |

Offline is the default mode because a training host often has no internet (an online init would
hang or fail) and because nothing, failure cards included, leaves the machine unless asked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from shopsimrl.errors import ConfigError

ENV_USE_WANDB = "USE_WANDB"
ENV_PROJECT = "WANDB_PROJECT"
ENV_GROUP = "WANDB_GROUP"
ENV_RUN_GROUP = "WANDB_RUN_GROUP"  # what wandb itself reads; we accept it as an alias
ENV_ENTITY = "WANDB_ENTITY"
ENV_MODE = "WANDB_MODE"
ENV_DIR = "WANDB_DIR"
ENV_DATA_DIR = "WANDB_DATA_DIR"
ENV_CACHE_DIR = "WANDB_CACHE_DIR"
ENV_API_KEY = "WANDB_API_KEY"

DEFAULT_PROJECT = "shopsimrl"
DEFAULT_DIR = "wandb"
DEFAULT_FLUSH_INTERVAL_S = 2.0


class WandbMode(StrEnum):
    ONLINE = "online"
    OFFLINE = "offline"
    DISABLED = "disabled"


DEFAULT_MODE = WandbMode.OFFLINE

_OVERRIDE_KEYS = ("enabled", "project", "group", "entity", "mode", "dir")


@dataclass(frozen=True)
class WandbSettings:
    """Where and how a stage logs to W&B. Build it with `from_env`."""

    enabled: bool = False
    project: str = DEFAULT_PROJECT
    group: str | None = None
    entity: str | None = None
    mode: WandbMode = DEFAULT_MODE
    dir: Path = Path(DEFAULT_DIR).absolute()
    flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S
    data_dir: Path | None = None  # WANDB_DATA_DIR (artifact staging); default <dir>/data
    cache_dir: Path | None = None  # WANDB_CACHE_DIR; default <dir>/cache

    @property
    def runs_dir(self) -> Path:
        """Where wandb puts `offline-run-*` (wandb appends `wandb/` to its root dir)."""
        return self.dir / "wandb"

    def __post_init__(self) -> None:
        # Artifact staging and the cache default to $HOME in wandb, which is rarely persistent in a
        # container: unless set explicitly they live under WANDB_DIR, on the same volume as the runs.
        if self.data_dir is None:
            object.__setattr__(self, "data_dir", self.dir / "data")
        if self.cache_dir is None:
            object.__setattr__(self, "cache_dir", self.dir / "cache")

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> WandbSettings:
        """Read the variables above; a non-None override (from a CLI flag) wins over the variable.

        Every problem is reported together in one `ConfigError`.
        """
        env = os.environ if environ is None else environ
        given = {key: value for key, value in (overrides or {}).items() if value is not None}
        problems: list[str] = []
        unknown = sorted(set(given) - set(_OVERRIDE_KEYS))
        if unknown:
            problems.append(f"unknown override(s) {unknown}; allowed: {list(_OVERRIDE_KEYS)}")

        if "enabled" in given:
            enabled = bool(given["enabled"])
        else:
            raw = env.get(ENV_USE_WANDB, "0")
            enabled = raw == "1"
            if raw not in ("0", "1"):
                problems.append(f'{ENV_USE_WANDB} must be exactly "0" or "1", got "{raw}"')

        group = _group_from(env, problems)
        raw_mode = str(given.get("mode", env.get(ENV_MODE) or DEFAULT_MODE.value))
        try:
            mode = WandbMode(raw_mode)
        except ValueError:
            problems.append(
                f"W&B mode must be one of {[m.value for m in WandbMode]}, got {raw_mode!r} "
                f"(from {'--wandb-mode' if 'mode' in given else ENV_MODE})"
            )
            mode = DEFAULT_MODE
        project = str(given.get("project", env.get(ENV_PROJECT) or DEFAULT_PROJECT))
        if not project.strip():
            problems.append("W&B project must not be empty")
        raw_dir = given.get("dir", env.get(ENV_DIR) or DEFAULT_DIR)
        if problems:
            raise ConfigError("W&B settings (environment and --wandb-* flags)", problems)
        data_dir, cache_dir = env.get(ENV_DATA_DIR), env.get(ENV_CACHE_DIR)
        return cls(
            data_dir=Path(data_dir).absolute() if data_dir else None,
            cache_dir=Path(cache_dir).absolute() if cache_dir else None,
            enabled=enabled,
            project=project,
            group=str(given["group"]) if "group" in given else group,
            entity=str(given["entity"]) if "entity" in given else (env.get(ENV_ENTITY) or None),
            mode=mode,
            dir=Path(raw_dir).expanduser().absolute(),
        )


def _group_from(env: Mapping[str, str], problems: list[str]) -> str | None:
    ours, theirs = env.get(ENV_GROUP) or None, env.get(ENV_RUN_GROUP) or None
    if ours and theirs and ours != theirs:
        problems.append(
            f"{ENV_GROUP}={ours!r} and {ENV_RUN_GROUP}={theirs!r} disagree; set one (we map {ENV_GROUP} "
            f"to the run group)"
        )
    return ours or theirs

"""What every preflight check takes and returns: the context, the result row and its status.

Its own module so that `preflight.py` (which runs the checks) and the modules of further checks
(`preflight_launch.py`, `preflight_image.py`) both import it, and not each other.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from shopsimrl.ops import compose_schema

VERSIONS_FILE = "docker/versions.env"
SLIME_COMMIT_FILE = "/opt/shopsimrl/SLIME_COMMIT"


class Status(StrEnum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


class Runner(StrEnum):
    DOCKER = "docker"
    LOCAL = "local"
    CONTAINER = "container"  # we are the in-container half of a docker preflight


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass
class PreflightContext:
    """Where and how to check. Every external program is a parameter so tests can point at real ones."""

    root: Path
    runner: Runner
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    min_free_gib: float = 10.0
    docker: str = "docker"
    compose_command: Sequence[str] | None = None  # default: docker compose --env-file ...
    mountinfo: Path = Path("/proc/self/mountinfo")
    slime_dir: Path = Path("/root/slime")
    slime_commit_file: Path = Path(SLIME_COMMIT_FILE)
    image_file: Path = Path("/opt/shopsimrl/IMAGE.json")  # what the image is and was built from
    workspace: Path = Path(compose_schema.CONTAINER_WORKSPACE)


def read_versions(path: Path) -> dict[str, str]:
    """docker/versions.env as a dict (KEY=value lines; comments and blank lines ignored)."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values

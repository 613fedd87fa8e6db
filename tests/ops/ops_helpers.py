"""Helpers of the ops tests (imported by name: tests/ops is on sys.path): the root and a DRY_RUN launcher."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = "scripts/run_shopsimrl_slime.sh"
# Variables of the host that would change the launcher's command line.
_LAUNCH_VARS = ("USE_WANDB", "WANDB_PROJECT", "WANDB_GROUP", "WANDB_ENTITY", "WANDB_MODE", "WANDB_DIR",
                "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_RUN_GROUP", "WANDB_API_KEY", "NUM_GPUS",
                "SMOKE_NUM_GPUS", "MODELS_DIR", "PROMPT_DATA", "LAUNCH_CONFIG", "DRY_RUN", "HOST_UID", "HOST_GID",
                "NETRC", "REF_LOAD", "RAY_TEMP_DIR", "NCCL_NVLS_ENABLE", "SLIME_DIR", "MASTER_ADDR")


@dataclass(frozen=True)
class DryRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def commands(self) -> list[str]:
        return [line for line in self.stdout.strip().splitlines() if not line.startswith("# ")]

    @property
    def plan(self) -> dict[str, str]:
        """The `# topic: text` lines printed before the commands, by topic."""
        lines = [line[2:] for line in self.stdout.splitlines() if line.startswith("# ")]
        return dict(line.split(": ", 1) for line in lines)

    @property
    def submit(self) -> list[str]:
        """The `ray job submit ...` command as an argv list."""
        return shlex.split(self.commands[-1])

    @property
    def ray_start(self) -> list[str]:
        return shlex.split(self.commands[0])


def dry_run(config: str = "configs/slime/smoke.env", **env: str) -> DryRun:
    clean = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    clean.update({"DRY_RUN": "1", "PYTHON": sys.executable, **env})
    result = subprocess.run(["bash", LAUNCHER, config], cwd=ROOT, env=clean, capture_output=True, text=True,
                            timeout=60, check=False)
    return DryRun(result.returncode, result.stdout, result.stderr)


def value_of(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]

"""Container tests (`make test-containers`): both images built on the stand-in bases, services run by
`docker compose` with compose.standin.yaml, as a user's Make targets run them.

Every test works in a copy of the checkout's front door (Makefile, compose files, pins, configs) so
that the services' bind mounts (./runs, ./wandb, ...) are a scratch directory owned by a non-root
user, HOST_UID 4242, the way a user's clone is theirs. The images come from `make engine` and `make
images STANDIN=1 CPU=1` (scripts/test_containers.sh runs both first); without them every test skips with
the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HOST_UID = 4242
PINS = ROOT / "docker" / "versions.local.env"
BIN = Path(sys.executable).parent
MAKE_LINE = re.compile(r"^make(\[\d+\])?: ")  # make's own closing line (make[1]: under a parent make)


def _pins() -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in PINS.read_text().splitlines() if line and not line.startswith("#")
    )


def _missing() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI"
    if subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode != 0:
        return "no Docker engine or Compose v2 answers (make engine)"
    if not PINS.is_file():
        return f"no {PINS.relative_to(ROOT)} (make engine)"
    for key in ("SHOPSIMRL_TRAIN_IMAGE", "SHOPSIMRL_TOOLS_IMAGE", "SHOPSIMRL_CPU_IMAGE"):
        image = _pins()[key]
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True, check=False).returncode:
            return f"image {image} not built (make images STANDIN=1 CPU=1)"
    return None


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    ours = [item for item in items if Path(item.fspath).is_relative_to(here)]
    if ours and (reason := _missing()):
        for item in ours:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def pins() -> dict[str, str]:
    return _pins()


def make_workspace(path: Path) -> Path:
    """What a user's clone holds for the docker targets: Makefile, compose files, pins, configs."""
    path.mkdir(parents=True, exist_ok=True)
    for name in ("Makefile", "compose.yaml", "compose.standin.yaml", "compose.cpu.yaml", "pyproject.toml"):
        shutil.copy2(ROOT / name, path / name)  # with its mtime: the venv's stamp stays newer than pyproject
    (path / "docker").mkdir(exist_ok=True)
    for name in ("versions.env", "versions.local.env"):
        shutil.copy(ROOT / "docker" / name, path / "docker" / name)
    shutil.copytree(ROOT / "configs", path / "configs", dirs_exist_ok=True)
    return path


def chown_tree(path: Path, uid: int = HOST_UID) -> None:
    subprocess.run(["chown", "-R", f"{uid}:{uid}", str(path)], check=True)


def owners(path: Path) -> set[int]:
    return {p.lstat().st_uid for p in path.rglob("*")} | {path.lstat().st_uid}


def make(workspace: Path, *targets: str, env: dict[str, str] | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess:
    """`make TARGET RUNNER=docker STANDIN=1` in the workspace for the user HOST_UID who owns it."""
    command = ["make", "--no-print-directory", *targets, "RUNNER=docker", "STANDIN=1",
               f"HOST_UID={HOST_UID}", f"HOST_GID={HOST_UID}", f"VENV={ROOT / '.venv'}"]
    full_env = {**os.environ, **(env or {})}
    for name in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_GROUP", "USE_WANDB"):
        if env is None or name not in env:
            full_env.pop(name, None)
    return subprocess.run(command, cwd=workspace, env=full_env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


@pytest.fixture(scope="session")
def round_workspace(tmp_path_factory) -> Path:
    """A workspace holding a real CPU round's outputs: two chained tiny rounds on the host's venv
    (the local backend) with W&B offline, as `make rounds RUNNER=local ... ROUND_ARGS=--wandb` leaves
    them: runs/, checkpoints/ and six offline runs (train, analysis, gate per round) plus the chain's
    `rounds` summary run in wandb/. Then handed to HOST_UID, the user who owns the clone."""
    sys.path.insert(0, str(ROOT / "tests" / "round"))
    from round_helpers import tiny_round

    workspace = make_workspace(tmp_path_factory.mktemp("round-workspace"))
    config = tiny_round(workspace, group="ctr-round-000")
    config["round"]["runs_root"] = "runs"
    config["round"]["checkpoints_root"] = "checkpoints"
    (workspace / "round.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    env = {**os.environ, "WANDB_DIR": str(workspace / "wandb"), "WANDB_MODE": "offline",
           "WANDB_SILENT": "true", "WANDB_GROUP": ""}  # fmt: skip
    env.pop("WANDB_API_KEY", None)
    (workspace / "wandb").mkdir()
    done = subprocess.run(
        [str(BIN / "shopsimrl"), "training", "rounds", "round.yaml", "--count", "2", "--wandb"],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    chown_tree(workspace)
    return workspace

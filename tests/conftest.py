"""Shared pytest fixtures, and slime's own code on the path.

slime is the reference for every type and call site our hooks meet, so the test session puts slime's
source on `sys.path` before any test imports `shopsimrl`: an installed slime, else `SLIME_SRC`, else
the vendored v0.3.1 subset at ../shared/vendor/slime-v0.3.1 (tests/slime_source.py). With it,
`shopsimrl.contract` hands every test slime's own `Sample` and `DynamicFilterOutput`, and subprocesses
inherit it through PYTHONPATH. Without it (a user's clone) the replicas are used and the tests that
need slime's code skip with the reason (`requires_slime`).

`wandb_offline` isolates W&B completely for one test: offline mode, every wandb directory, HOME and
NETRC under the test's tmp_path, no telemetry, and none of the run-selecting variables of the host.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import slime_source  # noqa: E402,F401  (puts slime's code on sys.path before any test imports shopsimrl)
from wandb_server import WandbServer  # the W&B stand-in of the `wandb_server` fixture (stdlib only)

# Variables that would make a test depend on the host: credentials, run selection, our own switch.
_HOST_WANDB_VARS = (
    "WANDB_API_KEY",
    "WANDB_RUN_GROUP",
    "WANDB_GROUP",
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "WANDB_RUN_ID",
    "WANDB_RESUME",
    "WANDB_BASE_URL",
    "WANDB_IDENTITY_TOKEN_FILE",
    "WANDB_CREDENTIALS_FILE",
    "WANDB_SERVICE",
    "USE_WANDB",
)


@dataclass(frozen=True)
class WandbOfflineEnv:
    """Paths of an isolated offline W&B environment (all under the test's tmp_path)."""

    root: Path
    wandb_dir: Path  # WANDB_DIR: offline runs land in <wandb_dir>/wandb/offline-run-*
    data_dir: Path  # WANDB_DATA_DIR: artifact staging
    cache_dir: Path  # WANDB_CACHE_DIR
    config_dir: Path  # WANDB_CONFIG_DIR
    home: Path  # HOME
    netrc: Path  # NETRC (not created)


def isolate_wandb(root: Path, monkeypatch: pytest.MonkeyPatch) -> WandbOfflineEnv:
    """Point every W&B location under `root` and clear host W&B variables (used by the fixtures)."""
    env = WandbOfflineEnv(
        root=root,
        wandb_dir=root / "wandb_dir",
        data_dir=root / "wandb_dir" / "data",
        cache_dir=root / "wandb_dir" / "cache",
        config_dir=root / "config",
        home=root / "home",
        netrc=root / "home" / ".netrc",
    )
    for path in (env.wandb_dir, env.data_dir, env.cache_dir, env.config_dir, env.home):
        path.mkdir(parents=True, exist_ok=True)
    for name in _HOST_WANDB_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(env.wandb_dir))
    monkeypatch.setenv("WANDB_DATA_DIR", str(env.data_dir))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(env.cache_dir))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(env.config_dir))
    monkeypatch.setenv("HOME", str(env.home))
    monkeypatch.setenv("NETRC", str(env.netrc))
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.setenv("WANDB_SILENT", "true")
    return env


@pytest.fixture
def wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WandbOfflineEnv:
    """Function-scoped isolated offline W&B environment under tmp_path."""
    return isolate_wandb(tmp_path / "wandb_env", monkeypatch)


@pytest.fixture(scope="module")
def wandb_offline_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WandbOfflineEnv]:
    """The same isolation for a whole module, so tests can share one (slow to start) W&B run."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield isolate_wandb(tmp_path_factory.mktemp("wandb_env"), monkeypatch)


# ---------------------------------------------------------------- storage faults, for real
# A full disk and a read-only directory are made with real file systems, not by patching our code:
# a tiny tmpfs (needs root with CAP_SYS_ADMIN, as in the dev and CI containers) or, for a non-root
# user, a directory without write permission (root ignores permission bits, hence the mount).


def _mount_tmpfs(path: Path, options: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    return done.returncode == 0


def _unmount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=True, capture_output=True)


def _fill_file_system(directory: Path) -> Path:
    """Write one filler file until the file system under `directory` has no free byte left."""
    filler = directory / ".filler"
    with open(filler, "wb", buffering=0) as handle:
        chunk = b"\0" * 4096
        try:
            while True:
                handle.write(chunk)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(directory, the cause our messages name): nothing can be created inside the directory."""
    path = tmp_path / "read-only"
    path.mkdir()
    if os.geteuid() == 0:
        if not _mount_tmpfs(path, "ro,size=64k"):
            pytest.skip("root without permission to mount a tmpfs: cannot make a read-only directory")
        try:
            yield path, "read-only file system"
        finally:
            _unmount(path)
    else:
        path.chmod(0o555)
        try:
            yield path, "permission denied"
        finally:
            path.chmod(0o755)


@pytest.fixture
def fill_file_system() -> Callable[[Path], Path]:
    """`fill_file_system(directory)`: leave no free byte on its file system; returns the filler file."""
    return _fill_file_system


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on its own 64 KiB tmpfs (fill it with `fill_file_system`)."""
    path = tmp_path / "small-disk"
    path.mkdir()
    if not _mount_tmpfs(path, "size=64k"):
        pytest.skip("simulating a full disk needs root with permission to mount a tmpfs")
    try:
        yield path
    finally:
        _unmount(path)


@pytest.fixture
def wandb_server() -> Iterator[WandbServer]:
    """A W&B stand-in on 127.0.0.1 (tests/wandb_server.py): the protocol `wandb sync` speaks, with
    what arrived readable as `wandb_server.snapshot()`. A request it does not implement fails the test."""
    with WandbServer(lifetime_s=120) as server:
        yield server
    server.check()

"""Atomic directories: filled under a hidden staging name, fsynced, and renamed into place.

    with atomic_directory(Path("checkpoints/run/rollout-0001")) as staging:
        model.save_pretrained(staging)          # any number of files and subdirectories
    # here rollout-0001 exists, whole and durable; after an exception it does not exist at all

A killed process leaves only a hidden `.<name>.tmp-*` directory, which readers never take for a
finished one (they look for the plain name).
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from shopsimrl.storage.atomic import fsync_directory


def _staging_directory(target: Path) -> Path:
    """Create a hidden empty directory beside `target` (mode 0o777, so the umask decides, like mkdir)."""
    for _ in range(100):
        staging = target.parent / f".{target.name}.tmp-{secrets.token_hex(4)}"
        try:
            staging.mkdir(0o777)
            return staging
        except FileExistsError:
            continue  # another writer's name (or a leftover): draw again
    raise FileExistsError(f"no free staging name beside {target} after 100 tries")


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under `root` (files first, so the entries point at data on disk)."""
    for directory, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(directory)


@contextmanager
def atomic_directory(path: str | os.PathLike[str], *, replace: bool = False) -> Iterator[Path]:
    """Yield an empty staging directory beside `path`; rename it to `path` if the block succeeds.

    `replace=True` removes an existing `path` just before the rename (a cache entry being rebuilt);
    otherwise an existing `path` makes the rename fail and the staging directory is removed. On any
    exception, a signal included, the staging directory is removed and `path` is left as it was.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = _staging_directory(target)
    try:
        yield staging
        fsync_tree(staging)
        if replace and target.exists():
            shutil.rmtree(target)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_directory(target.parent)

"""Atomic file writes: temp file in the same directory, fsync, rename, fsync of the directory.

A reader never sees a partial file: either the old content or the new one. A process killed
between write and rename leaves only a hidden `.<name>.tmp-*` file, which readers ignore.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from shopsimrl.storage.faults import SPACE_ERRNOS, storage_error

# fsyncs in flight at once: the filesystem commits concurrent fsyncs in one journal transaction.
_FSYNC_THREADS = 16


def open_temp(target: Path) -> tuple[int, str]:
    """Create a hidden temp file beside `target`: `(fd, path)`, opened for writing.

    Created with mode 0o666 like `open()` creates files, so the process umask decides the final
    permissions (tempfile.mkstemp would make every record 0600, unreadable to a tools container or
    a teammate, while metrics.jsonl is 0644).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for _ in range(100):
        name = str(target.parent / f".{target.name}.tmp-{secrets.token_hex(4)}")
        try:
            return os.open(name, flags, 0o666), name
        except FileExistsError:
            continue  # a name of another writer (or a leftover): draw again
    raise FileExistsError(f"no free temp name beside {target} after 100 tries")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` atomically and durably; creates parent directories.

    A write the machine refuses (disk full, read-only, permission) raises `StorageError` naming
    `path` and the cause; the old file, if any, stays intact.
    """
    target = Path(path)
    with atomic_open(target, "wb") as handle:
        handle.write(data)
    return target


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """A file streamed under a hidden temp name and renamed over `path` only if the block succeeds.

        with atomic_open(out_dir / "episodes.csv") as handle:   # text, UTF-8, newline=""
            handle.write(...)

    `mode` is "w" (text) or "wb". Creates parent directories. On a clean exit the data and the
    directory are fsynced; on any exception (a signal included) the temp file is removed and the old
    file, if any, stays whole. The machine refusing the write (disk full, read-only, permission)
    raises `StorageError` naming `path`; any other exception of the block (a read error of the
    source, say) propagates unchanged, because it is not a failed write.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open mode must be 'w' or 'wb', not {mode!r}")
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = open_temp(target)
    except OSError as exc:
        raise storage_error(target, exc) from exc
    text = {"encoding": "utf-8", "newline": ""} if mode == "w" else {}
    handle = os.fdopen(fd, mode, **text)
    try:
        try:
            yield handle
        except BaseException as exc:
            if isinstance(exc, OSError) and exc.errno in SPACE_ERRNOS:
                raise storage_error(target, exc) from exc
            raise
        try:
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
            os.replace(tmp_name, target)
        except OSError as exc:
            raise storage_error(target, exc) from exc
    finally:
        with suppress(OSError):  # the write is abandoned: flushing its buffer may fail again
            handle.close()  # a no-op after a clean commit
        Path(tmp_name).unlink(missing_ok=True)  # gone after the rename; removed after a failure
    fsync_directory(target.parent)


def atomic_write_many(files: Mapping[str | os.PathLike[str], bytes]) -> list[Path]:
    """Write several files atomically and durably at the cost of about one fsync round.

    Each file is still all-or-nothing (temp file, fsync, rename) and durable on return; the data
    fsyncs run concurrently and each parent directory is fsynced once, instead of two serial
    fsyncs per file (which dominate writing a step's group traces on a virtual disk).
    """
    temps: list[tuple[str, Path]] = []
    current: Path | None = None  # the file being written, for the error message
    try:
        for path, data in files.items():
            current = target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = open_temp(target)
            temps.append((tmp_name, target))
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        current = None
        with ThreadPoolExecutor(max_workers=max(1, min(_FSYNC_THREADS, len(temps)))) as pool:
            list(pool.map(_fsync_file, [tmp for tmp, _ in temps]))
        for tmp_name, target in temps:
            current = target
            os.replace(tmp_name, target)
    except BaseException as exc:
        for tmp_name, _ in temps:
            try:
                os.unlink(tmp_name)
            except FileNotFoundError:
                pass
        if isinstance(exc, OSError):
            where = current if current is not None else Path(os.path.commonpath([str(t) for _, t in temps]))
            raise storage_error(where, exc) from exc
        raise
    for directory in sorted({target.parent for _, target in temps}):
        fsync_directory(directory)
    return [target for _, target in temps]


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def json_bytes(obj: Any, *, indent: int | None = 2) -> bytes:
    """The bytes of a JSON file we write: UTF-8, NaN/Infinity kept, a final newline."""
    text = json.dumps(obj, indent=indent, sort_keys=False, ensure_ascii=False, allow_nan=True)
    return (text + "\n").encode("utf-8")


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> Path:
    """Serialise first (so a bad object never truncates the file), then write atomically."""
    return atomic_write_bytes(path, json_bytes(obj, indent=indent))


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make the renames and new entries in `directory` durable (a rename is not, until this)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

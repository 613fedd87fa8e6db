"""One writer per stage directory: an exclusive `flock` held for a block, refused at once when taken.

    with directory_lock(gate_dir / "gate.lock", busy=lambda pid: GateLocked(f"... (PID {pid})")):
        ...

The OS drops the lock when the holder's process ends however it ends (SIGKILL included), so a lock
file left behind never blocks a resume; the file itself is never deleted (deleting it would let a
third process lock a fresh file while the second still holds the old one).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def directory_lock(path: Path, *, busy: Callable[[str], BaseException]) -> Iterator[Path]:
    """Hold an exclusive lock on the file `path` (created with its directory); it names the holder's PID.

    When another process holds it, raises `busy(holder_pid)` ("unknown" while the holder is between
    taking the lock and writing its PID).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("utf-8", "replace").strip() or "unknown"
            raise busy(holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the lock

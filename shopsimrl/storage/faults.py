"""What went wrong when the machine refused a write, in the words an operator acts on.

    raise storage_error(path, exc)      # StorageError: "cannot write <path>: disk full"
    writable_dir_problem(Path("runs"))  # None, or "read-only file system", ...
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from shopsimrl.errors import StorageError

_CAUSES = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied (operation not permitted)",
    errno.ENOTDIR: "a component of the path is not a directory",
    errno.EISDIR: "is a directory",
    errno.EEXIST: "exists and is not a directory",
    errno.EIO: "input/output error (failing disk or lost network file system)",
    errno.ENAMETOOLONG: "file name too long",
}

# Errors a write can hit after its file was opened: the disk ran out of space. (Read-only and
# permission faults surface when the file is created.) Streaming writers that also read while they
# write convert only these, so a read error of their source is not reported as a failed write.
SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})

# Faults of the machine or its configuration, never of our code: the CLI reports them in one line.
ENVIRONMENT_ERRNOS = frozenset(_CAUSES) - {errno.EEXIST, errno.EISDIR}


def os_error_cause(exc: OSError) -> str:
    if isinstance(exc, StorageError):
        return exc.cause
    return _CAUSES.get(exc.errno) or exc.strerror or type(exc).__name__


def storage_error(path: str | os.PathLike[str], exc: OSError) -> StorageError:
    """The StorageError for a failed write of `path` (an existing StorageError is kept as it is)."""
    if isinstance(exc, StorageError):
        return exc
    return StorageError(str(path), os_error_cause(exc), exc.errno)


def writable_dir_problem(path: Path) -> str | None:
    """Create `path` if needed and write a probe file; the cause if that fails, else None."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-probe-{os.getpid()}"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"x")  # one byte: an empty file can still be created on a full disk
        finally:
            os.close(fd)
            probe.unlink()
    except OSError as exc:
        return os_error_cause(exc)
    return None

"""The SHA-256 of a file, read in 1 MiB blocks (model weights do not fit in memory twice)."""

from __future__ import annotations

import hashlib
import os

_BLOCK = 1 << 20


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of the file's bytes, streamed: the hash every manifest records for an input file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()

"""The frozen per-run history file: numeric history only, written and read as a stream.

The file is ordinary JSON (`json.load` reads it) laid out with one history row per line, so that a
million-row history is written and read back line by line without holding it in memory. The run
record comes last, because an offline run's state (exit record, torn tail) is known only at the end:

    {"schema_version": 1, "history": [
    {"_step": 0, "rollout/step": 1, ...},
    ...
    ],
    "run": {...}}

Only numeric values are kept: no config, credentials, console output, media or tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from shopsimrl.storage import atomic_open

FROZEN_SCHEMA_VERSION = 1
_OPEN = f'{{"schema_version": {FROZEN_SCHEMA_VERSION}, "history": ['


def numeric_only(row: Mapping[str, Any]) -> dict[str, float | int]:
    return {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def write_frozen(
    path: Path, rows: Iterable[Mapping[str, Any]], run: Callable[[int], Mapping[str, Any]]
) -> int:
    """Write `rows` (already numeric) atomically: temp file, fsync, rename. Returns the row count.

    `run(row_count)` gives the run record, called after the last row.
    """
    count = 0
    with atomic_open(path) as handle:
        handle.write(_OPEN)
        for row in rows:
            handle.write(",\n" if count else "\n")
            handle.write(json.dumps(row, separators=(",", ":")))
            count += 1
        # Without rows the list closes on the opening line: no blank row line for the reader.
        handle.write(("\n]" if count else "]") + ",\n" + '"run": ' + json.dumps(dict(run(count)), sort_keys=True) + "}\n")
    return count


def iter_frozen(path: Path) -> Iterator[dict[str, Any]]:
    """Stream the rows of a file written by `write_frozen` (one row per line)."""
    with open(path, encoding="utf-8") as handle:
        first = handle.readline().strip()
        if first.startswith(_OPEN + "]"):
            return  # a run with no history rows
        if first != _OPEN:
            raise ValueError(f"{path}: not a frozen history file of schema {FROZEN_SCHEMA_VERSION}")
        for line in handle:
            if line.startswith("]"):
                return
            if not line.strip():
                continue  # the empty row line of files written before 0-row runs were handled
            yield json.loads(line.rstrip().removesuffix(","))

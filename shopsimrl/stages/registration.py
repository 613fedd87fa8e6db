"""The inputs a stage runs on, registered before its first record: a re-run with other inputs is refused.

    register_inputs(eval_dir / "eval_plan.json", plan, records=eval_dir / "episodes.jsonl",
                    compare=plan_differences)

The manifest is written once, last of the files `before` writes (its existence means the stage is
registered). A re-run reads it back and `compare(stored, fresh, where)` raises `ConfigError` listing
every difference, so records made from two different inputs are never mixed. Records without a
manifest are refused too: their inputs cannot be known.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from shopsimrl.config.files import parse_json, read_config_text
from shopsimrl.errors import ConfigError
from shopsimrl.storage import atomic_write_json


def register_inputs(
    manifest: Path,
    fresh: Mapping[str, Any],
    *,
    records: Path,
    compare: Callable[[dict[str, Any], Mapping[str, Any], str], None],
    before: Callable[[], None] | None = None,
) -> None:
    """Write `fresh` to `manifest` on the first run (after `before()`), or check it against the stored one."""
    if manifest.exists():
        compare(parse_json(read_config_text(manifest), str(manifest)), fresh, str(manifest))
        return
    if records.exists():
        raise ConfigError(str(records.parent), [f"{records.name} exists without {manifest.name}: refusing to guess its inputs"])
    if before is not None:
        before()
    atomic_write_json(manifest, dict(fresh))  # last: its existence means the inputs are registered

"""One source of the held-out set: the shop a round trained on, as its run directory records it.

    problems = catalog_problems(config.catalog, runs_root="runs", group="qwen35-4b-round-001", key="catalog")

A round writes the shop it trains on beside its stages (runs/<group>/train_config.yaml on the local
backend, runs/<group>/shopsim_config.yaml for slime; both hold a top-level `shopsim:` with its
`catalog`). The validation and test tasks are a pure function of that catalog (seed, size, level),
so a gate or an evaluation of the round that builds another catalog would score other held-out
tasks than the Analyst's firewall protected. The gate and eval refuse that before any episode;
a directory without the round's record (a standalone evaluation) is not checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shopsimrl.config.files import load_yaml_file

RECORD_FILES = ("train_config.yaml", "shopsim_config.yaml")  # round/config.py writes one of them


def round_catalog(runs_root: str | Path, group: str) -> tuple[Path, dict[str, Any]] | None:
    """The round's catalog section and the file it came from, or None when the round recorded none."""
    for name in RECORD_FILES:
        path = Path(runs_root) / group / name
        if path.is_file():
            data = load_yaml_file(path)
            shopsim = data.get("shopsim") if isinstance(data, dict) else None
            if isinstance(shopsim, dict) and isinstance(shopsim.get("catalog"), dict):
                return path, shopsim["catalog"]
    return None


def catalog_problems(catalog: Any, *, runs_root: str | Path, group: str, key: str) -> list[str]:
    """One problem when `catalog` (a CatalogOptions) differs from the round's recorded catalog."""
    recorded = round_catalog(runs_root, group)
    if recorded is None:
        return []
    path, theirs = recorded
    mine = catalog.model_dump(mode="json")
    try:  # a record written before a key existed holds that key's default
        theirs = type(catalog).model_validate(theirs).model_dump(mode="json")
    except ValueError:
        pass  # compared as written: the differing keys name the problem
    differing = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    if not differing:
        return []
    shown = ", ".join(f"{k} {mine.get(k)!r} vs {theirs.get(k)!r}" for k in differing)
    if differing == ["tools"]:  # the same tasks (the offer draws nothing), another prompt
        consequence = "its episodes would list other tools than the round's policy was trained with"
    else:
        consequence = "its held-out tasks would differ from the ones the Analyst's firewall protected"
    return [f"{key}: not the catalog round {group} trained on ({path}): {shown}; {consequence}"]

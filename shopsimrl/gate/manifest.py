"""`online_gate_manifest.json`: what a gate was run on, so that a resume can refuse a changed input.

The manifest is written once, before the first evaluation, and holds the SHA-256 of the fixed
checkpoint (every file of the HF directory, or the demo model's GGUF file), the validation task
set, the candidate pool, the skillbank and the pre-registered mask assignments, plus the design.
Re-running the same command compares a fresh manifest with the stored one: any difference (an
input file changed, a different design) is refused with every difference listed, so evaluations
from two different gates can never be mixed.
"""

from __future__ import annotations

from typing import Any

from shopsimrl.errors import ConfigError
from shopsimrl.evaluation.hashes import json_sha256, task_set_sha256

__all__ = ["ManifestMismatchError", "build_manifest", "check_resume", "json_sha256", "task_set_sha256"]

MANIFEST_SCHEMA_VERSION = 1


class ManifestMismatchError(ConfigError):
    """The stored manifest and this invocation disagree; the gate refuses to resume."""


def build_manifest(*, round_name: str, hashes: dict[str, str], design: dict[str, Any], episode: dict[str, Any],
                   backend: str) -> dict[str, Any]:
    return {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "kind": "online_gate_manifest",
        "round": round_name,
        "hashes": dict(sorted(hashes.items())),
        "design": design,
        "episode": episode,
        "backend": backend,
    }


# Keys whose change makes stored evaluations incomparable; `backend` may change (local vs SGLang
# serve the same checkpoint) but then sampling streams differ, so it is compared too.
_COMPARED = ("round", "hashes", "design", "episode", "backend")


def check_resume(stored: dict[str, Any], fresh: dict[str, Any], source: str) -> None:
    """Raise `ManifestMismatchError` listing every difference between the stored and the fresh manifest."""
    if stored.get("schema_version") != MANIFEST_SCHEMA_VERSION:
        raise ManifestMismatchError(source, [f"schema_version {stored.get('schema_version')!r} is not {MANIFEST_SCHEMA_VERSION}"])
    stored = _upgraded(stored)
    problems = []
    for key in _COMPARED:
        old, new = stored.get(key), fresh.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            for sub in sorted(set(old) | set(new)):
                if old.get(sub) != new.get(sub):
                    problems.append(f"{key}.{sub}: stored {old.get(sub)!r}, now {new.get(sub)!r}")
        elif old != new:
            problems.append(f"{key}: stored {old!r}, now {new!r}")
    if problems:
        problems.append("refusing to resume: use a new round (runs directory) or restore the inputs")
        raise ManifestMismatchError(source, problems)


def _upgraded(stored: dict[str, Any]) -> dict[str, Any]:
    """A manifest written before the per-outcome `min_effect` (one number for both
    outcomes until 2026-12-02) as it would be written now.

    Its design held one `min_effect` for both outcomes; the config now folds that form into
    `min_effect_success` and `min_effect_reward`. Without this, a gate started before the change could
    not resume, though nothing it ran on changed.
    """
    design = stored.get("design")
    if not isinstance(design, dict) or "min_effect" not in design:
        return stored
    design = dict(design)
    bound = design.pop("min_effect")
    return stored | {"design": design | {"min_effect_success": bound, "min_effect_reward": bound}}

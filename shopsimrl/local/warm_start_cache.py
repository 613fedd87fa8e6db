"""The warm-started policy, cached by what determines it: the first run on a machine pays for it.

    key = warm_start_key(config)                       # sha256 over model, warm start, shop profile
    hit = find_cached_warm_start(config, echo=print)   # CachedWarmStart | None (verified by hash)
    store_warm_start(config, model, tokenizer, result) # after a warm start that ran

An entry is `<checkpoints_root>/warm-start-cache/<key[:16]>/`: `model/`, a checkpoint
(models/checkpoint.py: written atomically, `checkpoint.json` with the sha256 of every file), and
`warm_start.json` beside it (the full key, and the steps, losses and probes of the run that made it;
written after the model, so an entry without it is unfinished). A hit is verified against its
hash before it is used; an entry that fails (missing files, changed bytes, another key) is moved
aside (`*.invalid-<utc>`, never deleted) and the warm start runs again and rebuilds it.

The key covers everything the warm-started weights depend on: the base model's identity (the GGUF
file's sha256, the tiny model's seed, or a start checkpoint's hash), which layers train, the seed,
the forwards' precision when it is not float32 (`model.compute_dtype`),
every warm-start setting, the shop profile the expert episodes come from (catalog incl. its level,
split, tool-call format, turn and token budgets) and the probe's sampling settings (the probe
decides when the warm start stops). The warm start draws from its own generator seeded with
`model.seed`, and GRPO starts from fresh seeds after it, so a cached and a fresh warm start lead to
the same GRPO run.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shopsimrl.local.config import ComputeDtype, ModelName, RunConfig
from shopsimrl.local.warm_start import ProbeResult, WarmStartResult
from shopsimrl.models.checkpoint import CheckpointError, save_checkpoint, verify_checkpoint
from shopsimrl.storage import atomic_write_json

CACHE_DIR = "warm-start-cache"
MODEL_DIR = "model"
RESULT_FILE = "warm_start.json"
# Bump when the warm start's procedure changes what it produces for the same settings.
CACHE_VERSION = 1
_DRIVER_KEYS = ("rollout_temperature", "rollout_top_p", "rollout_top_k", "rollout_max_response_len",
                "max_tokens_per_gpu")  # fmt: skip
_SHOPSIM_KEYS = ("catalog", "split", "tool_call_format", "max_turns", "max_new_tokens_per_turn", "max_context_tokens")


@dataclass(frozen=True)
class CachedWarmStart:
    path: Path
    result: WarmStartResult


def model_identity(config: RunConfig) -> dict[str, Any]:
    """What the base weights are, independent of where they lie."""
    if config.model.checkpoint is not None:
        return {"checkpoint_sha256": verify_checkpoint(config.model.checkpoint).sha256}
    if config.model.name is ModelName.TINY:
        return {"tiny": True}  # built from model.seed (in the key) by the test-size model code
    from shopsimrl.models.smollm2 import smollm2_gguf_path
    from shopsimrl.storage import file_sha256

    return {"smollm2_gguf_sha256": file_sha256(smollm2_gguf_path())}


def warm_start_key(config: RunConfig) -> dict[str, Any]:
    shopsim = config.shopsim.model_dump(mode="json")
    driver = config.driver.model_dump(mode="json")
    key = {
        "version": CACHE_VERSION,
        "model": model_identity(config),
        "model_seed": config.model.seed,
        "trainable_top_layers": config.model.trainable_top_layers,
        "warm_start": config.warm_start.model_dump(mode="json", exclude={"save", "cache"}),
        "shopsim": {key: shopsim[key] for key in _SHOPSIM_KEYS},
        "driver": {key: driver[key] for key in _DRIVER_KEYS},
    }
    compute = config.model.compute_dtype.resolved  # `auto` shares the entries of what it chose here
    if compute is not ComputeDtype.FLOAT32:
        # bfloat16 forwards give other weights; float32 keeps the key (and the entries) it always had
        key["compute_dtype"] = compute.value
    return key


def key_digest(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def entry_dir(config: RunConfig, digest: str) -> Path:
    return Path(config.run.checkpoints_root) / CACHE_DIR / digest[:16]


def find_cached_warm_start(config: RunConfig, key: dict[str, Any], echo: Callable[[str], None]) -> CachedWarmStart | None:
    path = entry_dir(config, key_digest(key))
    if not path.exists():
        return None
    try:
        verify_checkpoint(path / MODEL_DIR)
        recorded = json.loads((path / RESULT_FILE).read_text(encoding="utf-8"))
        if recorded["key"] != key:
            raise CheckpointError(f"{path}: made for another warm start (key differs)")
        result = WarmStartResult(
            steps=recorded["steps"], losses=recorded["losses"],
            probes=[ProbeResult(**p) for p in recorded["probes"]],
            reached_mixed_outcomes=recorded["reached_mixed_outcomes"],
        )  # fmt: skip
    except (CheckpointError, OSError, ValueError, KeyError, TypeError) as exc:
        target = path.with_name(f"{path.name}.invalid-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S.%fZ')}")
        os.rename(path, target)
        echo(f"warm start cache: {exc}; moved to {target}, the warm start runs again")
        return None
    return CachedWarmStart(path / MODEL_DIR, result)


def store_warm_start(config: RunConfig, key: dict[str, Any], model: Any, tokenizer: Any, result: WarmStartResult) -> Path:
    path = entry_dir(config, key_digest(key))
    info = save_checkpoint(model, tokenizer, path / MODEL_DIR)  # atomic: a killed save never looks finished
    atomic_write_json(path / RESULT_FILE, {
        "key": key, "steps": result.steps, "losses": result.losses,
        "probes": [asdict(p) for p in result.probes], "reached_mixed_outcomes": result.reached_mixed_outcomes,
    })  # fmt: skip
    return info.path

"""What a round started from: `runs/<group>/round_manifest.json`, written atomically before its first stage.

    manifest = write_round_manifest(config, settings, backend="local")

It records the inputs that make the round what it is — backend, base seed, index and the derived
seeds, start checkpoint (and slime save) with its hash, the skillbank with its hash, whether the
training warm-starts, the W&B settings — so a chain of rounds can be audited from the files alone. A
re-run of the same round writes the same content (the seeds are a function of the config).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shopsimrl.round.config import RoundConfig, previous_group
from shopsimrl.storage import atomic_write_json, file_sha256
from shopsimrl.storage.layout import ROUND_MANIFEST_FILE
from shopsimrl.tracking import WandbSettings

MANIFEST_SCHEMA_VERSION = 1


def tracking_record(settings: WandbSettings) -> dict[str, Any]:
    return {"enabled": settings.enabled, "mode": settings.mode.value, "project": settings.project,
            "entity": settings.entity, "dir": str(settings.dir)}  # fmt: skip


def warm_starts(config: RoundConfig) -> bool:
    return config.trainer == "local" and config.train_config().warm_start.enabled


def write_round_manifest(config: RoundConfig, settings: WandbSettings) -> dict[str, Any]:
    skillbank = config.shopsim().skillbank or ""
    previous = previous_group(config.group)
    document = {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "group": config.group,
        "index": config.index,
        "backend": config.backend,
        "config": config.source,
        "previous_round": previous,
        "base_seed": config.round.seed,
        "seeds": config.seeds.as_dict(),
        "start_checkpoint": config.round.start_checkpoint,
        "start_checkpoint_sha256": config.round.start_checkpoint_sha256,
        "start_load": config.round.start_load,
        "skillbank": skillbank,
        "skillbank_sha256": file_sha256(skillbank),
        "warm_start": warm_starts(config),
        "tracking": tracking_record(settings),
    }
    atomic_write_json(config.round_dir / ROUND_MANIFEST_FILE, document)
    return document


def read_round_manifest(round_dir: Path) -> dict[str, Any]:
    path = round_dir / ROUND_MANIFEST_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

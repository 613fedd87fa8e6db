"""Helpers of the round tests: a tiny-model round config (1 rollout, a tiny gate design) under tmp_path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SKILLBANK = ROOT / "configs" / "skillbank.example.json"


def tiny_round(tmp_path: Path, group: str = "tiny-round-000") -> dict[str, Any]:
    """A whole round on the tiny random model: seconds on one core."""
    return {
        "schema_version": 1,
        "round": {"group": group, "runs_root": str(tmp_path / "runs"),
                  "checkpoints_root": str(tmp_path / "checkpoints")},
        "train": {
            "model": {"name": "tiny", "seed": 0},
            "driver": {"num_rollout": 1, "rollout_batch_size": 1, "n_samples_per_prompt": 4,
                       "over_sampling_batch_size": 1, "global_batch_size": 4, "rollout_max_response_len": 8,
                       "lr": 1e-3},
            "shopsim": {"skillbank": str(SKILLBANK), "q": {"start": 0.0}, "max_turns": 2,
                        "max_new_tokens_per_turn": 8, "catalog": {"num_products": 200}, "full_skill_retry": False},
        },
        "analysis": {"trial": {"attempts": 1, "max_cards": 2}},
        "gate": {"design": {"tasks": 2, "replicates": 1}, "generator": {"concurrency": 4}},
    }  # fmt: skip


def write_round(tmp_path: Path, raw: dict[str, Any], name: str = "round.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path

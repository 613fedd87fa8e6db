"""Evaluation fixtures: a tiny real model saved as our checkpoints (rollout 0 and 1) and a config writer."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SKILLBANK_EXAMPLE = REPO / "configs" / "skillbank.example.json"


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoints parent as the local trainer leaves it: rollout-0000, rollout-0001 (latest), hashed."""
    from shopsimrl.models.checkpoint import save_checkpoint
    from shopsimrl.models.tiny import tiny_model, tiny_tokenizer

    parent = tmp_path_factory.mktemp("checkpoints") / "round-000"
    tokenizer = tiny_tokenizer()
    save_checkpoint(tiny_model(tokenizer, seed=0), tokenizer, parent / "rollout-0000", rollout_id=0)
    save_checkpoint(tiny_model(tokenizer, seed=1), tokenizer, parent / "rollout-0001", rollout_id=1)
    return parent


@pytest.fixture
def eval_config(tmp_path: Path, tiny_checkpoints: Path) -> Callable[..., Path]:
    """Write a small eval config under tmp_path (3 validation tasks x 2 seeds); returns its path."""

    def make(**fields: Any) -> Path:
        skillbank = tmp_path / "skillbank.json"
        shutil.copyfile(SKILLBANK_EXAMPLE, skillbank)
        config: dict[str, Any] = {
            "schema_version": 1,
            "checkpoint": str(tiny_checkpoints),
            "tasks": 3,
            "seeds": 2,
            "seed": 5,
            "skillbank": str(skillbank),
            "mask": "full",
            "group": "round-000",
            "runs_root": str(tmp_path / "runs"),
            "generator": {"backend": "local", "concurrency": 3},
            "episode": {"max_turns": 2, "max_new_tokens_per_turn": 8, "tool_call_format": "json"},
            "bootstrap_samples": 200,
        }
        for key, value in fields.items():
            if isinstance(value, dict):
                config.setdefault(key, {}).update(value)
            else:
                config[key] = value
        path = tmp_path / "eval.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    return make

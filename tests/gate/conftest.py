"""Gate fixtures: a tiny real checkpoint on disk, a skillbank, a candidate pool and a config writer."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from gate_helpers import SKILLBANK_EXAMPLE, candidate_pool


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised tiny LM and its tokenizer, saved as an HF directory (the fixed checkpoint)."""
    from shopsimrl.models.tiny import tiny_model, tiny_tokenizer

    path = tmp_path_factory.mktemp("checkpoint") / "tiny"
    tokenizer = tiny_tokenizer()
    tiny_model(tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def gate_files(tmp_path: Path, tiny_checkpoint: Path) -> Callable[..., Path]:
    """Write skillbank, pool and a small config under tmp_path; returns the config path."""

    def make(**sections: Any) -> Path:
        skillbank = tmp_path / "skillbank.json"
        shutil.copyfile(SKILLBANK_EXAMPLE, skillbank)
        pool = tmp_path / "candidate_pool.json"
        pool.write_text(candidate_pool(skillbank).model_dump_json(indent=2), encoding="utf-8")
        config: dict[str, Any] = {
            "schema_version": 1,
            "round": "round-000",
            "runs_root": str(tmp_path / "runs"),
            "inputs": {
                "checkpoint": str(tiny_checkpoint),
                "candidate_pool": str(pool),
                "skillbank": str(skillbank),
            },
            "generator": {"backend": "local", "concurrency": 1},
            "design": {"tasks": 3, "replicates": 2, "seed": 7},
            "episode": {"max_turns": 2, "max_new_tokens_per_turn": 8, "tool_call_format": "json"},
        }
        for key, value in sections.items():
            if isinstance(value, dict):
                config.setdefault(key, {}).update(value)
            else:
                config[key] = value
        path = tmp_path / "gate.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    return make

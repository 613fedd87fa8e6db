"""Small real configurations of the local backend for tests (tiny model, small catalog, short turns)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shopsimrl.local.config import RunConfig, run_config_from_mapping


def tiny_run_config(
    tmp_path: Path,
    *,
    driver: dict[str, Any] | None = None,
    shopsim: dict[str, Any] | None = None,
    mode: str = "train",
    group: str = "test-round-000",
    critic: dict[str, Any] | None = None,
) -> RunConfig:
    raw = {
        "run": {"group": group, "runs_root": str(tmp_path / "runs"), "mode": mode},
        "model": {"name": "tiny", "seed": 0},
        "driver": {
            "num_rollout": 2,
            "rollout_batch_size": 1,
            "n_samples_per_prompt": 4,
            "over_sampling_batch_size": 2,
            "global_batch_size": 2,
            "rollout_max_response_len": 8,
            "lr": 1e-3,
            "rollout_seed": 7,
            **(driver or {}),
        },
        "shopsim": {
            "max_turns": 2,
            "max_new_tokens_per_turn": 8,
            "catalog": {"num_products": 200},
            **(shopsim or {}),
        },
    }
    if critic is not None:
        raw["critic"] = critic
    return run_config_from_mapping(raw, "test")


@pytest.fixture
def tiny_config(tmp_path: Path) -> Callable[..., RunConfig]:
    """`tiny_config(driver={...}, shopsim={...}, mode=..., group=...)` under this test's tmp_path."""
    return lambda **kwargs: tiny_run_config(tmp_path, **kwargs)

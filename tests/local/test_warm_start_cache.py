"""The warm-started policy is cached by what determines it: a second run with the same settings
reuses it (verified by hash) and trains exactly as if the warm start had run; a damaged entry is
moved aside and rebuilt; other settings miss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shopsimrl.local.config import run_config_from_mapping
from shopsimrl.local.run import run_training
from shopsimrl.local.warm_start_cache import CACHE_DIR, key_digest, warm_start_key
from shopsimrl.tracking import WandbSettings


def _config(tmp_path: Path, group: str, model: dict | None = None, **warm_start):
    raw = {
        "run": {"group": group, "runs_root": str(tmp_path / "runs"), "checkpoints_root": str(tmp_path / "ckpt")},
        "model": {"name": "tiny", "seed": 0, **(model or {})},
        "warm_start": {"enabled": True, "max_steps": 2, "batch_size": 1, "check_every": 1, "probe_tasks": 1,
                       "probe_samples": 2, **warm_start},
        "driver": {"num_rollout": 1, "rollout_batch_size": 1, "n_samples_per_prompt": 2, "global_batch_size": 2,
                   "rollout_max_response_len": 8, "lr": 1e-3, "rollout_seed": 7, "save_interval": 1},
        "shopsim": {"max_turns": 8, "max_new_tokens_per_turn": 8, "catalog": {"num_products": 200}},
    }  # fmt: skip
    return run_config_from_mapping(raw, "test")


def _run(config, lines: list[str]):
    return run_training(config, settings=WandbSettings(enabled=False), echo=lines.append)


def _rollout_rows(config) -> list[dict]:
    rows = [json.loads(line) for line in (config.stage_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("_") and "time" not in k and "perf/" not in k}
            for row in rows]  # fmt: skip


# The second: a frozen trunk (its store is shared by the warm start and the updates) under bfloat16.
# On SmolLM2 the trunk's stored system prompt and the rollouts' values of it differed in the last bits,
# and the run after a warm start that ran differed from the run after a cached one until run.py emptied
# the trunk after the warm start (docs/local_backend.md, "Warm start"). The tiny model's values agree
# bit for bit either way, so here this guards the property, not that particular cause.
@pytest.mark.parametrize("model", [None, {"trainable_top_layers": 1, "compute_dtype": "bfloat16"}])
def test_a_second_run_reuses_the_warm_start_and_trains_the_same(tmp_path, model):
    first_lines: list[str] = []
    first_config = _config(tmp_path, "a-round-000", model)
    first = _run(first_config, first_lines)
    entry = tmp_path / "ckpt" / CACHE_DIR / key_digest(warm_start_key(first_config))[:16]
    assert first.warm_start.cached_from is None and first.warm_start.steps >= 1
    assert f"warm start: cached as {entry / 'model'} for the next run with the same settings" in first_lines

    second_lines: list[str] = []
    second_config = _config(tmp_path, "b-round-000", model)
    second = _run(second_config, second_lines)
    assert second.warm_start.cached_from == entry / "model"
    assert (second.warm_start.steps, second.warm_start.losses) == (first.warm_start.steps, first.warm_start.losses)
    assert any(line.startswith(f"warm start: reused {entry / 'model'}") for line in second_lines)
    # The GRPO run after it is the same run: same metrics, same final weights.
    assert _rollout_rows(second_config) == _rollout_rows(first_config)
    # (the tokenizer's config records that it was loaded from a directory: only the weights can agree)
    weights = [(r.checkpoints[-1].path / "model.safetensors").read_bytes() for r in (first, second)]
    assert weights[0] == weights[1]


def test_a_damaged_entry_is_moved_aside_and_rebuilt_and_other_settings_miss(tmp_path):
    config = _config(tmp_path, "a-round-000")
    _run(config, [])
    entry = tmp_path / "ckpt" / CACHE_DIR / key_digest(warm_start_key(config))[:16]
    weights = entry / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    lines: list[str] = []
    again = _run(_config(tmp_path, "b-round-000"), lines)
    assert again.warm_start.cached_from is None
    aside = [p for p in entry.parent.iterdir() if p.name.startswith(f"{entry.name}.invalid-")]
    assert len(aside) == 1 and (entry / "warm_start.json").is_file()
    assert any(line.startswith("warm start cache: ") and line.endswith(", the warm start runs again") for line in lines)

    other = _config(tmp_path, "c-round-000", lr=5e-4)
    assert key_digest(warm_start_key(other)) != key_digest(warm_start_key(config))
    assert _run(other, []).warm_start.cached_from is None
    off = _config(tmp_path, "d-round-000", cache=False)
    assert _run(off, []).warm_start.cached_from is None

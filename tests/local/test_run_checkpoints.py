"""A training run with `save_interval` leaves HF checkpoints the gate can load, by slime's save rule."""

from __future__ import annotations

import pytest

from shopsimrl.local.run import run_training
from shopsimrl.local.startup import StartupError
from shopsimrl.models.checkpoint import latest_checkpoint, verify_checkpoint
from shopsimrl.tracking import WandbSettings


def _config(tiny_config, tmp_path, **driver):
    config = tiny_config(driver={"n_samples_per_prompt": 2, "global_batch_size": 2, "num_rollout": 3, **driver})
    run = config.run.model_copy(update={"checkpoints_root": str(tmp_path / "checkpoints")})
    return config.model_copy(update={"run": run})


def test_saves_every_interval_and_at_the_last_rollout(tiny_config, tmp_path):
    config = _config(tiny_config, tmp_path, save_interval=2)
    result = run_training(config, settings=WandbSettings.from_env({"USE_WANDB": "0"}), echo=lambda _: None)
    assert [c.rollout_id for c in result.checkpoints] == [1, 2]  # (1 + 1) % 2 == 0, and the last
    final = result.checkpoints[-1]
    assert latest_checkpoint(config.checkpoint_dir) == final.path == config.checkpoint_dir / "rollout-0002"
    assert verify_checkpoint(final.path).sha256 == final.sha256


def test_a_used_checkpoint_directory_is_refused_before_the_model_loads(tiny_config, tmp_path):
    config = _config(tiny_config, tmp_path, save_interval=1)
    (config.checkpoint_dir / "rollout-0000").mkdir(parents=True)
    with pytest.raises(StartupError, match="already holds checkpoints of an earlier run"):
        run_training(config, settings=WandbSettings.from_env({"USE_WANDB": "0"}), echo=lambda _: None)


def test_a_run_starts_from_a_saved_checkpoint_and_refuses_a_corrupt_one(tiny_config, tmp_path):
    import torch

    from shopsimrl.local.run import load_model
    from shopsimrl.models.checkpoint import load_checkpoint

    first = _config(tiny_config, tmp_path, save_interval=3)
    final = run_training(first, settings=WandbSettings.from_env({"USE_WANDB": "0"}), echo=lambda _: None).checkpoints[-1]
    second = first.model_copy(update={"model": first.model.model_copy(update={"checkpoint": str(final.path)})})
    model, tokenizer, _ = load_model(second)
    saved, _ = load_checkpoint(final.path)
    ids = torch.tensor([tokenizer.encode("cart")])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, saved(ids).logits, atol=0, rtol=0)

    weights = final.path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    run = second.run.model_copy(update={"group": "next-round"})
    with pytest.raises(StartupError, match=r"model.checkpoint: .*rollout-0002: content hash \w+ does not match"):
        run_training(second.model_copy(update={"run": run}), settings=WandbSettings.from_env({"USE_WANDB": "0"}),
                     echo=lambda _: None)

"""Local checkpoints: HF format, atomic, verified against their recorded hash before use."""

from __future__ import annotations

import pytest
import torch

from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.models.checkpoint import (
    CHECKPOINT_MANIFEST,
    CheckpointError,
    directory_sha256,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    should_save,
    verify_checkpoint,
)


@pytest.fixture
def saved(tmp_path):
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer, seed=4)
    info = save_checkpoint(model, tokenizer, tmp_path / "ckpt" / "rollout-0003", rollout_id=3)
    return model, info


def test_save_then_load_gives_the_same_model(saved):
    model, info = saved
    assert info.path.name == "rollout-0003" and info.rollout_id == 3
    assert "model.safetensors" in info.files and CHECKPOINT_MANIFEST not in info.files
    assert not list(info.path.parent.glob("*.partial-*"))  # nothing unfinished left beside it
    assert verify_checkpoint(info.path).sha256 == info.sha256 == directory_sha256(info.path)
    assert latest_checkpoint(info.path.parent) == info.path
    loaded, tokenizer = load_checkpoint(info.path)
    ids = torch.tensor([tokenizer.encode("shop")])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model.eval()(ids).logits, atol=0, rtol=0)


def test_a_changed_weight_file_is_refused_naming_the_path(saved):
    _, info = saved
    weights = info.path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, different content
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"rollout-0003: content hash \w+ does not match the recorded"):
        verify_checkpoint(info.path)


def test_missing_files_and_unfinished_directories_are_named(saved, tmp_path):
    _, info = saved
    (info.path / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"rollout-0003: missing file\(s\) config.json"):
        verify_checkpoint(info.path)
    unfinished = tmp_path / "ckpt" / "rollout-0009"
    unfinished.mkdir()
    with pytest.raises(CheckpointError, match=r"rollout-0009: no checkpoint.json; not a finished checkpoint"):
        verify_checkpoint(unfinished)
    with pytest.raises(CheckpointError, match=r"nowhere: checkpoint directory not found"):
        verify_checkpoint(tmp_path / "nowhere")


def test_an_existing_checkpoint_is_never_overwritten(saved):
    model, info = saved
    with pytest.raises(CheckpointError, match="already there; refusing to overwrite"):
        save_checkpoint(model, tiny_tokenizer(), info.path)


def test_save_interval_follows_slimes_periodic_rule():
    from slime_source import SLIME_SRC

    picked = [r for r in range(10) if should_save(r, 4, num_rollout=10)]
    assert picked == [3, 7, 9]  # every 4th rollout and the last
    assert not any(should_save(r, None, num_rollout=10) for r in range(10))
    if SLIME_SRC is not None:  # the rule is slime's own
        from slime.utils.misc import should_run_periodic_action

        for interval in (1, 3, 4, None):
            assert [should_save(r, interval, 10) for r in range(10)] == [
                should_run_periodic_action(r, interval, None, 10) for r in range(10)
            ]

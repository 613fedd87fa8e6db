"""`make rounds RUNNER=local ALGO=ppo` (what make expands it to: tests/ops/test_makefile.py): every round
trains PPO, and round 001's critic starts from the one round 000 saved inside its final checkpoint
(critic.safetensors), as slime's critic chains under SAVE_DIR (tests/ops/test_slime_critic.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from round_helpers import ROOT, tiny_round, write_round
from safetensors.torch import load_file

from shopsimrl.local.critic import CRITIC_FILE, ValueHead, load_critic_from
from shopsimrl.metrics.ppo_records import ppo_record_problems, split_rows
from shopsimrl.models.checkpoint import CheckpointError, verify_checkpoint
from shopsimrl.storage import read_jsonl


def _rows(path: Path) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(path).records if isinstance(r, dict)]


def test_rounds_with_algo_ppo_train_a_critic_that_chains_across_rounds(tmp_path: Path) -> None:
    config = write_round(tmp_path, tiny_round(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "shopsimrl.cli", "training", "rounds", str(config), "--count", "2",
         "--set", "train.driver.advantage_estimator=ppo", "--no-wandb"],
        cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1", "USE_WANDB": "0"}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs, checkpoints = tmp_path / "runs", tmp_path / "checkpoints"
    first = checkpoints / "tiny-round-000" / "rollout-0000"
    second = checkpoints / "tiny-round-001" / "rollout-0000"
    for group in ("tiny-round-000", "tiny-round-001"):
        rows = _rows(runs / group / "train" / "metrics.jsonl")
        assert ppo_record_problems(rows) == [], group
        assert split_rows(rows).critic_rows, group
    lines = done.stdout.splitlines()
    assert "critic: fresh (no saved critic at the start)" in lines
    assert f"critic: from {first / CRITIC_FILE}" in lines
    # The critic is part of each checkpoint's hash; round 001's critic trained on from round 000's.
    for checkpoint in (first, second):
        assert CRITIC_FILE in verify_checkpoint(checkpoint).files
    before, after = load_file(first / CRITIC_FILE), load_file(second / CRITIC_FILE)
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before), "round 001's critic never stepped"
    assert "advantage_estimator: ppo" in (runs / "tiny-round-001" / "next_round.yaml").read_text()


def test_a_saved_critic_loads_exactly_and_a_wrong_one_is_refused_by_path(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    saved = ValueHead(32, seed=7)
    save_file(saved.state_dict(), tmp_path / CRITIC_FILE)
    fresh = ValueHead(32, seed=0)
    assert load_critic_from(tmp_path, fresh) == tmp_path / CRITIC_FILE
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in saved.state_dict().items())
    assert load_critic_from(tmp_path / "none", ValueHead(32)) is None  # no saved critic: left as initialised
    with pytest.raises(CheckpointError, match=f"{tmp_path / CRITIC_FILE}: not a critic for this model"):
        load_critic_from(tmp_path, ValueHead(48))

"""Helpers of the ops tests (imported by name: tests/ops is on sys.path): the root and a DRY_RUN launcher."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from shopsimrl.rollout.datasource import export_prompt_data
from shopsimrl.shop import generate_catalog, load_split

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = "scripts/run_shopsimrl_slime.sh"
# Variables of the host that would change the launcher's command line.
_LAUNCH_VARS = ("USE_WANDB", "WANDB_PROJECT", "WANDB_GROUP", "WANDB_ENTITY", "WANDB_MODE", "WANDB_DIR",
                "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_RUN_GROUP", "WANDB_API_KEY", "NUM_GPUS",
                "SMOKE_NUM_GPUS", "MODELS_DIR", "PROMPT_DATA", "LAUNCH_CONFIG", "DRY_RUN", "HOST_UID", "HOST_GID",
                "NETRC", "REF_LOAD", "START_LOAD", "ROLLOUT_SEED", "SHOPSIM_CONFIG", "RAY_TEMP_DIR", "NCCL_NVLS_ENABLE", "SLIME_DIR", "MASTER_ADDR",
                "ALGO")


@dataclass(frozen=True)
class DryRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def commands(self) -> list[str]:
        return [line for line in self.stdout.strip().splitlines() if not line.startswith("# ")]

    @property
    def plan(self) -> dict[str, str]:
        """The `# topic: text` lines printed before the commands, by topic."""
        lines = [line[2:] for line in self.stdout.splitlines() if line.startswith("# ")]
        return dict(line.split(": ", 1) for line in lines)

    @property
    def submit(self) -> list[str]:
        """The `ray job submit ...` command as an argv list."""
        return shlex.split(self.commands[-1])

    @property
    def ray_start(self) -> list[str]:
        return shlex.split(self.commands[0])


def dry_run(config: str = "configs/slime/smoke.env", **env: str) -> DryRun:
    clean = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    clean.update({"DRY_RUN": "1", "PYTHON": sys.executable, **env})
    result = subprocess.run(["bash", LAUNCHER, config], cwd=ROOT, env=clean, capture_output=True, text=True,
                            timeout=60, check=False)
    return DryRun(result.returncode, result.stdout, result.stderr)


def value_of(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# ------------------------------------------------- a launch directory's inputs, as a host would have them

MODEL_ARGS_CONFIG = {"num_hidden_layers": 32, "hidden_size": 2560, "intermediate_size": 9216,
                     "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 248320}
SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def model_dir(root: Path, *, shards_present: bool = True, config: dict | None = None) -> Path:
    model = root / "models/Qwen3.5-4B"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3_5", "text_config": config or MODEL_ARGS_CONFIG}))
    (model / "tokenizer_config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    (model / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 8}, "weight_map": {"a": SHARDS[0], "b": SHARDS[1]}}))
    if shards_present:
        for shard in SHARDS:
            (model / shard).write_bytes(b"\0" * 8)
    return model


def stand_in_workspace(root: Path, ray_also: str = "") -> Path:
    """A launch directory like the container's /workspace: configs/, a stand-in slime (its train.py is only
    named on the `ray job submit` line) and a stand-in `ray` on bin/ that appends its arguments to
    ray.log, as the real one would be called, then runs `ray_also` (shell)."""
    shutil.copytree(ROOT / "configs", root / "configs")
    (root / "slime").mkdir()
    (root / "slime/train.py").write_text("# slime's train.py stand-in\n")
    (root / "bin").mkdir()
    (root / "bin/ray").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {root}/ray.log\n{ray_also}')
    (root / "bin/ray").chmod(0o755)
    return root


def converted_checkpoint(launch_dir: Path, model: Path) -> Path:
    """What `make convert` leaves: Megatron's tracker, the release dir and our manifest (real command)."""
    ref = launch_dir / "checkpoints/base/Qwen3.5-4B_torch_dist"
    (ref / "release").mkdir(parents=True)
    (ref / "latest_checkpointed_iteration.txt").write_text("release")
    model_args = subprocess.run(["bash", "-c", "source configs/slime/models/qwen3.5-4B.sh; printf '%s\\n' \"${MODEL_ARGS[@]}\""],
                                cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
    subprocess.run([sys.executable, "-m", "shopsimrl.cli", "slime", "write-manifest", "--hf-checkpoint", str(model),
                    "--out", str(ref), "--", *model_args], cwd=ROOT, check=True, capture_output=True)
    return ref


def prompt_data(launch_dir: Path) -> None:
    export_prompt_data(load_split(generate_catalog(seed=0, num_products=2000), "train", limit=2),
                       launch_dir / "runs/prompts/shopsim_train.jsonl")

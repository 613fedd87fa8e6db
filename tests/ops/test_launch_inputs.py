"""A real (non-dry) launch of scripts/run_shopsimrl_slime.sh with `ray` replaced by a recorder.

Every input is checked before anything starts: a missing model directory, a model cache entry without
its weights, a missing converted checkpoint or prompt file each give one named line, exit code 2, no
Ray command and no directory created. A complete launch directory runs `ray stop/start/job submit`
and creates its outputs under the launch directory only (never /workspace on a host).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ops_helpers import (
    _LAUNCH_VARS,
    MODEL_ARGS_CONFIG,
    ROOT,
    SHARDS,
    converted_checkpoint,
    model_dir,
    prompt_data,
    stand_in_workspace,
    value_of,
)


@pytest.fixture
def launch_dir(tmp_path: Path) -> Path:
    """A launch directory like the container's /workspace: configs/, plus a fake slime and `ray`."""
    return stand_in_workspace(tmp_path)


def _launch(launch_dir: Path, config: str = "configs/slime/formal.env", **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    clean.update({"PATH": f"{launch_dir}/bin:{os.environ['PATH']}", "PYTHON": sys.executable,
                  "SLIME_DIR": str(launch_dir / "slime"), "MODELS_DIR": str(launch_dir / "models"),
                  "WANDB_GROUP": "round-test", "NCCL_NVLS_ENABLE": "0", **env})
    return subprocess.run(["bash", str(ROOT / "scripts/run_shopsimrl_slime.sh"), config], cwd=launch_dir, env=clean,
                          capture_output=True, text=True, timeout=120, check=False)


def _created(launch_dir: Path) -> list[str]:
    return sorted(p.name for p in launch_dir.iterdir())


def test_missing_model_directory_stops_before_ray(launch_dir: Path):
    run = _launch(launch_dir)
    assert run.returncode == 2
    models = launch_dir / "models/Qwen3.5-4B"
    assert f"error: model directory not found: {models}" in run.stderr
    assert f"error: converted checkpoint not found: {launch_dir}/checkpoints/base/Qwen3.5-4B_torch_dist" in run.stderr
    assert f"error: prompt data not found: {launch_dir}/runs/prompts/shopsim_train.jsonl" in run.stderr
    assert "nothing was started" in run.stderr
    assert not (launch_dir / "ray.log").exists()
    assert _created(launch_dir) == ["bin", "configs", "slime"]


def test_model_cache_entry_without_weights_names_the_missing_files(launch_dir: Path):
    model = model_dir(launch_dir, shards_present=False)
    converted_checkpoint(launch_dir, model)
    prompt_data(launch_dir)
    run = _launch(launch_dir)
    assert run.returncode == 2
    assert f"error: {model}: missing 2 of 2 weight file(s): {SHARDS[0]}, {SHARDS[1]}" in run.stderr
    assert "Traceback" not in run.stderr and "sentencepiece" not in run.stderr
    assert not (launch_dir / "ray.log").exists()
    assert not (launch_dir / "runs/round-test").exists()


def test_architecture_flags_that_disagree_with_config_json_stop_the_launch(launch_dir: Path):
    model = model_dir(launch_dir)
    converted_checkpoint(launch_dir, model)
    # The HF checkpoint changed after the conversion (another model in the same directory).
    (model / "config.json").write_text(json.dumps({"text_config": {**MODEL_ARGS_CONFIG, "num_hidden_layers": 36}}))
    prompt_data(launch_dir)
    run = _launch(launch_dir)
    assert run.returncode == 2
    assert "error: --num-layers 32 but config.json num_hidden_layers=36 (configs/slime/models/*.sh vs" in run.stderr
    assert f"{launch_dir}/checkpoints/base/Qwen3.5-4B_torch_dist was converted from another config.json" in run.stderr
    assert not (launch_dir / "ray.log").exists()


def test_complete_launch_starts_ray_and_writes_only_under_the_launch_directory(launch_dir: Path):
    workspace_existed = Path("/workspace").exists()
    model = model_dir(launch_dir)
    converted_checkpoint(launch_dir, model)
    prompt_data(launch_dir)
    run = _launch(launch_dir, HOST_UID="1234", HOST_GID="5678")
    assert run.returncode == 0, run.stderr
    calls = (launch_dir / "ray.log").read_text().splitlines()
    assert [c.split()[:2] for c in calls] == [["stop", "--force"], ["start", "--head"], ["job", "submit"]]
    submit = calls[2].split()
    options_file = launch_dir / "runs/round-test/train/shopsim_options.yaml"
    assert value_of(submit, "--custom-config-path") == str(options_file)
    text = options_file.read_text()
    assert f"run_dir: {launch_dir}/runs/round-test/train" in text
    assert "/workspace" not in text
    assert _created(launch_dir) == ["bin", "checkpoints", "configs", "models", "ray.log", "runs", "slime"]
    assert Path("/workspace").exists() == workspace_existed


def test_start_load_without_a_tracker_stops_the_launch(launch_dir: Path):
    """START_LOAD must be a finished slime save dir: slime would otherwise fall back to the base model."""
    model = model_dir(launch_dir)
    converted_checkpoint(launch_dir, model)
    prompt_data(launch_dir)
    previous = launch_dir / "checkpoints/round-prev"
    previous.mkdir(parents=True)
    run = _launch(launch_dir, START_LOAD="checkpoints/round-prev")
    assert run.returncode == 2
    assert (f"error: START_LOAD {previous} holds no latest_checkpointed_iteration.txt: it is not a finished slime "
            "save dir (the previous round's checkpoints/<group>, written with --save)") in run.stderr
    assert not (launch_dir / "ray.log").exists()
    (previous / "latest_checkpointed_iteration.txt").write_text("iter_199")
    run = _launch(launch_dir, START_LOAD="checkpoints/round-prev")
    assert run.returncode == 2
    assert (f"error: START_LOAD: {previous}/latest_checkpointed_iteration.txt: expected an iteration number or "
            "'release', found 'iter_199'") in run.stderr


def test_a_next_round_launch_loads_the_previous_rounds_save(launch_dir: Path):
    model = model_dir(launch_dir)
    converted_checkpoint(launch_dir, model)
    prompt_data(launch_dir)
    previous = launch_dir / "checkpoints/round-prev"
    (previous / "iter_0000199").mkdir(parents=True)
    (previous / "latest_checkpointed_iteration.txt").write_text("199")
    run = _launch(launch_dir, START_LOAD="checkpoints/round-prev")
    assert run.returncode == 0, run.stderr
    submit = (launch_dir / "ray.log").read_text().splitlines()[2].split()
    assert value_of(submit, "--ref-load") == str(previous)
    assert value_of(submit, "--load") == value_of(submit, "--save") == str(launch_dir / "checkpoints/round-test")
    assert (f"start: hand-off: --ref-load {previous} (iteration 199) with an empty --load "
            f"{launch_dir}/checkpoints/round-test: slime starts at rollout 0") in run.stderr

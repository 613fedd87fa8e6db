"""Disk a slime run needs (shopsimrl.ops.footprint) and preflight's launch checks (shopsimrl.ops.preflight_launch)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from ops_helpers import ROOT, converted_checkpoint, dry_run, model_dir, prompt_data

from shopsimrl.ops.footprint import (
    GIB,
    SAVE_BYTES_PER_PARAM,
    disk_need,
    params_from_flags,
    params_from_hf,
    saves_in_run,
)
from shopsimrl.ops.preflight import PreflightContext, Runner, Status, run_preflight
from shopsimrl.ops.preflight_launch import check_chat_template, check_disk_for_profile, check_launch_inputs

_VENDORED = ROOT.parent / "shared/vendor/slime-v0.3.1"
QWEN35_4B_FLAGS = ["--num-layers", "32", "--hidden-size", "2560", "--ffn-hidden-size", "9216", "--num-attention-heads",
                   "16", "--num-query-groups", "4", "--kv-channels", "256", "--vocab-size", "248320", "--swiglu",
                   "--attention-output-gate"]


def test_saves_in_run_counts_what_slimes_own_rule_saves():
    src = os.environ.get("SLIME_SRC") or str(_VENDORED)
    if not (Path(src) / "slime/utils/misc.py").is_file():
        pytest.skip(f"slime v0.3.1 source not found (set SLIME_SRC; looked in {_VENDORED})")
    sys.path.insert(0, src)
    sys.path.insert(0, str(Path(src) / "tests/plugin_contracts"))
    from _shared import install_stubs

    install_stubs()
    from slime.utils.misc import should_run_periodic_action

    for num_rollout in (1, 19, 20, 21, 200, 205):
        for interval in (None, 1, 7, 20):
            expected = sum(should_run_periodic_action(i, interval, None, num_rollout) for i in range(num_rollout))
            assert saves_in_run(num_rollout, interval) == expected, (num_rollout, interval)


def test_params_from_flags_is_the_dense_formula():
    embeddings = 2 * 248320 * 2560
    per_layer = (2560 * 16 * 256 * 2) + 2 * 2560 * 4 * 256 + 16 * 256 * 2560 + 3 * 2560 * 9216
    assert params_from_flags(QWEN35_4B_FLAGS) == embeddings + 32 * per_layer


def test_params_from_hf_weights(tmp_path: Path):
    assert params_from_hf(tmp_path) is None
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 8_000_000_000}}))
    assert params_from_hf(tmp_path) == 4_000_000_000


def test_formal_profile_needs_ten_saves_of_sixteen_bytes_per_parameter():
    argv = dry_run("configs/slime/formal.env", MODELS_DIR="/nonexistent").submit
    need = disk_need(argv, margin_gib=10)
    params = params_from_flags(argv)
    assert (need.params, need.params_source, need.saves) == (params, "the architecture flags", 10)
    # Each save: Megatron's torch_dist (14 B/param) and slime's --save-hf copy (bf16, 2 B/param).
    assert need.hf_copy and need.bytes_per_param == SAVE_BYTES_PER_PARAM + 2
    assert need.total_bytes == 10 * params * (SAVE_BYTES_PER_PARAM + 2) + 2 * params + 10 * GIB
    # A save of ~4e9 parameters is ~57 GB: our per-save estimate is in that range or above.
    assert need.save_bytes > 57e9
    smoke = disk_need(dry_run("configs/slime/smoke.env", MODELS_DIR="/nonexistent").submit, margin_gib=10)
    assert smoke.saves == 0 and smoke.total_bytes == 2 * params + 10 * GIB


def test_preflight_disk_check_uses_the_profile(tmp_path: Path):
    ctx = PreflightContext(root=ROOT, runner=Runner.DOCKER, env={**os.environ, "MODELS_DIR": str(tmp_path)},
                           min_free_gib=10)
    result = check_disk_for_profile(ctx)
    need = disk_need(dry_run("configs/slime/formal.env", MODELS_DIR=str(tmp_path)).submit, margin_gib=10)
    free = shutil.disk_usage(ROOT / "checkpoints" if (ROOT / "checkpoints").is_dir() else ROOT).free
    assert result.status is (Status.PASS if free >= need.total_bytes else Status.FAIL)
    assert f"formal profile needs {need.describe()}" in result.detail


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    return tmp_path


def _container(workspace: Path) -> PreflightContext:
    env = {**os.environ, "MODELS_DIR": str(workspace / "models")}
    return PreflightContext(root=ROOT, runner=Runner.CONTAINER, env=env, workspace=workspace)


def test_container_preflight_names_missing_launch_inputs(workspace: Path):
    result = check_launch_inputs(_container(workspace))
    assert result.status is Status.FAIL
    assert result.detail.startswith(f"model directory not found: {workspace}/models/Qwen3.5-4B; converted checkpoint "
                                    f"not found: {workspace}/checkpoints/base/Qwen3.5-4B_torch_dist (create it with "
                                    "`make convert`); prompt data not found")
    assert "make convert" in result.fix


def test_container_preflight_passes_with_converted_matching_checkpoint(workspace: Path):
    converted_checkpoint(workspace, model_dir(workspace))
    prompt_data(workspace)
    result = check_launch_inputs(_container(workspace))
    assert (result.status, result.detail) == (
        Status.PASS, f"{workspace}/models/Qwen3.5-4B, its converted checkpoint and the prompt data match")


def test_chat_template_check_skips_without_a_checkpoint_and_is_in_both_preflights(workspace: Path):
    result = check_chat_template(_container(workspace))
    assert (result.status, result.detail) == (
        Status.SKIP, f"no checkpoint at {workspace}/models/Qwen3.5-4B: the rollout cannot be compared with its template")
    names = [r.name for r in run_preflight(PreflightContext(root=ROOT, runner=Runner.LOCAL, min_free_gib=0.01,
                                                            env={**os.environ, "MODELS_DIR": str(workspace)}))]
    assert "chat template agreement" in names

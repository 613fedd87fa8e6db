"""Model files named before anything loads them (shopsimrl.ops.model_files), and the canary using it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ops_helpers import ROOT, SHARDS, converted_checkpoint, model_dir

from shopsimrl.ops.canary import CanarySettings
from shopsimrl.ops.model_files import (
    MANIFEST_NAME,
    architecture_problems,
    converted_checkpoint_problems,
    hf_model_problems,
)


def test_complete_model_directory(tmp_path: Path):
    assert hf_model_problems(model_dir(tmp_path)) == []


def test_each_missing_file_is_named(tmp_path: Path):
    model = model_dir(tmp_path, shards_present=False)
    (model / "tokenizer.json").unlink()
    (model / "config.json").unlink()
    (model / SHARDS[1]).write_bytes(b"\0")
    assert hf_model_problems(model) == [
        f"{model}: missing config.json",
        f"{model}: no tokenizer files (tokenizer.json, tokenizer.model, or vocab.json + merges.txt)",
        f"{model}: missing 1 of 2 weight file(s): {SHARDS[0]}",
    ]


def test_git_lfs_pointers_and_missing_weights(tmp_path: Path):
    model = tmp_path / "m"
    model.mkdir()
    for name in ("config.json", "tokenizer_config.json", "tokenizer.json"):
        (model / name).write_text("{}")
    assert hf_model_problems(model) == [
        f"{model}: no weights (expected model.safetensors, or model.safetensors.index.json and its shards)"]
    (model / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n")
    assert hf_model_problems(model) == [
        f"{model}: git-lfs pointer(s) instead of weights: model.safetensors (run `git lfs pull`)"]


def test_architecture_compared_with_text_config_as_slime_validates_it():
    config = {"text_config": {"num_hidden_layers": 32, "hidden_size": 2048, "rms_norm_eps": 1e-06,
                              "rope_parameters": {"rope_theta": 5000000}}}
    flags = ["--num-layers", "32", "--hidden-size", "2560", "--swiglu", "--norm-epsilon", "1e-6",
             "--rotary-base", "10000000"]
    assert architecture_problems(flags, config) == [
        "--hidden-size 2560 but config.json hidden_size=2048",
        "--rotary-base 10000000 but config.json rope_theta=5000000"]


def test_converted_checkpoint_states(tmp_path: Path):
    model = model_dir(tmp_path)
    ref = tmp_path / "checkpoints/base/Qwen3.5-4B_torch_dist"
    args = subprocess.run(["bash", "-c", "source configs/slime/models/qwen3.5-4B.sh; printf '%s\\n' \"${MODEL_ARGS[@]}\""],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
    assert converted_checkpoint_problems(ref, model, args) == [
        f"converted checkpoint not found: {ref} (create it with `make convert`)"]
    converted_checkpoint(tmp_path, model)
    assert converted_checkpoint_problems(ref, model, args) == []
    assert converted_checkpoint_problems(ref, model, [*args, "--extra"]) == [
        f"{ref} was converted with other model arguments than the launcher passes (run `make convert` again)"]
    (ref / "latest_checkpointed_iteration.txt").write_text("20")
    assert converted_checkpoint_problems(ref, model, args) == [
        f"{ref}: latest_checkpointed_iteration.txt says '20' but {ref}/iter_0000020 is missing"]
    (ref / "latest_checkpointed_iteration.txt").write_text("release")
    (ref / MANIFEST_NAME).unlink()
    assert converted_checkpoint_problems(ref, model, args) == [
        f"{ref}: no {MANIFEST_NAME}: not written by `make convert`, so it cannot be matched to {model}"]


def test_check_converted_command(tmp_path: Path):
    model = model_dir(tmp_path)
    ref = converted_checkpoint(tmp_path, model)
    run = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "slime", "check-converted", "--hf-checkpoint",
                          str(model), "--ref-load", str(ref), "--", "--num-layers", "31"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 2
    assert run.stderr == (f"error: {ref} was converted with other model arguments than the launcher passes "
                          "(run `make convert` again)\n")
    assert json.loads((ref / MANIFEST_NAME).read_text())["schema_version"] == 1


@pytest.mark.parametrize("backend", ["local", "sglang"])
def test_canary_names_missing_model_files_before_loading(tmp_path: Path, backend: str):
    model = model_dir(tmp_path, shards_present=False)
    (model / "tokenizer.json").unlink()
    settings = CanarySettings(tasks=1, backend=backend, model=str(model),
                              url="http://127.0.0.1:1" if backend == "sglang" else None)
    tokenizer_line = f"{model}: no tokenizer files (tokenizer.json, tokenizer.model, or vocab.json + merges.txt)"
    weights_line = f"{model}: missing 2 of 2 weight file(s): {SHARDS[0]}, {SHARDS[1]}"
    expected = [tokenizer_line, weights_line] if backend == "local" else [tokenizer_line]
    assert settings.problems() == expected
    assert CanarySettings(tasks=1, backend="local", model="HuggingFaceTB/SmolLM2-135M-Instruct").problems() == []

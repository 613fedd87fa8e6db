"""The model files a slime run needs, checked before anything expensive starts.

- `hf_model_problems(dir)` (from shopsimrl.models.files): the Hugging Face checkpoint
  (`--hf-checkpoint`): config, tokenizer and every weight file, by name.
- `converted_checkpoint_problems(ref_dir, hf_dir, model_args)`: the Megatron `torch_dist`
  checkpoint (`--ref-load`) that `make convert` writes with slime's
  `tools/convert_hf_to_torch_dist.py`. slime v0.3.1 raises when `--ref-load` is missing under
  `--use-kl-loss`, and initialises the actor from it when `--load` holds no checkpoint.
  The conversion leaves a manifest (`MANIFEST_NAME`) recording the HF config's sha256 and the
  Megatron model arguments, so a later change of either is detected.
- `architecture_problems(model_args, hf_config)`: the Megatron architecture flags against the HF
  `config.json` (Megatron cannot read the architecture from the checkpoint; slime's docs warn that
  a mismatching flag silently builds another model).

Each function returns a list of one-line problems; empty means fine.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl.models.files import hf_model_problems, tokenizer_problems
from shopsimrl.storage import file_sha256

__all__ = [
    "ARCHITECTURE_KEYS",
    "MANIFEST_NAME",
    "TRACKER_NAME",
    "architecture_problems",
    "conversion_manifest",
    "converted_checkpoint_problems",
    "flag_values",
    "hf_model_problems",
    "text_config",
    "tokenizer_problems",
]

MANIFEST_NAME = "shopsimrl_conversion.json"
MANIFEST_SCHEMA_VERSION = 1
TRACKER_NAME = "latest_checkpointed_iteration.txt"  # Megatron's tracker; slime checks for it

# Megatron flag -> HF config key (read from `text_config` when the checkpoint is a VL model): the
# pairs slime v0.3.1 itself validates at start-up (`_hf_validate_args` in
# slime/backends/megatron_utils/arguments.py), checked here before Ray starts. Compared as numbers.
ARCHITECTURE_KEYS: tuple[tuple[str, str], ...] = (
    ("--num-layers", "num_hidden_layers"),
    ("--hidden-size", "hidden_size"),
    ("--ffn-hidden-size", "intermediate_size"),
    ("--num-attention-heads", "num_attention_heads"),
    ("--norm-epsilon", "rms_norm_eps"),
    ("--rotary-base", "rope_theta"),
)


def text_config(hf_config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of an HF config (VL checkpoints nest it under `text_config`)."""
    nested = hf_config.get("text_config")
    return nested if isinstance(nested, dict) else hf_config


def flag_values(model_args: Sequence[str]) -> dict[str, str]:
    """`--flag value` pairs of an argument list (a flag followed by another flag has value '')."""
    values = {}
    for i, token in enumerate(model_args):
        if token.startswith("--"):
            following = model_args[i + 1] if i + 1 < len(model_args) else ""
            values[token] = "" if following.startswith("--") else following
    return values


def architecture_problems(model_args: Sequence[str], hf_config: dict[str, Any]) -> list[str]:
    """Megatron architecture flags that disagree with the HF config (keys the config lacks are skipped)."""
    flags = flag_values(model_args)
    config = dict(text_config(hf_config))
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope:  # newer configs keep it there, as slime reads it
        config["rope_theta"] = rope["rope_theta"]
    problems = []
    for flag, key in ARCHITECTURE_KEYS:
        if flag in flags and key in config and float(config[key]) != float(flags[flag]):
            problems.append(f"{flag} {flags[flag]} but config.json {key}={config[key]}")
    return problems


def conversion_manifest(hf_dir: str | Path, model_args: Sequence[str], slime_commit: str) -> dict[str, Any]:
    """What `make convert` records next to the converted checkpoint."""
    config = Path(hf_dir) / "config.json"
    return {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "hf_checkpoint": str(hf_dir),
        "hf_config_sha256": file_sha256(config),
        "model_args": list(model_args),
        "slime_commit": slime_commit,
    }


def converted_checkpoint_problems(
    ref_dir: str | Path, hf_dir: str | Path, model_args: Sequence[str]
) -> list[str]:
    """The converted checkpoint exists, is complete, and was made from this HF config and these flags."""
    ref, hf = Path(ref_dir), Path(hf_dir)
    if not ref.is_dir():
        return [f"converted checkpoint not found: {ref} (create it with `make convert`)"]
    tracker = ref / TRACKER_NAME
    if not tracker.is_file():
        return [f"{ref}: no {TRACKER_NAME} (an unfinished conversion? remove the directory and run `make convert`)"]
    iteration = tracker.read_text(encoding="utf-8").strip()
    if iteration == "release":  # what slime's converter writes
        step_dir = ref / "release"
    elif iteration.isdigit():
        step_dir = ref / f"iter_{int(iteration):07d}"
    else:
        return [f"{tracker}: unexpected content {iteration!r} (expected 'release' or an iteration number)"]
    if not step_dir.is_dir():
        return [f"{ref}: {TRACKER_NAME} says {iteration!r} but {step_dir} is missing"]
    manifest_path = ref / MANIFEST_NAME
    if not manifest_path.is_file():
        return [f"{ref}: no {MANIFEST_NAME}: not written by `make convert`, so it cannot be matched to {hf}"]
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return [f"{manifest_path}: unreadable ({exc})"]
    if manifest.get("schema_version") != MANIFEST_SCHEMA_VERSION:
        return [f"{manifest_path}: schema_version {manifest.get('schema_version')!r}, expected {MANIFEST_SCHEMA_VERSION}"]
    problems = []
    config = hf / "config.json"
    if config.is_file() and manifest.get("hf_config_sha256") != file_sha256(config):
        problems.append(f"{ref} was converted from another config.json than {config} (run `make convert` again)")
    if list(manifest.get("model_args", [])) != list(model_args):
        problems.append(f"{ref} was converted with other model arguments than the launcher passes (run `make convert` again)")
    return problems

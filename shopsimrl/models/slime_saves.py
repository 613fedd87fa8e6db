"""What a slime run left in its save directory (`--save`), read without torch or Megatron.

    latest_iteration("checkpoints/qwen35-4b-round-000")   # 199, or None before the first save
    last_hf_save("checkpoints/qwen35-4b-round-000")       # .../hf/rollout-199 (what SGLang serves)

A slime save directory holds Megatron's tracker `latest_checkpointed_iteration.txt` (the iteration
= the rollout id of the newest save, or `release`), the `iter_<7 digits>/` checkpoints, and, with
`--save-hf <save>/hf/rollout-{rollout_id}` (scripts/run_shopsimrl_slime.sh), one Hugging Face copy
per save. docs/slime_handoff.md says how a next round uses them.
"""

from __future__ import annotations

import re
from pathlib import Path

TRACKER_FILE = "latest_checkpointed_iteration.txt"  # Megatron's name (get_checkpoint_tracker_filename)
HF_SAVES_DIR = "hf"  # --save-hf <save>/hf/rollout-{rollout_id}
_HF_SAVE_NAME = re.compile(r"rollout-(\d+)")


class SlimeSaveError(Exception):
    """A save directory that holds no usable save, or a malformed tracker (names the path)."""


def latest_iteration(save_dir: str | Path) -> int | None:
    """The iteration Megatron's tracker names, or None when the directory has no tracker yet.

    `release` (a converted checkpoint, which Megatron loads as iteration 0) reads as 0. Any other
    content is an error naming the file: slime would refuse to resume from it too.
    """
    tracker = Path(save_dir) / TRACKER_FILE
    if not tracker.is_file():
        return None
    text = tracker.read_text(encoding="utf-8").strip()
    if text == "release":
        return 0
    if not re.fullmatch(r"\d+", text):
        raise SlimeSaveError(f"{tracker}: expected an iteration number or 'release', found {text!r}")
    return int(text)


def hf_saves(save_dir: str | Path) -> list[tuple[int, Path]]:
    """Every `hf/rollout-<n>` directory under the save dir as (n, path), lowest n first."""
    root = Path(save_dir) / HF_SAVES_DIR
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _HF_SAVE_NAME.fullmatch(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def last_hf_save(save_dir: str | Path) -> Path:
    """The highest-numbered `hf/rollout-<n>` directory of a slime save dir (the round's final policy)."""
    saves = hf_saves(save_dir)
    if not saves:
        raise SlimeSaveError(
            f"{save_dir}: no Hugging Face save (no {HF_SAVES_DIR}/rollout-<n> directory); slime writes "
            f"them with --save-hf {save_dir}/{HF_SAVES_DIR}/rollout-{{rollout_id}} at every --save-interval"
        )
    return saves[-1][1]

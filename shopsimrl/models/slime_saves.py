"""What a slime run left in its save directory (`--save`), read without torch or Megatron.

    latest_iteration("checkpoints/qwen35-4b-round-000")   # 199, or None before the first save
    last_hf_save("checkpoints/qwen35-4b-round-000")       # .../hf/rollout-199 (what SGLang serves)
    prune_saves("checkpoints/qwen35-4b-round-000")        # every other iter_* and hf/rollout-*, removed

A slime save directory holds Megatron's tracker `latest_checkpointed_iteration.txt` (the iteration
= the rollout id of the newest save, or `release`), the `iter_<7 digits>/` checkpoints, and, with
`--save-hf <save>/hf/rollout-{rollout_id}` (scripts/run_shopsimrl_slime.sh), one Hugging Face copy
per save. A PPO round's critic saves beside them in `critic/` (its own tracker and `iter_*`, no HF
copy; the critic role's --save, scripts/run_shopsimrl_slime.sh). docs/slime_handoff.md says how a next
round uses them.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

TRACKER_FILE = "latest_checkpointed_iteration.txt"  # Megatron's name (get_checkpoint_tracker_filename)
HF_SAVES_DIR = "hf"  # --save-hf <save>/hf/rollout-{rollout_id}
HF_INDEX_FILE = "model.safetensors.index.json"  # written last by slime's HF exporter
CRITIC_SAVE_DIR = "critic"  # <save>/critic: the critic role's own --load/--save under PPO
_HF_SAVE_NAME = re.compile(r"rollout-(\d+)")
_ITER_NAME = re.compile(r"iter_(\d{7})")  # Megatron's get_checkpoint_name


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


def hf_save_problem(path: Path) -> str | None:
    """Why an `hf/rollout-<n>` directory is not a whole save, or None when it is.

    slime's exporter creates the directory and copies the config first, writes the shards, and the
    index `model.safetensors.index.json` last (hf_checkpoint_saver.py): a save is whole when the
    index is there and every file its weight_map names exists.
    """
    index = path / HF_INDEX_FILE
    if not index.is_file():
        return f"no {HF_INDEX_FILE}"
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        files = sorted(set(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{HF_INDEX_FILE} is unreadable ({exc.__class__.__name__}: {exc})"
    missing = [name for name in files if not (path / name).is_file()]
    if missing:
        return f"{', '.join(missing)} of its index {'is' if len(missing) == 1 else 'are'} missing"
    return None


def last_hf_save(save_dir: str | Path) -> Path:
    """The highest-numbered `hf/rollout-<n>` directory of a slime save dir (the round's final policy).

    An incomplete newest save (a crash during the final export) is an error naming it, never served
    and never skipped in favour of an older one: SGLang loads a partial set of shards without complaint.
    """
    saves = hf_saves(save_dir)
    if not saves:
        raise SlimeSaveError(
            f"{save_dir}: no Hugging Face save (no {HF_SAVES_DIR}/rollout-<n> directory); slime writes "
            f"them with --save-hf {save_dir}/{HF_SAVES_DIR}/rollout-{{rollout_id}} at every --save-interval"
        )
    newest = saves[-1][1]
    problem = hf_save_problem(newest)
    if problem is not None:
        fallback = f", or move {newest.name} aside to serve {saves[-2][1]}" if len(saves) > 1 else " (no earlier save)"
        raise SlimeSaveError(
            f"{newest}: the newest Hugging Face save is incomplete ({problem}): slime's exporter writes the "
            f"index last, so the export was cut short. Export the final iteration again on a GPU host{fallback}"
        )
    return newest


def prune_saves(save_dir: str | Path) -> list[Path]:
    """Remove every `iter_<n>` but the tracker's and every `hf/rollout-<n>` but the last; returns them.

    For a finished round: the next round reads only the tracker's iteration (START_LOAD) and the
    round's later stages only the last HF save, while slime keeps every save (no retention option),
    ~60 GiB each for Qwen3.5-4B. A PPO round's `critic/` is pruned the same way (its tracker's
    `iter_<n>` is what the next round's critic starts from). Every kept save must be whole first (else
    SlimeSaveError, nothing removed); anything not named by Megatron's or --save-hf's pattern is left alone.
    """
    root = Path(save_dir)
    kept_iter = _tracked_iter(root)
    kept_hf = last_hf_save(root)
    doomed = _other_iters(root, kept_iter) + [path for _, path in hf_saves(root) if path != kept_hf]
    critic = root / CRITIC_SAVE_DIR
    if critic.is_dir():
        doomed += _other_iters(critic, _tracked_iter(critic))
    for path in doomed:
        shutil.rmtree(path)
    return doomed


def _tracked_iter(root: Path) -> Path:
    """The `iter_<n>` directory the tracker of `root` names; SlimeSaveError when either is missing."""
    iteration = latest_iteration(root)
    if iteration is None:
        raise SlimeSaveError(f"{root}: no {TRACKER_FILE}: nothing pruned")
    kept = root / f"iter_{iteration:07d}"
    if not kept.is_dir():
        raise SlimeSaveError(f"{kept} (named by {root / TRACKER_FILE}) is missing: nothing pruned")
    return kept


def _other_iters(root: Path, kept: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if _ITER_NAME.fullmatch(p.name) and p.is_dir() and p != kept)

"""Checkpoints of the local backend: Hugging Face format, written atomically, identified by a hash.

    info = save_checkpoint(model, tokenizer, "checkpoints/local-round-000/rollout-0001", rollout_id=1)
    info = verify_checkpoint("checkpoints/local-round-000/rollout-0001")   # CheckpointError if not whole
    model, tokenizer = load_checkpoint(info.path)

A checkpoint is a directory that `AutoModelForCausalLM.from_pretrained` reads, plus `checkpoint.json`
(files, sizes, the hash). It is written into a hidden sibling staging directory, fsynced, and renamed into
place, so a killed save never leaves a directory that looks finished. `latest_checkpointed_iteration.txt`
beside the checkpoints (slime's file name) names the newest one; it is replaced atomically after the
rename. The hash (`directory_sha256`) covers every file's relative path and bytes except
`checkpoint.json` itself; the gate and the round manifest use the same function.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl.errors import StopsTheCommand
from shopsimrl.storage import atomic_directory, atomic_write_json, atomic_write_text

CHECKPOINT_MANIFEST = "checkpoint.json"
WARM_START_DIR = "warm-start"  # the warm-started policy before GRPO (rollout_id null), when saved
LATEST_FILE = "latest_checkpointed_iteration.txt"  # slime's name for the same pointer
CHECKPOINT_SCHEMA_VERSION = 1
_CHUNK = 1 << 20


class CheckpointError(StopsTheCommand):
    """A checkpoint that is missing, unfinished or does not match its recorded hash (names the path)."""


@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    sha256: str
    rollout_id: int | None
    files: dict[str, int]  # relative path -> size in bytes


def checkpoint_dir_name(rollout_id: int) -> str:
    return f"rollout-{rollout_id:04d}"


def should_save(rollout_id: int, interval: int | None, num_rollout: int) -> bool:
    """slime's `should_run_periodic_action` for `--save-interval`: every `interval` rollouts and the last."""
    if interval is None:
        return False
    return rollout_id == num_rollout - 1 or (rollout_id + 1) % interval == 0


def _payload_files(directory: Path) -> list[Path]:
    return sorted(
        p for p in directory.rglob("*") if p.is_file() and p.relative_to(directory).as_posix() != CHECKPOINT_MANIFEST
    )


def directory_sha256(directory: str | os.PathLike[str]) -> str:
    """Hash of a model directory: each regular file's relative path and bytes, in sorted path order."""
    root = Path(directory)
    if not root.is_dir():
        raise CheckpointError(f"{root}: checkpoint directory not found")
    files = _payload_files(root)
    if not files:
        raise CheckpointError(f"{root}: checkpoint directory holds no files")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()


def save_checkpoint(
    model: Any,
    tokenizer: Any,
    directory: str | os.PathLike[str],
    *,
    rollout_id: int | None = None,
    extra_tensors: Mapping[str, Mapping[str, Any]] | None = None,
) -> CheckpointInfo:
    """Write `model` and `tokenizer` in HF format to `directory` atomically; refuses to overwrite one.

    `extra_tensors` maps a file name to a state dict saved beside the model as safetensors (the PPO
    critic's `critic.safetensors`), inside the same atomic write and covered by the same hash;
    `from_pretrained` ignores such files.
    """
    final = Path(directory)
    if final.exists():
        raise CheckpointError(f"{final}: a checkpoint is already there; refusing to overwrite it")
    with atomic_directory(final) as partial:  # fsynced and renamed into place only when whole
        model.save_pretrained(partial, safe_serialization=True)
        tokenizer.save_pretrained(partial)
        if extra_tensors:
            from safetensors.torch import save_file

            for name, tensors in extra_tensors.items():
                save_file({key: value.detach().contiguous().cpu() for key, value in tensors.items()}, partial / name)
        files = {p.relative_to(partial).as_posix(): p.stat().st_size for p in _payload_files(partial)}
        sha = directory_sha256(partial)
        atomic_write_json(
            partial / CHECKPOINT_MANIFEST,
            {"schema_version": CHECKPOINT_SCHEMA_VERSION, "sha256": sha, "rollout_id": rollout_id, "files": files},
        )
    atomic_write_text(final.parent / LATEST_FILE, f"{final.name}\n")
    return CheckpointInfo(path=final, sha256=sha, rollout_id=rollout_id, files=files)


def verify_checkpoint(directory: str | os.PathLike[str]) -> CheckpointInfo:
    """The checkpoint's info after checking every file against its manifest and hash."""
    root = Path(directory)
    manifest_path = root / CHECKPOINT_MANIFEST
    if not root.is_dir():
        raise CheckpointError(f"{root}: checkpoint directory not found")
    if not manifest_path.is_file():
        raise CheckpointError(f"{root}: no {CHECKPOINT_MANIFEST}; not a finished checkpoint")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        recorded, files = manifest["sha256"], manifest["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{manifest_path}: unreadable manifest ({exc})") from None
    present = {p.relative_to(root).as_posix(): p.stat().st_size for p in _payload_files(root)}
    missing = sorted(set(files) - set(present))
    if missing:
        raise CheckpointError(f"{root}: missing file(s) {', '.join(missing)}")
    changed = sorted(name for name, size in files.items() if present[name] != size)
    extra = sorted(set(present) - set(files))
    if changed or extra:
        raise CheckpointError(f"{root}: files differ from the manifest: {', '.join(changed + extra)}")
    actual = directory_sha256(root)
    if actual != recorded:
        raise CheckpointError(f"{root}: content hash {actual[:12]} does not match the recorded {recorded[:12]}")
    return CheckpointInfo(path=root, sha256=recorded, rollout_id=manifest.get("rollout_id"), files=files)


def checkpoint_sha256(directory: str | os.PathLike[str]) -> str:
    """The hash of a model directory: verified against `checkpoint.json` when it has one (ours)."""
    if (Path(directory) / CHECKPOINT_MANIFEST).is_file():
        return verify_checkpoint(directory).sha256
    return directory_sha256(directory)


def latest_checkpoint(parent: str | os.PathLike[str]) -> Path:
    """The checkpoint `latest_checkpointed_iteration.txt` in `parent` names (not yet verified)."""
    pointer = Path(parent) / LATEST_FILE
    if not pointer.is_file():
        raise CheckpointError(f"{pointer}: not found; no checkpoint was saved under {parent}")
    return Path(parent) / pointer.read_text(encoding="utf-8").strip()


def load_checkpoint(directory: str | os.PathLike[str]) -> tuple[Any, Any]:
    """Model and tokenizer of a verified checkpoint (float32, CPU)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    info = verify_checkpoint(directory)
    model = AutoModelForCausalLM.from_pretrained(info.path)
    tokenizer = AutoTokenizer.from_pretrained(info.path)
    return model, tokenizer

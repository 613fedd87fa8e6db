"""Files of a Hugging Face model directory, named before anything loads it.

`hf_model_problems(dir)` lists what is missing or is a placeholder: config, tokenizer files and
every weight file (a sharded checkpoint's index names its shards). A cache entry without its
weights, or with git-lfs pointers in their place, is named here instead of failing later inside
transformers with an unrelated traceback (e.g. about sentencepiece). Each problem is one line;
an empty list means complete.
"""

from __future__ import annotations

import json
from pathlib import Path

_LFS_POINTER_PREFIX = b"version https://git-lfs"
_TOKENIZER_FILE_SETS = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"))


def _is_lfs_pointer(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(len(_LFS_POINTER_PREFIX)) == _LFS_POINTER_PREFIX


def _weight_files(model_dir: Path) -> tuple[list[str], list[str]]:
    """(weight files the directory must hold, problems found while listing them)."""
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = model_dir / index_name
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
                return [], [f"{index}: not a weight index ({type(exc).__name__}: {exc})"]
            return sorted(set(weight_map.values())), []
    for single in ("model.safetensors", "pytorch_model.bin"):
        if (model_dir / single).exists():
            return [single], []
    return [], [
        f"{model_dir}: no weights (expected model.safetensors, or model.safetensors.index.json and its shards)"
    ]


def tokenizer_problems(model_dir: str | Path) -> list[str]:
    """Missing tokenizer files of a model directory, each named."""
    path = Path(model_dir)
    if not path.is_dir():
        return [f"model directory not found: {path}"]
    problems = []
    if not (path / "tokenizer_config.json").is_file():
        problems.append(f"{path}: missing tokenizer_config.json")
    if not any(all((path / name).is_file() for name in names) for names in _TOKENIZER_FILE_SETS):
        problems.append(f"{path}: no tokenizer files (tokenizer.json, tokenizer.model, or vocab.json + merges.txt)")
    return problems


def hf_model_problems(model_dir: str | Path) -> list[str]:
    """Missing or placeholder files of a Hugging Face model directory, each named."""
    path = Path(model_dir)
    if not path.is_dir():
        return [f"model directory not found: {path}"]
    problems = [] if (path / "config.json").is_file() else [f"{path}: missing config.json"]
    problems += tokenizer_problems(path)
    weights, listing_problems = _weight_files(path)
    problems += listing_problems
    missing = [name for name in weights if not (path / name).is_file()]
    if missing:
        problems.append(f"{path}: missing {len(missing)} of {len(weights)} weight file(s): {', '.join(missing)}")
    pointers = [name for name in weights if (path / name).is_file() and _is_lfs_pointer(path / name)]
    if pointers:
        problems.append(
            f"{path}: git-lfs pointer(s) instead of weights: {', '.join(pointers)} (run `git lfs pull`)"
        )
    return problems

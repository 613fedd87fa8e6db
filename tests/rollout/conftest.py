"""Fixtures shared by the rollout tests."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from shopsimrl.models import tiny_model, tiny_tokenizer


def _grouped_query_model(vocab: int) -> LlamaForCausalLM:
    """8 query heads sharing 2 key/value heads, as SmolLM2 (9 on 3) and Qwen do."""
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4)
        return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module", params=["multi-head", "grouped-query"])
def model(request):
    """A tiny Llama in eval mode, once with one key/value head per query head, once grouped-query."""
    tokenizer = tiny_tokenizer()
    if request.param == "multi-head":
        return tiny_model(tokenizer, seed=0).eval()
    return _grouped_query_model(len(tokenizer))

"""Prefill after a reused prefix: two unmasked attention calls merged by log-sum-exp against the
masked call they replace, and `encode_rows` through it against one forward of the whole prompt.

Tolerances: 1e-5 on attention outputs of unit-scale random tensors (the merge changes only float
rounding), 1e-4 on logits after a whole model (float32, as the generators' exactness tests).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from shopsimrl.models import tiny_model, tiny_tokenizer
from shopsimrl.rollout.generators.prefill import encode_rows
from shopsimrl.rollout.generators.prefix_attention import PREFIX_CALLS, PrefixCalls, prefix_attention
from shopsimrl.rollout.generators.prefix_cache import PrefixCache

ATTENTION_TOL = 1e-5
LOGIT_TOL = 1e-4


def _masked_reference(query, key, value, scale):
    """What transformers' SDPA path computes: keys repeated per query head, the causal mask aligned
    to the last query (query i sees keys up to past + i)."""
    heads, kv_heads = query.shape[1], key.shape[1]
    new, total = query.shape[2], key.shape[2]
    mask = torch.ones(new, total, dtype=torch.bool).tril(diagonal=total - new)
    return F.scaled_dot_product_attention(
        query,
        key.repeat_interleave(heads // kv_heads, dim=1),
        value.repeat_interleave(heads // kv_heads, dim=1),
        attn_mask=mask,
        scale=scale,
    ).transpose(1, 2)


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (8, 2)], ids=["multi-head", "grouped-query"])
@pytest.mark.parametrize("past, new", [(0, 7), (13, 1), (40, 9), (5, 30)])
def test_two_unmasked_parts_merge_to_the_masked_attention(heads, kv_heads, past, new):
    generator = torch.Generator().manual_seed(past * 100 + new)
    query = torch.randn(1, heads, new, 16, generator=generator)
    key = torch.randn(1, kv_heads, past + new, 16, generator=generator)
    value = torch.randn(1, kv_heads, past + new, 16, generator=generator)
    counter = PrefixCalls()
    output, _ = prefix_attention(None, query, key, value, None, scaling=0.25, **{PREFIX_CALLS: counter})
    assert output.shape == (1, new, heads, 16)
    assert output == pytest.approx(_masked_reference(query, key, value, 0.25), abs=ATTENTION_TOL)
    assert counter.calls == 1


def test_prefix_attention_refuses_what_it_does_not_compute():
    query, key = torch.randn(2, 4, 3, 16), torch.randn(2, 4, 5, 16)
    with pytest.raises(RuntimeError, match="needs shopsim_prefix_calls=PrefixCalls"):
        prefix_attention(None, query[:1], key[:1], key[:1], None)
    with pytest.raises(RuntimeError, match="one unpadded sequence after its cache, got batch 2, 3 queries over 5 keys"):
        prefix_attention(None, query, key, key, None, **{PREFIX_CALLS: PrefixCalls()})
    with pytest.raises(RuntimeError, match="mask True"):
        prefix_attention(None, query[:1], key[:1], key[:1], torch.ones(1, 1, 3, 5), **{PREFIX_CALLS: PrefixCalls()})


def test_a_prompt_encoded_after_its_cached_prefix_equals_one_forward_of_the_whole(model):
    generator = torch.Generator().manual_seed(0)
    prefix = torch.randint(3, 250, (60,), generator=generator).tolist()
    prompt = prefix + torch.randint(3, 250, (25,), generator=generator).tolist()
    store = PrefixCache()
    with torch.inference_mode():
        encode_rows(model, [prefix], store)
        encoded = encode_rows(model, [prompt], store)
        whole = model(input_ids=torch.tensor([prompt]), use_cache=True)
    assert (encoded.encoded_tokens, encoded.reused_tokens) == (25, 60)
    assert encoded.logits[0] == pytest.approx(whole.logits[0, -1].float(), abs=LOGIT_TOL)
    for (keys, values), layer in zip(encoded.layers[0], whole.past_key_values.layers, strict=True):
        assert keys == pytest.approx(layer.keys, abs=LOGIT_TOL)
        assert values == pytest.approx(layer.values, abs=LOGIT_TOL)
    assert model.config._attn_implementation != "shopsim_prefix"  # switched back after the forward


def test_a_layer_that_bypasses_prefix_attention_is_refused():
    """Without a mask, a layer attending its own way would use the causal shortcut aligned to the
    first key, not the last: encoding after a reused prefix says so instead of storing that."""
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer, seed=0).eval()
    attention = model.model.layers[0].self_attn
    attention.config = copy.deepcopy(attention.config)
    store = PrefixCache()
    with torch.inference_mode():
        encode_rows(model, [[5, 6, 7, 8]], store)
        with pytest.raises(RuntimeError, match=r"LlamaForCausalLM ran prefix attention in 1 of 2 layers"):
            encode_rows(model, [[5, 6, 7, 8, 9, 10]], store)

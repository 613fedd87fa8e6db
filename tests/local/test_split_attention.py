"""`split_attention` (local/split_attention.py) against autograd through the masked SDPA call it
replaces: outputs and the gradients of queries, keys and values, at the real (unpadded) positions.

Tolerances: float32 within 1e-5 (relative to each tensor's largest entry): the same attention summed
in other blocks, float rounding only. bfloat16 inputs within 2e-2: both sides round their products to
bfloat16 (8 significant bits, ~4e-3 a rounding), in different orders.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shopsimrl.local.split_attention import SPLIT_CALLS, SplitCalls, split_attention

PREFIX, WIDTH, HEADS, KV_HEADS, DIM = 37, 23, 6, 2, 16
LENGTHS = [23, 15, 9]  # each row's own tokens; right-padded to WIDTH


def _inputs(dtype: torch.dtype):
    generator = torch.Generator().manual_seed(0)
    rows = len(LENGTHS)

    def leaf(*shape):
        return torch.randn(*shape, generator=generator).to(dtype).requires_grad_(True)

    query = leaf(rows, HEADS, WIDTH, DIM)
    key = leaf(rows, KV_HEADS, PREFIX + WIDTH, DIM)
    value = leaf(rows, KV_HEADS, PREFIX + WIDTH, DIM)
    return query, key, value


def _masked_reference(query, key, value):
    """What transformers' SDPA path computes: keys repeated per query head, a boolean mask of the
    prefix, causal own positions and the row's padding."""
    rows = len(LENGTHS)
    group = HEADS // KV_HEADS
    allowed = torch.zeros(rows, 1, WIDTH, PREFIX + WIDTH, dtype=torch.bool)
    for row, length in enumerate(LENGTHS):
        for q in range(WIDTH):
            allowed[row, 0, q, :PREFIX] = True
            allowed[row, 0, q, PREFIX : PREFIX + min(q, length - 1) + 1] = True
    output = F.scaled_dot_product_attention(
        query, key.repeat_interleave(group, 1), value.repeat_interleave(group, 1), attn_mask=allowed
    )
    return output.transpose(1, 2)


def _real(tensor):
    """The positions a caller reads: each row's own tokens (dim 1 after the transpose)."""
    return torch.cat([tensor[row, :length] for row, length in enumerate(LENGTHS)])


def _grads(output, inputs, upstream):
    torch.autograd.backward(_real(output), _real(upstream))
    grads = [tensor.grad.clone() for tensor in inputs]
    for tensor in inputs:
        tensor.grad = None
    return grads


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_split_attention_matches_the_masked_call_and_its_gradients(dtype, tolerance):
    inputs = _inputs(dtype)
    upstream = torch.randn(len(LENGTHS), WIDTH, HEADS, DIM, generator=torch.Generator().manual_seed(1)).to(dtype)
    counter = SplitCalls()
    split, _ = split_attention(None, *inputs, None, scaling=DIM**-0.5, **{SPLIT_CALLS: counter})
    split_grads = _grads(split, inputs, upstream)
    reference = _masked_reference(*inputs)
    reference_grads = _grads(reference, inputs, upstream)
    assert counter.calls == 1
    pairs = [("output", _real(split), _real(reference))]
    pairs += list(zip(("query", "key", "value"), split_grads, reference_grads, strict=True))
    for name, got, want in pairs:
        scale = want.float().abs().max()
        error = (got.float() - want.float()).abs().max() / scale
        assert error <= tolerance, f"{name}: {error:.2e} relative"


def test_split_attention_refuses_a_mask_and_a_missing_counter():
    query, key, value = _inputs(torch.float32)
    with pytest.raises(RuntimeError, match="needs"):
        split_attention(None, query, key, value, None)
    with pytest.raises(RuntimeError, match="unmasked"):
        split_attention(None, query, key, value, torch.ones(1), **{SPLIT_CALLS: SplitCalls()})

"""Prefill attention on top of a reused prefix, in two unmasked parts merged by their log-sum-exp.

With KV reuse a prompt is encoded on top of a cached prefix: `n` new tokens attend to all `past`
cached positions and causally to each other. transformers gives SDPA an explicit `[n, past + n]`
mask for that (its causal shortcut only covers `n == past + n`), and a masked SDPA call on CPU
takes the slow path: 80-100 ms a layer for a 1,500-token block on SmolLM2's shapes against 46 ms
with `is_causal` (docs/rollout.md, "KV reuse"). `prefix_attention` instead makes two calls that
need no mask and merges them exactly:

* the new tokens over the cached prefix: every query sees every key, and the query heads that
  share a key head are stacked as that head's query rows (no copy of the keys for grouped-query
  attention);
* the new tokens over themselves: `is_causal`;
* each part returns its log-sum-exp per query (CPU flash attention reports it), and
  `softmax([a, b]) v` is the mix of the two partial results weighted by `exp(lse - max)`: the same
  numbers up to float rounding (tests/rollout/test_rollout_prefix_attention.py: within 1e-5 of the
  masked call).

It is registered with transformers' `AttentionInterface` under `PREFIX_ATTENTION` and switched on
only while `encode_rows` encodes one sequence after a reused prefix (`attention_implementation`);
transformers builds no mask for an attention it does not know, so none is made either. The merge
itself (`attend_after`) also serves `row_attention` (row_cache.py) when a decode step feeds a row
its draft tokens: a block of queries after the row's span.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface

PREFIX_ATTENTION = "shopsim_prefix"
PREFIX_CALLS = "shopsim_prefix_calls"  # the forward kwarg that carries the `PrefixCalls`


class PrefixCalls:
    """Counts `prefix_attention`'s calls in one forward: a model whose layers do not route attention
    through transformers' `AttentionInterface` would get no mask and attend with the causal shortcut,
    wrongly aligned for `n < past + n` keys; its caller checks the count instead (`encode_rows`)."""

    def __init__(self) -> None:
        self.calls = 0


_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu  # (output, logsumexp)


def prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The last `n` positions of one sequence (query `[1, heads, n, dim]`, keys and values of all
    `past + n` positions) attending causally; returns `[1, n, heads, dim]` as transformers' backends do."""
    counter = kwargs.get(PREFIX_CALLS)
    if not isinstance(counter, PrefixCalls):
        raise RuntimeError(f"{PREFIX_ATTENTION} attention needs {PREFIX_CALLS}=PrefixCalls()")
    counter.calls += 1
    batch, _, new, _ = query.shape
    total = key.shape[2]
    past = total - new
    if batch != 1 or past < 0 or attention_mask is not None:
        raise RuntimeError(
            f"{PREFIX_ATTENTION} attention encodes one unpadded sequence after its cache, "
            f"got batch {batch}, {new} queries over {total} keys, mask {attention_mask is not None}"
        )
    output = attend_after(
        query, key[:, :, :past], value[:, :, :past], key[:, :, past:], value[:, :, past:], scaling
    )
    return output.transpose(1, 2), None


def attend_after(
    query: torch.Tensor,
    past_keys: torch.Tensor,
    past_values: torch.Tensor,
    own_keys: torch.Tensor,
    own_values: torch.Tensor,
    scaling: float | None,
) -> torch.Tensor:
    """`n` queries of one sequence (`[1, heads, n, dim]`) over all `past` keys and causally over their
    own `n` (`[1, kv heads, ., dim]` each), without a mask: the two parts merged by their
    log-sum-exp (module doc). Returns `[1, heads, n, dim]`."""
    _, heads, new, head_dim = query.shape
    kv_heads, past = past_keys.shape[1], past_keys.shape[2]
    # bfloat16 caches (prefix_cache.py): the rotary embedding leaves the query float32; flash
    # attention wants one dtype, and autocast would round it to bfloat16 the same way.
    query = query.to(own_keys.dtype)
    group = heads // kv_heads
    output, own_lse = _flash(
        query,
        own_keys.repeat_interleave(group, dim=1),
        own_values.repeat_interleave(group, dim=1),
        0.0,
        True,
        scale=scaling,
    )
    if past == 0:
        return output
    # query head h uses key head h // group: stacking a key head's query heads as its query rows
    stacked = query.reshape(1, kv_heads, group * new, head_dim)
    seen, seen_lse = _flash(stacked, past_keys, past_values, 0.0, False, scale=scaling)
    seen, seen_lse = seen.reshape(1, heads, new, head_dim), seen_lse.reshape(1, heads, new)
    top = torch.maximum(own_lse, seen_lse)
    own_weight, seen_weight = torch.exp(own_lse - top), torch.exp(seen_lse - top)
    return (output * own_weight[..., None] + seen * seen_weight[..., None]) / (own_weight + seen_weight)[
        ..., None
    ]


AttentionInterface.register(PREFIX_ATTENTION, prefix_attention)


@contextmanager
def attention_implementation(model: torch.nn.Module, name: str) -> Iterator[None]:
    """The model's attention layers use the registered attention `name` inside the block."""
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous

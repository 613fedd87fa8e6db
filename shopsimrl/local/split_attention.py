"""Training attention of the rows' own tokens after their shared prefix: two unmasked parts, exact
gradients.

`FrozenTrunk.top_shared` runs the trainable layers over the rows' shared prompt prefix once and every
row's rest on top of that prefix's keys and values. Those queries attend to every prefix position and
causally to each other; transformers hands SDPA an explicit `[rows, 1, n, prefix + n]` mask for that
(its causal shortcut covers only queries that start at position 0), and CPU flash attention with a mask
takes its slow path, forward and backward (a warm-start step on the Intel kind: the masked backward
111 ms a layer, a fifth of the step; docs/benchmarks.md "Split attention in the update").

`split_attention` makes two unmasked calls instead, the rows' tokens over the prefix and over themselves
(`is_causal`), merged by their log-sum-exp as the generators' prefix attention does
(rollout/generators/prefix_attention.py), and its backward runs flash attention's backward once per
part with the merged output and log-sum-exp: softmax attention over a union of key blocks has, block by
block, flash's gradient with the whole row's statistics (probabilities exp(s - lse), and
rowsum(dO * O)); the queries' gradient is the sum of the parts'. The same gradients up to float
rounding (tests/local/test_split_attention.py against autograd through the masked call).

Rows are right-padded: under `is_causal` a padded position is seen only by later, padded ones, so the
real positions need no mask (their outputs are the only ones read).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface

SPLIT_ATTENTION = "shopsim_split"
SPLIT_CALLS = "shopsim_split_calls"  # the forward kwarg that carries the `SplitCalls`

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu  # (output, logsumexp)
_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


class SplitCalls:
    """Counts `split_attention`'s calls in one forward: a model whose layers bypass transformers'
    `AttentionInterface` would attend with no mask at all; the caller checks the count."""

    def __init__(self) -> None:
        self.calls = 0


class _SplitAttention(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        query: torch.Tensor,
        past_keys: torch.Tensor,
        past_values: torch.Tensor,
        own_keys: torch.Tensor,
        own_values: torch.Tensor,
        scale: float | None,
    ) -> torch.Tensor:
        own, own_lse = _flash(query, own_keys, own_values, 0.0, True, scale=scale)
        seen, seen_lse = _flash(query, past_keys, past_values, 0.0, False, scale=scale)
        lse = torch.logaddexp(own_lse, seen_lse)
        output = (
            own.float() * torch.exp(own_lse - lse)[..., None] + seen.float() * torch.exp(seen_lse - lse)[..., None]
        ).to(query.dtype)
        ctx.save_for_backward(query, past_keys, past_values, own_keys, own_values, output, lse)
        ctx.scale = scale
        return output

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        query, past_keys, past_values, own_keys, own_values, output, lse = ctx.saved_tensors
        grad = grad.contiguous().to(output.dtype)
        dq_own, dk_own, dv_own = _flash_backward(
            grad, query, own_keys, own_values, output, lse, 0.0, True, scale=ctx.scale
        )
        dq_seen, dk_seen, dv_seen = _flash_backward(
            grad, query, past_keys, past_values, output, lse, 0.0, False, scale=ctx.scale
        )
        return dq_own + dq_seen, dk_seen, dv_seen, dk_own, dv_own, None


def split_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Queries `[rows, heads, n, dim]` (right-padded) after a prefix: keys and values `[rows, kv heads,
    prefix + n, dim]`; returns `[rows, n, heads, dim]` as transformers' backends do."""
    counter = kwargs.get(SPLIT_CALLS)
    if not isinstance(counter, SplitCalls):
        raise RuntimeError(f"{SPLIT_ATTENTION} attention needs {SPLIT_CALLS}=SplitCalls()")
    counter.calls += 1
    _, heads, new, _ = query.shape
    past = key.shape[2] - new
    if past <= 0 or attention_mask is not None or dropout:
        raise RuntimeError(
            f"{SPLIT_ATTENTION} attention takes queries after a prefix, unmasked, without dropout: got "
            f"{new} queries over {key.shape[2]} keys, mask {attention_mask is not None}, dropout {dropout}"
        )
    # Under autocast the products run in its dtype (as SDPA's would); flash wants one dtype.
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else query.dtype
    group = heads // key.shape[1]
    key, value = key.to(dtype).repeat_interleave(group, dim=1), value.to(dtype).repeat_interleave(group, dim=1)
    output = _SplitAttention.apply(
        query.to(dtype).contiguous(),
        key[:, :, :past].contiguous(),
        value[:, :, :past].contiguous(),
        key[:, :, past:].contiguous(),
        value[:, :, past:].contiguous(),
        scaling,
    )
    return output.transpose(1, 2), None


AttentionInterface.register(SPLIT_ATTENTION, split_attention)

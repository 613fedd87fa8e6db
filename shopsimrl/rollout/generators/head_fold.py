"""The output head over a prefill's last positions, computed as one 2-D product.

A prefill keeps only its last position's logits (`logits_to_keep=1`): transformers slices the hidden
states to `[:, -1:, :]` before the head. That slice keeps the whole sequence's batch stride, and
`torch.matmul` folds a 3-D input into one 2-D product only when its strides are the canonical ones;
otherwise it runs a batched product over the head's weight expanded and copied (SmolLM2: 49,152 x
576). Measured on the CPU (torch 2.13, bfloat16 and float32 alike): ~110 ms a prefill instead of
~4 ms, about a fifth of a gate episode's model time. `folded_head` gives the head's input canonical
strides (a copy of the kept positions: rows x hidden size): the same numbers in the same order, so the logits are bit for bit the same (tests/rollout/test_rollout_head_fold.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


@contextmanager
def folded_head(model: torch.nn.Module) -> Iterator[None]:
    """Inside the block, `model`'s output head gets its input with canonical strides."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        yield
        return
    handle = head.register_forward_pre_hook(_canonical)
    try:
        yield
    finally:
        handle.remove()


def _canonical(_module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() < 3:
        return None
    # A copy of the kept positions only (rows x hidden size): canonical strides even where the slice
    # counts as contiguous (one row: the stride of a dimension of size 1 is not looked at).
    return (args[0].clone(memory_format=torch.contiguous_format), *args[1:])

"""The arithmetic precision of a forward: float32 (the default, every golden output) or bfloat16.

`compute_precision(torch.bfloat16)` is `torch.autocast("cpu", dtype=torch.bfloat16)`: the weights
and the optimizer state stay float32 (master weights), the matrix products and attention run in
bfloat16, and autocast keeps reductions (norms, softmax, the loss) in float32. On a Zen 4 EPYC
(avx512_bf16) this took a prefill 2.1x, a forward + backward of the top 8 layers 1.7x faster
(bench/bench_precision.py; docs/benchmarks.md "bfloat16"), at about 3 significant digits: outputs are
no longer token-identical to float32's, so it is a config choice (`model.compute_dtype`), off by default.

Residual streams stay float32 under autocast (a bfloat16 layer output added to a float32 residual is
float32), so hidden states handed between the rollout and the frozen trunk keep their dtype; keys and
values in caches are bfloat16 (what the projections produced).

A generator's forwards run without autograd, where autocast keeps no cast of a weight: every forward
casts every float32 weight to bfloat16 again. In a decode step (a few rows) that cast costs as much as
the product it feeds, which left decoding 1.09x under autocast against 2.64x with bfloat16 weights.
`InferencePrecision` keeps bfloat16 copies of the model's `nn.Linear` weights, and the linears
compute with them for the duration of its forwards: autocast then finds its operands already in bfloat16, and the products
are the same ones (the copy rounds as autocast's cast does), so tokens and log-probs equal plain
autocast's. Norms and embeddings keep their float32 weights, so the residual stream stays float32. A
copy is refreshed when its weight changes in place (an optimizer step, a checkpoint load: the
tensor's version counter moves) or is replaced.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
import torch.nn.functional as F

COMPUTE_DTYPES = (torch.float32, torch.bfloat16)


def compute_precision(dtype: torch.dtype) -> AbstractContextManager[object]:
    """The context a forward (and the backward of what it recorded) runs in for `dtype`."""
    if dtype == torch.float32:
        return nullcontext()
    if dtype == torch.bfloat16:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    raise ValueError(f"compute dtype {dtype} is not one of {', '.join(str(d) for d in COMPUTE_DTYPES)}")


def kv_cache_dtype(dtype: torch.dtype) -> torch.dtype | None:
    """The dtype a generator's KV caches store for compute `dtype`: bfloat16 under bfloat16 (the
    attention then runs in bfloat16 over half the bytes, prefix_cache.py), None (as produced) in float32."""
    return None if dtype == torch.float32 else dtype


class InferencePrecision:
    """The context of a generator's no-grad forwards of `model` in `dtype`: `compute_precision(dtype)`,
    plus, for bfloat16, the model's linears computing with bfloat16 copies of their weights while it is
    entered."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype):
        compute_precision(dtype)  # an unknown dtype is an error here, not at the first forward
        self.dtype = dtype
        # The model's structure is fixed; only its weights change (checked at every entry).
        self._linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        # module -> (the float32 weight it was copied from, that weight's version then, the copy)
        self._copies: dict[torch.nn.Linear, tuple[torch.Tensor, int, torch.Tensor]] = {}

    @contextmanager
    def forwards(self) -> Iterator[None]:
        if self.dtype == torch.float32:
            yield
            return
        # Each linear's forward is replaced, not its weight: the parameters stay the model's own, so
        # what fingerprints them (the prefix cache, the frozen trunk) sees the same tensors inside.
        swapped: list[torch.nn.Linear] = []
        try:
            for module in self._linears:
                if module.weight.dtype == torch.float32:
                    copy = self._copy(module, module.weight)
                    module.forward = functools.partial(F.linear, weight=copy, bias=module.bias)
                    swapped.append(module)
            with compute_precision(self.dtype):
                yield
        finally:
            for module in swapped:
                del module.forward  # the class's forward again

    def _copy(self, module: torch.nn.Linear, master: torch.Tensor) -> torch.Tensor:
        kept = self._copies.get(module)
        if kept is not None and kept[0] is master and kept[1] == master._version:
            return kept[2]
        # An ordinary tensor even when made under inference mode, so that it can be refreshed in place
        # later (an inference tensor cannot be written outside inference mode): one allocation a weight.
        with torch.inference_mode(False), torch.no_grad():
            if kept is not None and kept[2].shape == master.shape:
                copy = kept[2].copy_(master)
            else:
                copy = master.detach().to(self.dtype)
        self._copies[module] = (master, master._version, copy)
        return copy

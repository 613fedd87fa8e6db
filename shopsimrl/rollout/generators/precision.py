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
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

COMPUTE_DTYPES = (torch.float32, torch.bfloat16)


def compute_precision(dtype: torch.dtype) -> AbstractContextManager[object]:
    """The context a forward (and the backward of what it recorded) runs in for `dtype`."""
    if dtype == torch.float32:
        return nullcontext()
    if dtype == torch.bfloat16:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    raise ValueError(f"compute dtype {dtype} is not one of {', '.join(str(d) for d in COMPUTE_DTYPES)}")

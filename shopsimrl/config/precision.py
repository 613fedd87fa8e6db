"""`ComputeDtype`: the precision of a local model's forwards (`model.compute_dtype` of a training,
`generator.compute_dtype` of the gate and evaluation, `trial.compute_dtype` of the Analyst's trials).

What each value runs is rollout/generators/precision.py's; this module holds only the config value,
so reading a config does not import torch.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ComputeDtype(StrEnum):
    FLOAT32 = "float32"  # the default: every golden output
    BFLOAT16 = "bfloat16"  # autocast; the weights (and a training's optimizer state) stay float32

    @property
    def torch(self) -> Any:
        import torch  # here, not at import: reading a config does not load torch

        return torch.bfloat16 if self is ComputeDtype.BFLOAT16 else torch.float32

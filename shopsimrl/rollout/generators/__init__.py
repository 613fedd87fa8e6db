"""Generators of the agent loop: SGLang over HTTP (slime backend) and a local HF model (CPU backend).

The local model has two generators with the same sampling rules: `LocalHFGenerator` (one sequence
at a time) and `BatchedLocalHFGenerator` (concurrent calls decoded as one batch; the local driver's).
Both are imported lazily so that the slime hooks (which only need the HTTP generator)
do not pay torch's import time when this package is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shopsimrl.rollout.generators.base import FinishReason, GenerationAborted, GenerationResult, Generator
from shopsimrl.rollout.generators.sglang import SGLangGenerator, parse_generate_response

if TYPE_CHECKING:
    from shopsimrl.rollout.generators.batched_local import BatchedLocalHFGenerator
    from shopsimrl.rollout.generators.local_hf import LocalHFGenerator

__all__ = [
    "BatchedLocalHFGenerator",
    "FinishReason",
    "GenerationAborted",
    "GenerationResult",
    "Generator",
    "LocalHFGenerator",
    "SGLangGenerator",
    "parse_generate_response",
]


def __getattr__(name: str) -> Any:
    if name == "LocalHFGenerator":
        from shopsimrl.rollout.generators.local_hf import LocalHFGenerator

        return LocalHFGenerator
    if name == "BatchedLocalHFGenerator":
        from shopsimrl.rollout.generators.batched_local import BatchedLocalHFGenerator

        return BatchedLocalHFGenerator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The hidden states a local generator computes at one layer, handed to whoever will need them again.

A policy that trains only its top layers (the demo: 8 of SmolLM2's 30) has a frozen bottom whose
output is a pure function of the tokens. The rollout runs every token of every trajectory through
it, and the GRPO update right after needs that output for the same tokens: the local backend's
`FrozenTrunk` (shopsimrl/local/trunk.py) is a `HiddenRecorder`, and `BatchedLocalHFGenerator(...,
recorder=trunk)` hands it what its forwards computed at `recorder.layer` instead of the update
recomputing the frozen layers.

    with HiddenTap(recorder.layer) as tap:
        model(...)
        hidden = tap.take()      # [batch, tokens, hidden size]: the input of that layer in that forward
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch


class HiddenRecorder(Protocol):
    """Takes the hidden states entering `layer` for a token sequence's positions `start:`."""

    @property
    def layer(self) -> torch.nn.Module: ...

    def record(self, tokens: Sequence[int], start: int, hidden: torch.Tensor) -> bool: ...


class HiddenTap:
    """Inside the block, the input of `layer` in each forward is kept until `take()` (one at a time:
    a forward that ran the layer twice, or a `take()` without a forward, is an error)."""

    def __init__(self, layer: torch.nn.Module):
        self.layer = layer
        self._value: torch.Tensor | None = None
        self._handle: Any = None

    def __enter__(self) -> HiddenTap:
        self._handle = self.layer.register_forward_pre_hook(self._keep, with_kwargs=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()
        self._value = None

    def _keep(self, _module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._value is not None:
            raise RuntimeError("the recorded layer ran twice before its input was taken")
        self._value = args[0] if args else kwargs["hidden_states"]

    def take(self) -> torch.Tensor:
        if self._value is None:
            raise RuntimeError("the recorded layer has not run since the last take()")
        value, self._value = self._value, None
        return value

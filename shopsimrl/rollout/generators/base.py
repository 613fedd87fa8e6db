"""The `Generator` interface of the agent loop: token ids in, token ids and log-probs out.

Two implementations: `SGLangGenerator` (SGLang's native `/generate`, the slime backend) and
`LocalHFGenerator` (a transformers causal LM, the CPU backend and tests). A failure of the model
service is never a policy failure: it raises `ModelServiceError` (a `TechnicalError`), and an
SGLang abort raises its subclass `GenerationAborted` so the trajectory is marked ABORTED as slime
does, not FAILED.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from shopsimrl.errors import ModelServiceError


class FinishReason(StrEnum):
    """SGLang's `meta_info.finish_reason.type` values (an abort never reaches a caller: it raises)."""

    STOP = "stop"  # a stop token / stop string / eos matched
    LENGTH = "length"  # max_new_tokens reached
    ABORT = "abort"


class GenerationAborted(ModelServiceError):
    """The server aborted the request (SGLang finish reason `abort`, e.g. slime's end-of-batch abort)."""


@dataclass(frozen=True)
class GenerationResult:
    """One model turn. `log_probs[i]` is the log-probability of `token_ids[i]` (see docs/rollout.md)."""

    token_ids: list[int]
    log_probs: list[float]
    finish_reason: FinishReason
    text: str = ""
    weight_version: str | None = None

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.log_probs):
            raise ModelServiceError(
                f"generation returned {len(self.token_ids)} tokens but {len(self.log_probs)} log-probs"
            )


@runtime_checkable
class Generator(Protocol):
    """Anything that continues a token sequence. Raises `ModelServiceError` on a service failure."""

    async def generate(self, input_ids: list[int], sampling_params: dict[str, Any]) -> GenerationResult: ...

"""A `Sample` with slime v0.3.1's fields and `Status` values, for use where slime is absent.

Inside slime the hooks receive slime's own `Sample`; our code only touches the fields below, so
either class works. New segments are made with `copy.deepcopy` of the sample slime handed us,
which keeps slime's class. The local backend and the tests use this class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Sample:
    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False
    status: Sample.Status = Status.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)
    train_metadata: dict[str, Any] | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0

    def get_reward_value(self, args: Any) -> float:
        """slime's rule: a dict reward is read through `args.reward_key`."""
        if isinstance(self.reward, dict):
            key = getattr(args, "reward_key", None)
            if key is None:
                raise ValueError("sample.reward is a dict but args.reward_key is not set")
            return self.reward[key]
        if self.reward is None:
            raise ValueError(f"sample {self.index} has no reward")
        return self.reward

    @property
    def effective_response_length(self) -> int:
        return sum(self.loss_mask) if self.loss_mask is not None else self.response_length


@dataclass
class DynamicFilterOutput:
    """slime's `filter_hub.base_types.DynamicFilterOutput` (v0.3.1 fields)."""

    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False


def status_value(sample: Any) -> str:
    """The status as its string value, whichever `Sample` class the object comes from."""
    status = sample.status
    return status.value if isinstance(status, Enum) else str(status)

"""slime v0.3.1's hook-boundary types, for use only where slime is absent (a CPU laptop).

`shopsimrl.contract.slime_types` decides which classes the package uses; nothing else imports this
module. tests/contract/test_slime_types.py checks these replicas field for field, and the two
functions on a grid of inputs, against slime v0.3.1's own code (`SLIME_SRC` or a vendored copy: tests/slime_source.py).
Fields our code never touches (multimodal inputs, top-p replay, routed experts, spec info) are left
out: a sample of this class only ever meets our own code.
"""


from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Sample:
    """slime's `slime.utils.types.Sample`: the fields our hooks read or write."""

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0

    def get_reward_value(self, args: Any) -> Any:
        """slime's rule: a dict reward is read through `args.reward_key`."""
        return self.reward if not args.reward_key else self.reward[args.reward_key]

    @property
    def effective_response_length(self) -> int:
        return sum(self.loss_mask) if self.loss_mask is not None else self.response_length


@dataclass
class DynamicFilterOutput:
    """slime's `slime.rollout.filter_hub.base_types.DynamicFilterOutput`."""

    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False


def should_drop_dynamic_filter_output(
    output: DynamicFilterOutput, *, remaining_batch_size: int, target_data_size: int
) -> bool:
    """slime's rule: a kept group is never dropped; a fallback group survives when slack is gone."""
    if output.keep:
        return False
    return not (output.keep_when_insufficient and remaining_batch_size <= target_data_size)


def call_dynamic_filter(fn: Any, *args: Any, **kwargs: Any) -> DynamicFilterOutput:
    """slime's call site: anything that is not a `DynamicFilterOutput` is wrapped as `keep=value`."""
    if fn is None:
        return DynamicFilterOutput(keep=True)
    output = fn(*args, **kwargs)
    if not isinstance(output, DynamicFilterOutput):
        output = DynamicFilterOutput(keep=output)
    return output

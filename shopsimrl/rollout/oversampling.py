"""slime's over-sampling rule as a small synchronous state machine (reference/slime.md section 4.3).

slime's `generate_rollout_async`, reduced to its decisions:

    while len(data) < target:
        while remaining < target:                      # a wave
            submit(over_sampling_batch_size groups);  remaining += over_sampling_batch_size
        for each finished group:
            out = filter(group)
            if should_drop(out, remaining, target):  count drop(out.reason);  remaining -= 1;  continue
            if len(data) < target:  data.append(group)        # else: surplus, not trained, not returned

    should_drop: keep -> False; keep_when_insufficient and remaining <= target -> False; else True

The local backend's driver uses this class, so both backends drop exactly the same groups. Usage:

    sampler = OverSampler(target=16, over_sampling_batch_size=32)
    while not sampler.done:
        fetch(sampler.next_wave())          # 0 when no wave is due
        for group in finished_groups():     # one asyncio.wait batch
            decision = sampler.on_group_completed(group_id, filter_output)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shopsimrl.metrics.names import dynamic_filter_drop_key
from shopsimrl.rollout.sample import DynamicFilterOutput


class Decision(StrEnum):
    ACCEPTED = "accepted"  # entered the batch (the trainer)
    DROPPED = "dropped"  # rejected by the filter; counted in drop_<reason>; `remaining` shrinks
    SURPLUS = "surplus"  # passed the filter after the batch was full: neither trained nor counted


def should_drop(output: DynamicFilterOutput, remaining: int, target: int) -> bool:
    """slime's `should_drop_dynamic_filter_output`."""
    if output.keep:
        return False
    if output.keep_when_insufficient and remaining <= target:
        return False
    return True


def as_filter_output(value: DynamicFilterOutput | bool | Any) -> DynamicFilterOutput:
    """slime wraps a legacy (bool-like) filter return as `DynamicFilterOutput(keep=bool(x))`."""
    if isinstance(value, DynamicFilterOutput):
        return value
    return DynamicFilterOutput(keep=bool(value))


@dataclass
class OverSampler:
    target: int  # rollout_batch_size (groups)
    over_sampling_batch_size: int
    remaining: int = 0
    submitted: int = 0
    accepted: list[Any] = field(default_factory=list)
    dropped: list[tuple[Any, str | None]] = field(default_factory=list)
    surplus: list[Any] = field(default_factory=list)
    waves: list[int] = field(default_factory=list)
    _drops: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if self.target < 1:
            raise ValueError(f"target (rollout_batch_size) must be >= 1, got {self.target}")
        if self.over_sampling_batch_size < 1:
            raise ValueError(f"over_sampling_batch_size must be >= 1, got {self.over_sampling_batch_size}")

    @property
    def done(self) -> bool:
        return len(self.accepted) >= self.target

    def next_wave(self) -> int:
        """Groups to fetch now (a multiple of the wave size, 0 when none is due); records the submission."""
        if self.done:
            return 0
        requested = 0
        while self.remaining < self.target:
            self.remaining += self.over_sampling_batch_size
            requested += self.over_sampling_batch_size
            self.waves.append(self.over_sampling_batch_size)
        self.submitted += requested
        return requested

    def on_group_completed(self, group_id: Any, output: DynamicFilterOutput | bool) -> Decision:
        decision_input = as_filter_output(output)
        if should_drop(decision_input, self.remaining, self.target):
            self.remaining -= 1
            self.dropped.append((group_id, decision_input.reason))
            if decision_input.reason:  # slime does not count a drop without a reason
                self._drops[decision_input.reason] += 1
            return Decision.DROPPED
        if len(self.accepted) < self.target:
            self.accepted.append(group_id)
            return Decision.ACCEPTED
        self.surplus.append(group_id)
        return Decision.SURPLUS

    def drop_counts(self) -> dict[str, int]:
        """Really dropped groups per reason."""
        return dict(self._drops)

    def drop_metrics(self) -> dict[str, int]:
        """slime's `MetricGatherer.collect()`: `{"rollout/dynamic_filter/drop_<reason>": count}`."""
        return {dynamic_filter_drop_key(reason): count for reason, count in self._drops.items()}

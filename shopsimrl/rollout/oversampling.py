"""slime's over-sampling rule as a small synchronous state machine (docs/local_backend.md, "The rollout loop").

slime's `generate_rollout_async`, reduced to its decisions:

    while len(data) < target:
        while remaining < target:                      # a wave
            submit(over_sampling_batch_size groups);  remaining += over_sampling_batch_size
        for each finished group:
            out = filter(group)
            if should_drop(out, remaining, target):  count drop(out.reason);  remaining -= 1;  continue
            if len(data) < target:  data.append(group)        # else: surplus, not trained, not returned

    should_drop: keep -> False; keep_when_insufficient and remaining <= target -> False; else True

The filter call and the drop rule are slime's own functions (`call_dynamic_filter`,
`should_drop_dynamic_filter_output`, via `shopsimrl.contract`) whenever slime is importable; only the
loop around them is ours. The local backend's driver uses this class, so both backends drop exactly
the same groups. Usage:

    sampler = OverSampler(target=16, over_sampling_batch_size=32)
    while not sampler.done:
        fetch(sampler.next_wave())          # 0 when no wave is due
        for group in finished_groups():     # one asyncio.wait batch
            decision = sampler.on_group_completed(group_id, call_dynamic_filter(fn, args, group))
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shopsimrl.contract import DynamicFilterOutput, should_drop_dynamic_filter_output
from shopsimrl.metrics.names import dynamic_filter_drop_key


class Decision(StrEnum):
    ACCEPTED = "accepted"  # entered the batch (the trainer)
    DROPPED = "dropped"  # rejected by the filter; counted in drop_<reason>; `remaining` shrinks
    SURPLUS = "surplus"  # passed the filter after the batch was full: neither trained nor counted


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

    def on_group_completed(self, group_id: Any, output: DynamicFilterOutput) -> Decision:
        """`output` as slime's `call_dynamic_filter` returns it (a legacy bool already wrapped)."""
        if should_drop_dynamic_filter_output(
            output, remaining_batch_size=self.remaining, target_data_size=self.target
        ):
            self.remaining -= 1
            self.dropped.append((group_id, output.reason))
            if output.reason:  # slime does not count a drop without a reason
                self._drops[output.reason] += 1
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

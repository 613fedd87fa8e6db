"""From slime Samples to trajectories and groups: the units every metric counts.

A trajectory is a unique (group_index, rollout_id); its segments (token-contiguous Samples) carry the
same outcome and count once. A group handed to us by slime is a list of Samples, or, when a custom
generate fans out, a list of lists of Samples; both shapes are accepted everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from shopsimrl.contract import Arm, ShopSimMeta, get_meta, status_value

# slime keeps a group when std(rewards) > 1e-6 (filter_hub, float64); we use the same tolerance.
ZERO_STD_TOLERANCE = 1e-6
_UNFINISHED = frozenset({"pending", "aborted"})


def flatten_group(group: Iterable[Any]) -> list[Any]:
    """Leaves of a group: Samples, whatever the nesting (fan-out gives lists of Samples)."""
    leaves: list[Any] = []
    for element in group:
        if isinstance(element, (list, tuple)):  # noqa: UP038 (a tuple is faster than a union here)
            leaves.extend(flatten_group(element))
        else:
            leaves.append(element)
    return leaves


@dataclass(frozen=True)
class TrajectorySummary:
    rollout_id: int | str
    scorable: bool
    reward: float | None
    strict_reward: float | None
    success: bool | None
    technical_error: dict[str, str] | None
    segment_count: int

    def reward_value(self, reward_key: str) -> float | None:
        return self.reward if reward_key == "reward" else self.strict_reward


@dataclass(frozen=True)
class GroupSummary:
    """What the metrics, the filter and triage need to know about one completed group."""

    group_index: int
    group_key: str
    task_id: str
    split: str
    arm: Arm
    mask: tuple[str, ...]
    q: float
    rho: dict[str, float]
    is_retry: bool
    completed: bool  # every sibling finished (no PENDING/ABORTED segment)
    trajectories: tuple[TrajectorySummary, ...]

    @property
    def has_technical_error(self) -> bool:
        return any(not t.scorable for t in self.trajectories)

    @property
    def scorable(self) -> tuple[TrajectorySummary, ...]:
        return tuple(t for t in self.trajectories if t.scorable)

    @property
    def all_wrong(self) -> bool:
        """Every sibling scorable and none succeeded."""
        return (
            bool(self.trajectories)
            and not self.has_technical_error
            and not any(t.success for t in self.trajectories)
        )

    def scorable_rewards(self, reward_key: str) -> list[float]:
        values = []
        for trajectory in self.scorable:
            value = trajectory.reward_value(reward_key)
            if value is None:
                raise ValueError(
                    f"group_index={self.group_index} rollout_id={trajectory.rollout_id}: scorable "
                    f"trajectory has no {reward_key!r} in its outcome"
                )
            values.append(value)
        return values

    def is_zero_std(self, reward_key: str) -> bool:
        """Scorable sibling rewards all equal (one trajectory each); False with no scorable sibling."""
        rewards = self.scorable_rewards(reward_key)
        return bool(rewards) and population_std(rewards) <= ZERO_STD_TOLERANCE


def population_std(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _trajectory_id(sample: Any) -> int | str:
    # slime assigns a unique rollout_id later when it is None: each such sample is its own trajectory.
    return sample.rollout_id if sample.rollout_id is not None else f"sample-{sample.index}"


def _outcome_signature(meta: ShopSimMeta) -> tuple[Any, ...]:
    o = meta.outcome
    error = o.technical_error.model_dump() if o.technical_error else None
    return (o.reward, o.strict_reward, o.success, o.scorable, None if error is None else tuple(error.items()))


def parse_metas(leaves: Sequence[Any]) -> list[ShopSimMeta]:
    """Each leaf's metadata, parsed once (callers that need it twice pass it on)."""
    return [get_meta(sample) for sample in leaves]


def summarize_group(group: Iterable[Any], metas: Sequence[ShopSimMeta] | None = None) -> GroupSummary:
    """Summarise a group (flat or fan-out). Raises ValueError naming the sample on a broken contract.

    `metas`, when given, are the already parsed metadata of `flatten_group(group)`, in order.
    """
    leaves = flatten_group(group)
    if not leaves:
        raise ValueError("empty group: slime never hands over a group without samples")
    if metas is None:
        metas = parse_metas(leaves)
    elif len(metas) != len(leaves):
        raise ValueError(f"{len(metas)} parsed metadata for {len(leaves)} samples")
    first = leaves[0]
    first_meta = metas[0]
    by_trajectory: dict[int | str, tuple[ShopSimMeta, int]] = {}
    completed = True
    for sample, meta in zip(leaves, metas, strict=True):
        if sample.group_index != first.group_index:
            raise ValueError(
                f"group mixes group_index {first.group_index} and {sample.group_index} (sample index={sample.index})"
            )
        if (
            meta.group_key != first_meta.group_key
            or meta.arm != first_meta.arm
            or meta.mask != first_meta.mask
        ):
            raise ValueError(
                f"group_index={sample.group_index}: siblings disagree on group_key/arm/mask (sample index={sample.index})"
            )
        if status_value(sample) in _UNFINISHED:
            completed = False
        key = _trajectory_id(sample)
        seen = by_trajectory.get(key)
        if seen is None:
            by_trajectory[key] = (meta, 1)
            continue
        if _outcome_signature(seen[0]) != _outcome_signature(meta):
            raise ValueError(
                f"group_index={sample.group_index} rollout_id={key}: segments carry different outcomes "
                f"(sample index={sample.index}); every segment of a trajectory must share its outcome"
            )
        by_trajectory[key] = (seen[0], seen[1] + 1)
    trajectories = tuple(
        TrajectorySummary(
            rollout_id=key,
            scorable=meta.outcome.scorable,
            reward=meta.outcome.reward,
            strict_reward=meta.outcome.strict_reward,
            success=meta.outcome.success,
            technical_error=meta.outcome.technical_error.model_dump()
            if meta.outcome.technical_error
            else None,
            segment_count=count,
        )
        for key, (meta, count) in by_trajectory.items()
    )
    if first.group_index is None:
        raise ValueError(f"sample index={first.index} has no group_index")
    return GroupSummary(
        group_index=first.group_index,
        group_key=first_meta.group_key,
        task_id=first_meta.task_id,
        split=first_meta.split,
        arm=first_meta.arm,
        mask=tuple(first_meta.mask),
        q=first_meta.q,
        rho=dict(first_meta.rho),
        is_retry=first_meta.retry is not None,
        completed=completed,
        trajectories=trajectories,
    )


def group_samples_by_index(samples: Iterable[Any]) -> list[list[Any]]:
    """Regroup a flattened batch (slime's `samples` in the log hook) by group_index, in first-seen order."""
    groups: dict[Any, list[Any]] = {}
    for sample in samples:
        groups.setdefault(sample.group_index, []).append(sample)
    return list(groups.values())

"""Hand-built groups of slime-style Samples with the ShopSim metadata contract.

For tests, benchmarks and examples: each trajectory is described by its outcome and its number of
segments, and becomes that many Samples sharing `rollout_id`, `group_index` and the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shopsimrl.contract import (
    Arm,
    Outcome,
    RetryInfo,
    Sample,
    SegmentInfo,
    ShopSimMeta,
    TechnicalErrorInfo,
    set_meta,
)


@dataclass(frozen=True)
class Traj:
    """One trajectory: a reward (None with `error`), optional strict reward/success, segment count."""

    reward: float | None = 0.0
    strict_reward: float | None = None
    success: bool | None = None
    segments: int = 1
    error: str | None = None  # a technical error kind: the trajectory is unscorable
    response_length: int = 8


def make_group(
    group_index: int,
    trajectories: list[Traj],
    *,
    arm: Arm = Arm.SKILL_FREE,
    mask: tuple[str, ...] = (),
    rho: dict[str, float] | None = None,
    q: float = 0.5,
    task_id: str | None = None,
    group_key: str | None = None,
    split: str = "train",
    retry: RetryInfo | None = None,
    fan_out: bool = False,
    first_index: int | None = None,
    status: Sample.Status = Sample.Status.COMPLETED,
    extra: dict[str, Any] | None = None,
) -> list[Any]:
    """A group: flat list of segment Samples, or (fan_out) one list of segments per trajectory."""
    index = first_index if first_index is not None else group_index * 1000
    task = task_id or f"task-{group_index}"
    out: list[Any] = []
    for position, traj in enumerate(trajectories):
        if traj.error is not None:
            outcome = Outcome(
                scorable=False,
                technical_error=TechnicalErrorInfo(kind=traj.error, message=f"{traj.error} failed"),
            )
        else:
            reward = float(traj.reward if traj.reward is not None else 0.0)
            strict = traj.strict_reward if traj.strict_reward is not None else (1.0 if reward == 1.0 else 0.0)
            success = traj.success if traj.success is not None else strict == 1.0
            outcome = Outcome(reward=reward, strict_reward=strict, success=success, scorable=True)
        rollout_id = group_index * 100 + position
        segments = []
        for seg in range(traj.segments):
            sample = Sample(
                group_index=group_index,
                index=index,
                rollout_id=rollout_id,
                tokens=list(range(4 + traj.response_length)),
                response_length=traj.response_length,
                loss_mask=[1] * (traj.response_length // 2)
                + [0] * (traj.response_length - traj.response_length // 2),
                status=status,
            )
            index += 1
            meta = ShopSimMeta(
                task_id=task,
                split=split,
                group_key=group_key or f"key-{task}",
                arm=arm,
                mask=list(mask),
                q=q,
                rho=dict(rho or {}),
                segment=SegmentInfo(index=seg, count=traj.segments),
                outcome=outcome,
                retry=retry,
                **(extra or {}),
            )
            set_meta(sample, meta)
            sample.reward = outcome.reward
            segments.append(sample)
        if fan_out:
            out.append(segments)
        else:
            out.extend(segments)
    return out

"""Turn a `Trajectory` into slime `Sample`s, one per segment (docs/rollout.md, "Samples").

Each sample is a `copy.deepcopy` of the sample slime handed to the custom generate, so slime's own
class (and any field we do not touch) is kept. All segments of a trajectory share `rollout_id` and
`group_index` and carry the same outcome in `metadata["shopsim"]`.

`rollout_id` is the template sample's `index`: slime's data source gives every sample (every
sibling of every group) its own global `index`, and one sample becomes one trajectory, so the index
is unique per trajectory — the convention of slime's own multi-agent example.
"""

from __future__ import annotations

import copy
from typing import Any

from shopsimrl.contract import SegmentInfo, ShopSimMeta, set_meta
from shopsimrl.rollout.trajectory import Trajectory, TrajectoryStatus

# Keys added next to the contract keys of metadata["shopsim"] (ShopSimMeta allows extra keys).
META_TRAJECTORY = "trajectory"  # Trajectory.summary(): turns, stop reason, timings, state hash
META_MESSAGES = "messages"  # chat messages generated inside this segment (segment 0 adds system + user)
META_GOLD_AUDIT = "gold_audit"  # privileged; read by traces/triage only


def trajectory_to_samples(
    trajectory: Trajectory,
    template: Any,
    meta: ShopSimMeta,
    *,
    rollout_id: int | None = None,
    reward: float | None = None,
) -> list[Any]:
    """One sample per segment (at least one). `meta` carries the group's curriculum fields; its
    `outcome` and `segment` are overwritten from the trajectory. `reward` is left None unless
    given, so slime calls the reward hook (--custom-rm-path) on the list."""
    if rollout_id is None:
        rollout_id = template.index
    if rollout_id is None:
        raise ValueError("template sample has no index: pass rollout_id explicitly")
    status_cls = type(template.status)
    segments = trajectory.segments
    count = max(len(segments), 1)
    outcome = trajectory.outcome.model_copy(deep=True)
    samples = []
    for position in range(count):
        sample = copy.deepcopy(template)
        sample.rollout_id = rollout_id
        sample.reward = reward
        seg_meta = meta.model_copy(
            deep=True,
            update={
                "task_id": trajectory.task_id,
                "split": trajectory.split,
                "segment": SegmentInfo(index=position, count=count),
                "outcome": outcome,
            },
        )
        extras: dict[str, Any] = {
            META_TRAJECTORY: trajectory.summary(),
            META_GOLD_AUDIT: trajectory.gold_audit,
        }
        if segments:
            segment = segments[position]
            sample.tokens = list(segment.tokens)
            sample.response_length = segment.response_length
            sample.loss_mask = list(segment.loss_mask)
            sample.rollout_log_probs = list(segment.rollout_log_probs)
            sample.response = segment.response_text
            sample.prompt = segment.prompt_text
            sample.weight_versions = list(segment.weight_versions)
            start = 0 if position == 0 else segment.message_start
            extras[META_MESSAGES] = copy.deepcopy(trajectory.messages[start : segment.message_end])
        else:  # failed before the first prompt existed: one empty sample carries the error
            sample.tokens = []
            sample.response_length = 0
            sample.loss_mask = []
            sample.rollout_log_probs = []
            sample.response = ""
            extras[META_MESSAGES] = copy.deepcopy(trajectory.messages)
        sample.status = status_cls(_segment_status(trajectory.status, position, count).value)
        # Unscorable work must never train: the filter drops its group, and a zero loss mask is the
        # second line of defence if a filter is ever misconfigured.
        sample.remove_sample = not outcome.scorable
        sample.non_generation_time = trajectory.timings.environment_s / count
        set_meta(sample, seg_meta)
        sample.metadata["shopsim"].update(extras)
        samples.append(sample)
    return samples


def _segment_status(status: TrajectoryStatus, position: int, count: int) -> TrajectoryStatus:
    """Aborted and failed apply to every segment (slime skips the reward of a list with an aborted
    element); truncation happened in the last segment only, the earlier ones completed normally."""
    if status is TrajectoryStatus.TRUNCATED and position < count - 1:
        return TrajectoryStatus.COMPLETED
    return status

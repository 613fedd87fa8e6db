"""GRPO reward normalisation per group over unique trajectories (`--custom-reward-post-process-path`).

slime's built-in `_post_process_rewards` reshapes the flattened batch to `(-1, n_samples_per_prompt)`:
with segmented trajectories the count no longer matches, it falls back to one batch-wide group, and
every segment is a separate element of its group (slime v0.3.1, `RolloutManager._post_process_rewards`). Here each trajectory
(unique `rollout_id` within a `group_index`) counts once in its group's mean and std, and every
segment receives its trajectory's value. Samples may arrive in any order.

Estimator rules follow slime: grpo/gspo/cispo centre and (unless disabled, or n = 1) divide by
`std + 1e-6` with torch's unbiased std; reinforce_plus_plus_baseline only centres; other estimators
and `--disable-rewards-normalization` return the raw rewards.
"""

from __future__ import annotations

import math
from typing import Any

from shopsimrl.config.options import options_from_args
from shopsimrl.contract import METADATA_KEY, get_meta

GRPO_EPSILON = 1e-6
_STD_ESTIMATORS = frozenset({"grpo", "gspo", "cispo"})
_CENTRE_ESTIMATORS = _STD_ESTIMATORS | {"reinforce_plus_plus_baseline"}


def _setting(args: Any, name: str, default: Any) -> Any:
    # slime's args always carry these; the local backend's namespace may omit them, meaning slime's default.
    return getattr(args, name, default)


def _use_std(args: Any) -> bool:
    if _setting(args, "disable_grpo_std_normalization", False):
        return False
    return bool(_setting(args, "grpo_std_normalization", True))


def trajectory_reward(args: Any, sample: Any, reward_key: str) -> float:
    """The trajectory's reward: the outcome field named by the reward key, else `sample.reward`."""
    if METADATA_KEY in (sample.metadata or {}):
        meta = get_meta(sample)
        if meta.retry is not None:
            raise ValueError(
                f"sample index={sample.index} group_index={sample.group_index} is a diagnostic retry; "
                "retries are never trained on (the dynamic filter must drop them)"
            )
        value = getattr(meta.outcome, reward_key)
        if value is not None:
            return float(value)
    if sample.reward is None:
        raise ValueError(
            f"sample index={sample.index} group_index={sample.group_index} has no {reward_key!r} outcome "
            "and no reward"
        )
    return float(sample.get_reward_value(args))


def unbiased_std(values: list[float]) -> float:
    """torch.std's default (Bessel-corrected); NaN for a single value, as torch gives."""
    n = len(values)
    if n < 2:
        return math.nan
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def normalise_group(rewards: list[float], *, centre: bool, divide_by_std: bool) -> list[float]:
    """GRPO advantages of one group's trajectory rewards."""
    if not centre:
        return list(rewards)
    mean = sum(rewards) / len(rewards)
    centred = [r - mean for r in rewards]
    if divide_by_std and len(rewards) > 1:
        std = unbiased_std(rewards)
        return [c / (std + GRPO_EPSILON) for c in centred]
    return centred


def reward_post_process(args: Any, samples: list[Any]) -> tuple[list[float], list[float]]:
    """slime hook: `(args, samples) -> (raw_rewards, rewards)`, one entry per (flattened) sample."""
    reward_key = options_from_args(args).reward_key
    estimator = _setting(args, "advantage_estimator", "grpo")
    centre = estimator in _CENTRE_ESTIMATORS and bool(_setting(args, "rewards_normalization", True))
    divide_by_std = estimator in _STD_ESTIMATORS and _use_std(args)

    raw: list[float] = []
    trajectory_of_sample: list[tuple[Any, Any]] = []
    groups: dict[Any, dict[Any, float]] = {}  # group_index -> rollout_id -> reward (first seen)
    for position, sample in enumerate(samples):
        if sample.group_index is None:
            raise ValueError(f"sample index={sample.index} has no group_index; GRPO groups by it")
        reward = trajectory_reward(args, sample, reward_key)
        rollout = sample.rollout_id if sample.rollout_id is not None else ("sample", position)
        trajectories = groups.setdefault(sample.group_index, {})
        if rollout in trajectories and trajectories[rollout] != reward:
            raise ValueError(
                f"group_index={sample.group_index} rollout_id={sample.rollout_id}: segments carry rewards "
                f"{trajectories[rollout]} and {reward}; every segment must share its trajectory's reward"
            )
        trajectories.setdefault(rollout, reward)
        raw.append(reward)
        trajectory_of_sample.append((sample.group_index, rollout))

    advantage: dict[tuple[Any, Any], float] = {}
    for group_index, trajectories in groups.items():
        ids = list(trajectories)
        values = normalise_group([trajectories[i] for i in ids], centre=centre, divide_by_std=divide_by_std)
        advantage.update({(group_index, i): v for i, v in zip(ids, values, strict=True)})
    return raw, [advantage[key] for key in trajectory_of_sample]

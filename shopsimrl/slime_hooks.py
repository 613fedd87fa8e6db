"""slime v0.3.1 hooks of ShopSimRL, referenced by dotted path (docs/hooks.md).

| slime flag                          | dotted path                                   | process, kind         |
| ----------------------------------- | --------------------------------------------- | --------------------- |
| `--custom-generate-function-path`   | `shopsimrl.slime_hooks.generate`              | RolloutManager, async |
| `--custom-rm-path`                  | `shopsimrl.slime_hooks.reward`                | RolloutManager, async |
| `--custom-reward-post-process-path` | `shopsimrl.slime_hooks.reward_post_process`   | RolloutManager, sync  |
| `--dynamic-sampling-filter-path`    | `shopsimrl.slime_hooks.dynamic_sampling_filter` | RolloutManager, sync |

Importing this module does no work and imports neither slime, sglang, ray nor torch. Options come
from `--custom-config-path` (the `shopsim:` section, validated once per process).
"""

from __future__ import annotations

import math
from typing import Any

from shopsimrl.config.options import options_from_args
from shopsimrl.contract import Arm, ShopSimMeta, get_meta
from shopsimrl.rollout.advantages import reward_post_process
from shopsimrl.rollout.agent import AgentRuntime, run_trajectory
from shopsimrl.rollout.curriculum import Assignment, rollout_step
from shopsimrl.rollout.datasource import group_key, task_for_sample
from shopsimrl.rollout.filters import dynamic_sampling_filter
from shopsimrl.rollout.segments import trajectory_to_samples

__all__ = ["UNSCORABLE_REWARD", "dynamic_sampling_filter", "generate", "reward", "reward_post_process"]

# The reward of a segment whose trajectory is unscorable (technical failure). Never 0: a technical
# failure is not a policy failure. NaN poisons any mean it enters, so if a misconfigured run ever
# let such a group past the dynamic filter (which always drops it) the error would be loud, not a
# silent "failed episode"; the segments also carry remove_sample=True (zero loss mask).
UNSCORABLE_REWARD = math.nan


async def generate(
    args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False
) -> list[Any]:
    """Custom generate: one ShopSim episode for `sample`, returned as its segments (list[Sample]).

    Training samples get the curriculum draw of their group (`group_key = task_id#g<group_index>`);
    evaluation samples run skill-free. Rewards are left None so slime calls `reward` on the list.
    """
    runtime = AgentRuntime.from_args(args)
    task = task_for_sample(sample, runtime.catalog)
    curriculum = runtime.curriculum
    q = curriculum.q_at(rollout_step(args))
    if evaluation:
        key = f"{task.task_id}#eval{sample.index}"
        assignment = Assignment(group_key=key, arm=Arm.SKILL_FREE, mask=(), q=q, rho=curriculum.rho)
    else:
        assignment = curriculum.assign(group_key(task.task_id, sample.group_index), q=q)
    trajectory = await run_trajectory(
        task=task,
        catalog=runtime.catalog,
        tokenizer=runtime.tokenizer,
        generator=runtime.generator,
        options=runtime.options,
        skill_texts=curriculum.skill_texts(assignment),
        sampling_params=sampling_params,
    )
    return trajectory_to_samples(trajectory, sample, meta_for(assignment, task.task_id, task.split.value))


def meta_for(assignment: Assignment, task_id: str, split: str) -> ShopSimMeta:
    """The group's curriculum fields of `metadata["shopsim"]` (outcome and segment are filled later)."""
    return ShopSimMeta(
        task_id=task_id,
        split=split,
        group_key=assignment.group_key,
        arm=assignment.arm,
        mask=list(assignment.mask),
        q=assignment.q,
        rho=dict(assignment.rho),
    )


async def reward(args: Any, samples: Any, **kwargs: Any) -> float | list[float]:
    """Custom RM: the trajectory outcome's `shopsim.reward_key` field.

    slime calls `rm_function(args, samples)` through `batched_async_rm` when a custom generate
    returned a list with `reward is None` (every one of ours), and `rm_function(args, sample)`
    through `async_rm` otherwise; the answer has the shape of the input. Unscorable segments get
    `UNSCORABLE_REWARD` (NaN), never 0.
    """
    reward_key = options_from_args(args).reward_key
    if isinstance(samples, list):
        return [_reward_of(s, reward_key) for s in samples]
    return _reward_of(samples, reward_key)


def _reward_of(sample: Any, reward_key: str) -> float:
    outcome = get_meta(sample).outcome
    if not outcome.scorable:
        return UNSCORABLE_REWARD
    value = getattr(outcome, reward_key)
    if value is None:
        raise ValueError(f"sample index={sample.index}: scorable outcome has no {reward_key!r}")
    return float(value)

"""The evaluation's episodes: the first N tasks of a split x `seeds` episodes each, all seeds fixed.

An episode's sampling and environment seeds depend only on (plan seed, task, seed index), never on
the checkpoint or the mask, so two evaluations with the same plan are paired episode by episode:
the before/after comparison of a checkpoint pair (`shopsimrl eval --compare`) uses that.

    episodes = plan_episodes(["v-0001", "v-0002"], seeds=2, seed=0, mask=("c1",))
"""

from __future__ import annotations

from collections.abc import Sequence

from shopsimrl.evaluation.episode import PlannedEpisode, derived_seed

KEY_FIELDS = ("episode_id",)
def episode_id(task_id: str, replicate: int) -> str:
    return f"{task_id}/s{replicate}"


def plan_episodes(task_ids: Sequence[str], *, seeds: int, seed: int, mask: tuple[str, ...]) -> list[PlannedEpisode]:
    """Task-major order, so an interrupted evaluation has whole tasks first."""
    if len(set(task_ids)) != len(task_ids):
        raise ValueError("task_ids contains duplicates")
    return [
        PlannedEpisode(
            labels={"episode_id": episode_id(task_id, r), "replicate": r},
            key_fields=KEY_FIELDS,
            task_id=task_id,
            mask=mask,
            sampling_seed=derived_seed(seed, "sampling", task_id, r),
            env_seed=derived_seed(seed, "environment", task_id, r),
        )
        for task_id in task_ids
        for r in range(seeds)
    ]

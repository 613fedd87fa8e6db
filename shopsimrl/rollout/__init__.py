"""Rollout: agent loop, generators, curriculum, data source, filters, advantages.

The skillbank the prompts draw from lives one layer down, in `shopsimrl.skills`.

Names are imported lazily (PEP 562) so that importing one submodule — e.g. the slime hooks in the
RolloutManager — does not import every other one (torch for the local generator, the metrics).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    # agent loop
    "AgentRuntime": "shopsimrl.rollout.agent",
    "run_trajectory": "shopsimrl.rollout.agent",
    "Trajectory": "shopsimrl.rollout.trajectory",
    "Segment": "shopsimrl.rollout.trajectory",
    "TrajectoryStatus": "shopsimrl.rollout.trajectory",
    "StopReason": "shopsimrl.rollout.trajectory",
    "PhaseTimings": "shopsimrl.rollout.trajectory",
    "trajectory_to_samples": "shopsimrl.rollout.segments",
    # generators
    "Generator": "shopsimrl.rollout.generators",
    "GenerationResult": "shopsimrl.rollout.generators",
    "GenerationAborted": "shopsimrl.rollout.generators",
    "FinishReason": "shopsimrl.rollout.generators",
    "SGLangGenerator": "shopsimrl.rollout.generators",
    "LocalHFGenerator": "shopsimrl.rollout.generators",
    "BatchedLocalHFGenerator": "shopsimrl.rollout.generators",
    # curriculum and prompts
    "Assignment": "shopsimrl.rollout.curriculum",
    "Curriculum": "shopsimrl.rollout.curriculum",
    "advance_rollout_step": "shopsimrl.rollout.curriculum",
    "rollout_step": "shopsimrl.rollout.curriculum",
    # data
    "TaskGroupSource": "shopsimrl.rollout.datasource",
    "export_prompt_data": "shopsimrl.rollout.datasource",
    "group_key": "shopsimrl.rollout.datasource",
    # retries
    "run_pending_retries": "shopsimrl.rollout.retries",
    "schedule_pending": "shopsimrl.rollout.retries",
    # filter, advantages (the sample contract itself lives in shopsimrl.contract)
    "dynamic_sampling_filter": "shopsimrl.rollout.filters",
    "reward_post_process": "shopsimrl.rollout.advantages",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)

"""Start-up checks of a local round: everything that can be known before the model load.

A run that would fail after minutes of model load and warm start (an unwritable WANDB_DIR, a
max_turns the expert cannot finish in) or that would corrupt an earlier run's record (a second run
into the same run directory) is refused at once, every problem in one `StartupError`:

    check_startup(config, settings, catalog, tasks)   # StartupError, or None when the run may start

A used run directory is refused, never appended to: `metrics.jsonl` would restart `_step` at 0 in
the middle of the file and traces of the same step names would be overwritten. Each run gets its own
directory (`--set run.group=NEW-NAME`); `training smoke` and `training demo` add a UTC suffix themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl.errors import StartupError
from shopsimrl.local.config import RunConfig
from shopsimrl.models.checkpoint import CheckpointError, verify_checkpoint
from shopsimrl.shop import Catalog, ExpertPolicy, ShopEnv, Task
from shopsimrl.storage import writable_dir_problem
from shopsimrl.tracking import WandbSettings
from shopsimrl.tracking.failure_record import FAILURES_DIR
from shopsimrl.tracking.logger import wandb_dir_problems

_SHOWN_ENTRIES = 3
# The expert's longest episode is a handful of turns; the probe stops long before a runaway loop.
_EXPERT_TURN_CAP = 100


def run_dir_in_use(stage_dir: Path) -> list[str]:
    """What an earlier run left in `stage_dir` (failure records of a run that never started are not counted)."""
    if not stage_dir.is_dir():
        return []
    return sorted(entry.name for entry in stage_dir.iterdir() if entry.name != FAILURES_DIR)


def run_dir_problems(stage_dir: Path) -> list[str]:
    used = run_dir_in_use(stage_dir)
    if used:
        shown = ", ".join(used[:_SHOWN_ENTRIES]) + (", ..." if len(used) > _SHOWN_ENTRIES else "")
        return [
            f"run directory {stage_dir} already holds a run ({shown}); a second run would mix its metrics "
            "and traces into it. Give this run its own directory (--set run.group=NEW-NAME) or move the "
            "old one away"
        ]
    cause = writable_dir_problem(stage_dir)
    return [] if cause is None else [f"run directory {stage_dir}: {cause}"]


def checkpoint_dir_problems(config: RunConfig) -> list[str]:
    """A run that saves checkpoints needs a checkpoint directory no earlier run of its group used."""
    if config.driver.save_interval is None:
        return []
    directory = config.checkpoint_dir
    if directory.is_dir() and any(directory.iterdir()):
        return [
            f"checkpoint directory {directory} already holds checkpoints of an earlier run; give this run "
            "its own group (--set run.group=NEW-NAME) or move them away"
        ]
    cause = writable_dir_problem(directory)
    return [] if cause is None else [f"checkpoint directory {directory}: {cause}"]


def expert_turns_needed(catalog: Catalog, task: Task) -> int:
    """Turns the noiseless expert takes to check out `task` (the environment is deterministic)."""
    env = ShopEnv(catalog, max_turns=_EXPERT_TURN_CAP)
    env.reset(task=task, seed=0)
    policy = ExpertPolicy(noise=0.0, seed=0)
    for turn in range(1, _EXPERT_TURN_CAP + 1):
        _, _, terminated, truncated, _ = env.step(policy.next_action(env))
        if terminated or truncated:
            return turn
    return _EXPERT_TURN_CAP


def warm_start_problems(config: RunConfig, catalog: Catalog, tasks: Sequence[Task]) -> list[str]:
    """The warm start draws its expert episodes from every task of the split: each must fit max_turns."""
    if not config.warm_start.enabled or not tasks:
        return []
    needed, task = max((expert_turns_needed(catalog, task), task.task_id) for task in tasks)
    max_turns = config.shopsim.max_turns
    if needed <= max_turns:
        return []
    return [
        f"shopsim.max_turns={max_turns} is too small for the warm start: the noiseless expert needs "
        f"{needed} turns on task {task} of the {config.shopsim.split} split; set shopsim.max_turns to at "
        "least "
        f"{needed} or warm_start.enabled: false"
    ]


def check_startup(config: RunConfig, settings: WandbSettings, catalog: Catalog, tasks: Sequence[Any]) -> None:
    """Raise StartupError listing every problem that would stop or spoil the run later."""
    problems = run_dir_problems(config.stage_dir)
    if settings.enabled:
        problems += wandb_dir_problems(settings)
    problems += warm_start_problems(config, catalog, tasks)
    problems += checkpoint_dir_problems(config)
    if config.model.checkpoint is not None:
        try:
            verify_checkpoint(config.model.checkpoint)
        except CheckpointError as exc:
            problems.append(f"model.checkpoint: {exc}")
    if problems:
        raise StartupError(problems)

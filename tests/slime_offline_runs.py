"""slime v0.3.1's offline W&B layout, written with the real wandb (imported by basename: tests/ is on sys.path).

One training launch = three offline runs with ONE run id (slime/utils/wandb_utils.py): the driver's
`init_wandb_primary` (group, name, config; no history), then `init_wandb_secondary` with
`id=<the primary's id>, resume="allow"` in the RolloutManager (rollout/* keyed by rollout/step) and in
actor rank 0 (train/* keyed by train/step, and the actor's own rollout/* from
slime/backends/megatron_utils/data.py). The secondaries pass no group: the launcher's WANDB_RUN_GROUP
gives them the round's. Each init gets its own offline-run-<second>-<id> directory, so the processes
start a second apart here, in slime's order (train.py: driver, RolloutManager, actors).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROLLOUTS = 3  # rollout steps
UPDATES_PER_ROLLOUT = 2  # optimizer steps per rollout (train/step 0..5)
_QUIET = dict(console="off", x_disable_stats=True, x_disable_meta=True, x_disable_machine_info=True,
              x_save_requirements=False, disable_git=True, save_code=False, silent=True)  # fmt: skip


def rollout_manager_row(step: int) -> dict:
    return {"rollout/shopsim/reward_mean": 0.25 * step, "rollout/shopsim/success_rate": 0.1 * step, "rollout/step": step}


def actor_rollout_row(step: int) -> dict:
    return {"rollout/raw_reward": 0.5 + step, "rollout/step": step}


def train_row(step: int) -> dict:
    return {"train/loss": 1.0 / (step + 1), "train/grad_norm": 0.5 + step, "train/step": step}


def _axes(run) -> None:
    # slime's _init_wandb_common
    run.define_metric("train/step")
    run.define_metric("train/*", step_metric="train/step")
    run.define_metric("rollout/step")
    run.define_metric("rollout/*", step_metric="rollout/step")


def write_slime_offline_runs(wandb_dir: Path, group: str, project: str = "shopsimrl") -> list[Path]:
    """The three run files of one slime launch in offline mode, in start order; returns their paths.

    Each run is written by its own process, as slime's are (the driver, then the RolloutManager and
    actor rank 0 as Ray actors), with the launcher's WANDB_RUN_GROUP in their environment.
    """
    env = {**os.environ, "WANDB_RUN_GROUP": group, "WANDB_MODE": "offline"}
    files: list[Path] = []
    for role in ("driver", "rollout_manager", "actor"):
        if files:
            time.sleep(1.05)  # another second: another offline-run-<time>-<id> directory
        run_id = files[0].stem.removeprefix("run-") if files else ""
        done = subprocess.run([sys.executable, __file__, role, str(wandb_dir), group, project, run_id], env=env,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{role}: {done.stderr[-2000:]}")
        files.append(Path(done.stdout.strip().splitlines()[-1]))
    return files


def _write(role: str, wandb_dir: str, group: str, project: str, run_id: str) -> Path:
    """One process's run, as slime's init_wandb_primary / init_wandb_secondary open it."""
    import wandb

    if role == "driver":
        run = wandb.init(dir=wandb_dir, project=project, group=group, name=group, mode="offline",
                         config={"lr": 1e-6, "num_rollout": ROLLOUTS}, settings=wandb.Settings(**_QUIET))  # fmt: skip
        rows: list[dict] = []
    else:
        run = wandb.init(dir=wandb_dir, id=run_id, project=project, resume="allow", mode="offline",
                         config={"lr": 1e-6}, settings=wandb.Settings(**_QUIET))  # fmt: skip
        if role == "rollout_manager":
            rows = [rollout_manager_row(s) for s in range(ROLLOUTS)]
        else:
            rows = [*(train_row(s) for s in range(ROLLOUTS * UPDATES_PER_ROLLOUT)),
                    *(actor_rollout_row(s) for s in range(ROLLOUTS))]  # fmt: skip
    _axes(run)
    for row in rows:
        run.log(row)
    return _finish(run)

def _finish(run) -> Path:
    """run.finish(), then wait for the exit record (wandb 0.31 can return before wandb-core wrote it)."""
    from shopsimrl.tracking.offline_reader import read_offline_run

    run_file = Path(run.settings.sync_file)
    run.finish()
    deadline = time.monotonic() + 30
    while read_offline_run(run_file).exit_code is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no exit record in {run_file} 30 s after run.finish()")
        time.sleep(0.05)
    return run_file


if __name__ == "__main__":
    print(_write(*sys.argv[1:6]))

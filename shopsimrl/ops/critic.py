"""Where a PPO launch's critic loads from and saves to on slime, and the role file that says so.

slime v0.3.1 has no critic checkpoint flag (`--critic-load`/`--critic-save` of its usage docs are not
in its parser): the critic is built from a deep copy of the validated arguments with the critic entry
of `--megatron-config-path` applied (`parse_megatron_role_args`, slime/utils/arguments.py:1628), so
without an override it would load and save the actor's directories. Under SAVE_DIR the launcher
therefore hands slime a resolved copy of the shipped role file whose critic entry adds

    save: <SAVE_DIR>/critic                  always: the two models never share a directory
    load: <SAVE_DIR>/critic                  the actor resumes this round (its own tracker exists)
    load: <START_LOAD>/critic                the actor starts at rollout 0 and the previous round left a critic
    (no load)                                otherwise: the critic inherits --load = --ref-load, a fresh critic

The critic follows the actor's case because it inherits the actor's `finetune`/`no_load_optim`/
`no_load_rng`, which `slime_validate_args` set from the actor's tracker alone; and slime takes the
run's start rollout from the critic's loaded iteration (slime/ray/placement_group.py:210-219).
docs/slime_handoff.md gives the details.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl.config.files import load_yaml_file
from shopsimrl.errors import ConfigError
from shopsimrl.models.slime_saves import CRITIC_SAVE_DIR, TRACKER_FILE, SlimeSaveError, latest_iteration

RESOLVED_ROLES_NAME = "megatron_roles.yaml"
# Role keys the launcher owns under SAVE_DIR; the shipped file setting one would be a second source.
_LAUNCHER_KEYS = ("load", "save", "finetune", "no_load_optim", "no_load_rng", "ckpt_step")


@dataclass(frozen=True)
class CriticPlan:
    save: str | None  # the critic's --save (None without SAVE_DIR: the critic is never saved)
    load: str | None  # the critic's own --load; None: it inherits the actor's (a fresh critic)
    line: str  # the plan's `critic:` line
    problem: str | None = None  # why a real launch must refuse (a dry run only shows it)


def critic_plan(*, save_dir: str | None, start_load: str | None) -> CriticPlan:
    """Where the critic starts for this launch, read from the trackers on disk now."""
    if not save_dir:
        return CriticPlan(None, None, "fresh, never saved (no SAVE_DIR): slime builds the critic from --ref-load's "
                          "weights with a new value head")  # fmt: skip
    own_critic = str(Path(save_dir) / CRITIC_SAVE_DIR)
    try:
        own_actor, own = latest_iteration(save_dir), latest_iteration(own_critic)
        previous_critic = str(Path(start_load) / CRITIC_SAVE_DIR) if start_load else None
        previous = latest_iteration(previous_critic) if previous_critic else None
    except SlimeSaveError as exc:
        return CriticPlan(own_critic, None, f"UNREADABLE: {exc}", problem=str(exc))
    if own_actor is not None:
        if own is None:
            problem = (f"{save_dir} holds the actor's iteration {own_actor} but {own_critic} holds no {TRACKER_FILE}: "
                       "the run died between the actor's and the critic's save, and slime starts a PPO run at the "
                       f"critic's iteration + 1; move {save_dir} aside to restart this round")  # fmt: skip
            return CriticPlan(own_critic, own_critic, f"a real launch refuses: {problem}", problem=problem)
        line = f"resume: --load {own_critic} (iteration {own}; model, optimizer, RNG), saves to {own_critic}"
        if own != own_actor:
            line += (f"; slime starts at the critic's rollout {own + 1} (placement_group.py:210-219) with the actor's "
                     f"iteration {own_actor}")  # fmt: skip
        return CriticPlan(own_critic, own_critic, line)
    if own is not None:  # only critic-only rollouts (--num-critic-only-steps) save the critic alone
        problem = (f"{own_critic} holds the critic's iteration {own} but {save_dir} no actor save: slime restarts "
                   f"this round at rollout 0 and would save over it; move {own_critic} aside to restart the round")  # fmt: skip
        return CriticPlan(own_critic, None, f"a real launch refuses: {problem}", problem=problem)
    if previous is not None and previous_critic is not None:
        return CriticPlan(own_critic, previous_critic,
                          f"hand-off: --load {previous_critic} (iteration {previous}) as weights only, fresh optimizer, "
                          f"saves to {own_critic}")  # fmt: skip
    why = f"{previous_critic} holds no {TRACKER_FILE}" if previous_critic else "the first round"
    return CriticPlan(own_critic, None,
                      f"fresh ({why}): slime builds the critic from --ref-load's weights with a new value head, "
                      f"saves to {own_critic}")  # fmt: skip


def resolved_roles(roles_config: str | Path, plan: CriticPlan) -> dict[str, Any]:
    """The role file `roles_config` with the plan's `save` (and `load`) on its critic entry.

    Raises ConfigError naming the file when slime would reject its shape, or when it already sets a
    key the launcher owns under SAVE_DIR.
    """
    source = str(roles_config)
    document = copy.deepcopy(load_yaml_file(roles_config))
    entries = document.get("megatron") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(source, ["needs a top-level 'megatron' list of role entries "
                                   "(slime's parse_megatron_role_args)"])  # fmt: skip
    critics = [entry for entry in entries if entry.get("role") == "critic"]
    if len(critics) > 1:
        raise ConfigError(source, [f"{len(critics)} entries with role: critic; slime takes at most one"])
    if not critics:
        critics.append({"name": "critic", "role": "critic", "overrides": {}})
        entries.append(critics[0])
    entry = critics[0]
    key = "args" if "args" in entry and "overrides" not in entry else "overrides"  # slime reads either
    overrides = entry.get(key) or {}
    if not isinstance(overrides, dict):
        raise ConfigError(source, [f"the critic entry's {key} must be a mapping"])
    taken = [name for name in _LAUNCHER_KEYS if name in overrides]
    if taken:
        raise ConfigError(source, [f"the critic entry sets {', '.join(taken)}: the launcher sets where the critic "
                                   "loads and saves under SAVE_DIR (docs/slime_handoff.md); remove it"])  # fmt: skip
    if plan.save is not None:
        overrides["save"] = plan.save
    if plan.load is not None:
        overrides["load"] = plan.load
    entry[key] = overrides
    return document

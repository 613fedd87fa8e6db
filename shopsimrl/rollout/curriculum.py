"""The skill curriculum: the arm and mask of a group as a pure function of (round seed, group key).

Every random choice is a counter-based uniform `u = blake2b(round_seed, group_key, label) / 2**64`:
no RNG state, so a retry, a resampled segment or an audit recomputes exactly the same arm and mask
from the metadata alone (docs/curriculum.md). Labels:

- `arm`: the group is skill-free when `u_arm < q`;
- `chunk:<logical_chunk_id>`: an assisted group includes the chunk when `u_chunk < rho(chunk)`.

Drawing per chunk id (not per position) means adding or deactivating a chunk never changes the
draws of the others. An assisted group whose draw included no chunk is `assisted_empty`.

`q` can follow a schedule over rollout steps (`ShopSimOptions.q.at(step)`); the q used is written
into each sample's metadata, so the draw stays reproducible when the schedule moves on.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict

from shopsimrl.config.options import ShopSimOptions
from shopsimrl.contract import Arm
from shopsimrl.errors import ConfigError
from shopsimrl.models.slime_saves import latest_iteration
from shopsimrl.skills.skillbank import Skillbank

# Attribute of slime's `args` holding the rollout step being generated (see `rollout_step`).
ROLLOUT_STEP_ATTR = "shopsim_rollout_step"
_SEPARATOR = "\x1f"  # cannot occur in a chunk id or a group key built by datasource.group_key


def uniform(round_seed: int, group_key: str, label: str) -> float:
    """A uniform number in [0, 1) determined only by its three inputs."""
    message = _SEPARATOR.join((str(int(round_seed)), group_key, label)).encode("utf-8")
    digest = hashlib.blake2b(message, digest_size=8, person=b"shopsim-curric").digest()
    return int.from_bytes(digest, "big") / 2**64


class Assignment(BaseModel):
    """The curriculum draw of one group; copied into every sibling's metadata."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    group_key: str
    arm: Arm
    mask: tuple[str, ...]  # included chunk ids, in skillbank order
    q: float
    rho: dict[str, float]  # active chunk id -> target rho


class Curriculum:
    """q schedule, per-chunk rho and the round seed, over one skillbank."""

    def __init__(self, skillbank: Skillbank, options: ShopSimOptions):
        unknown = sorted(set(options.rho) - set(skillbank.active_ids))
        if unknown:
            raise ConfigError(
                "shopsim.rho",
                [
                    f"shopsim.rho[{chunk_id!r}]: no active chunk with this id in the skillbank"
                    for chunk_id in unknown
                ],
            )
        self.skillbank = skillbank
        self.options = options
        self.round_seed = options.round_seed
        self.rho = {chunk_id: options.rho_for(chunk_id) for chunk_id in skillbank.active_ids}

    def q_at(self, rollout_step: int) -> float:
        return self.options.q.at(rollout_step)

    def assign(self, group_key: str, *, q: float) -> Assignment:
        """The arm and mask of a group. Pure: same (round seed, group key, q, rho) -> same result."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q={q} is outside [0, 1]")
        if uniform(self.round_seed, group_key, "arm") < q:
            return Assignment(group_key=group_key, arm=Arm.SKILL_FREE, mask=(), q=q, rho=self.rho)
        mask = tuple(
            chunk_id
            for chunk_id in self.skillbank.active_ids
            if uniform(self.round_seed, group_key, f"chunk:{chunk_id}") < self.rho[chunk_id]
        )
        arm = Arm.ASSISTED if mask else Arm.ASSISTED_EMPTY
        return Assignment(group_key=group_key, arm=arm, mask=mask, q=q, rho=self.rho)

    def full_skill(self, group_key: str, *, q: float) -> Assignment:
        """A diagnostic full-skill retry: every active chunk, whatever the draw said."""
        mask = tuple(self.skillbank.active_ids)
        arm = Arm.ASSISTED if mask else Arm.ASSISTED_EMPTY
        return Assignment(group_key=group_key, arm=arm, mask=mask, q=q, rho=self.rho)

    def skill_texts(self, assignment: Assignment) -> list[str]:
        """The included chunks' texts in skillbank order (what goes into the system prompt)."""
        return self.skillbank.texts_for(assignment.mask)


def rollout_step(args: Any) -> int:
    """The rollout step whose groups are being generated now, for the q schedule.

    slime's custom generate is not told the rollout id. The step is kept on `args` (one object per
    RolloutManager process): the local driver sets `args.shopsim_rollout_step` before each step;
    under slime it starts at `args.start_rollout_id` and `advance_rollout_step` moves it on once per
    finished training rollout (called by the all-samples hook).

    On a resume slime leaves `start_rollout_id` unset in the RolloutManager's copy of `args` (it is set
    on the driver's only after the actors loaded, slime/ray/placement_group.py:218), so the step is
    then what the actor resumes at: the iteration of `args.load`'s Megatron tracker + 1 (0 without one).
    """
    step = getattr(args, ROLLOUT_STEP_ATTR, None)
    if step is None:
        step = getattr(args, "start_rollout_id", None)
    if step is None:
        step = _resumed_rollout_id(getattr(args, "load", None))
    return int(step)


def _resumed_rollout_id(load: str | None) -> int:
    """The first rollout of a start from `load`: its tracker's iteration + 1 (slime's actor.py:107)."""
    if load is None:
        return 0
    iteration = latest_iteration(load)
    return 0 if iteration is None else iteration + 1


def advance_rollout_step(args: Any) -> int:
    """Mark one training rollout as finished; returns the new current step."""
    step = rollout_step(args) + 1
    setattr(args, ROLLOUT_STEP_ATTR, step)
    return step

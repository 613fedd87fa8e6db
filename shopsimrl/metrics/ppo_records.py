"""The metrics a PPO run must leave in its records, and a check of a run's rows against them.

A PPO run (`advantage_estimator: ppo`) logs, per rollout step, one row with slime's
`rollout/values|returns|advantages` and our spreads (`rollout/ppo/*_std`), one `train/critic-*` row
per critic optimizer step and one `train/*` row per actor optimizer step (critic-only rollouts have
none). `ppo_record_problems` names every required key that is missing or not a finite number, so a
run whose records lack one fails its smoke and its tests. Explained variance is not required: it is
undefined (absent) when every trained token has the same return up to float32 rounding (returns' std
<= 1e-3, metrics/ppo_spread.py), e.g. when every reward is equal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shopsimrl.metrics import names as m

CRITIC_KEY_PREFIX = "train/critic-"
REQUIRED_ROLLOUT_KEYS: tuple[str, ...] = (
    m.ROLLOUT_VALUES.name,
    m.ROLLOUT_RETURNS.name,
    m.ROLLOUT_ADVANTAGES.name,
    m.PPO_VALUES_STD.name,
    m.PPO_RETURNS_STD.name,
    m.PPO_ADVANTAGES_STD.name,
)
REQUIRED_CRITIC_KEYS: tuple[str, ...] = (
    m.TRAIN_CRITIC_VALUE_LOSS.name,
    m.TRAIN_CRITIC_VALUE_CLIPFRAC.name,
    m.TRAIN_CRITIC_GRAD_NORM.name,
)
REQUIRED_ACTOR_KEYS: tuple[str, ...] = (
    m.TRAIN_LOSS.name,
    m.TRAIN_PG_LOSS.name,
    m.TRAIN_PG_CLIPFRAC.name,
    m.TRAIN_PPO_KL.name,
    m.TRAIN_ENTROPY_LOSS.name,
    m.TRAIN_GRAD_NORM.name,
)


@dataclass(frozen=True)
class PpoRows:
    """A run's rows sorted by what logged them."""

    rollout_steps: list[Any]  # rollout/step of every rollout row (the one with perf/rollout_time)
    ppo_rollout_rows: list[Mapping[str, Any]]  # rows with rollout/step and a PPO rollout key
    critic_rows: list[Mapping[str, Any]]  # train/step rows with a train/critic-* key
    actor_rows: list[Mapping[str, Any]]  # the other train/step rows


def is_finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def split_rows(rows: Iterable[Mapping[str, Any]]) -> PpoRows:
    out = PpoRows([], [], [], [])
    for row in rows:
        if m.TRAIN_STEP.name in row:
            target = out.critic_rows if any(k.startswith(CRITIC_KEY_PREFIX) for k in row) else out.actor_rows
            target.append(row)
        elif m.ROLLOUT_STEP.name in row:
            if m.PERF_ROLLOUT_TIME.name in row:
                out.rollout_steps.append(row[m.ROLLOUT_STEP.name])
            if any(k in row for k in REQUIRED_ROLLOUT_KEYS):
                out.ppo_rollout_rows.append(row)
    return out


def _row_problems(kind: str, step_key: str, rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[str]:
    problems = []
    for row in rows:
        missing = [k for k in keys if k not in row]
        bad = [f"{k}={row[k]!r}" for k in keys if k in row and not is_finite_number(row[k])]
        where = f"{kind} row {step_key}={row.get(step_key)!r}"
        if missing:
            problems.append(f"{where}: missing {', '.join(missing)}")
        if bad:
            problems.append(f"{where}: not finite: {', '.join(bad)}")
    return problems


def rollout_problems(split: PpoRows) -> list[str]:
    """Rollout steps without a complete, finite PPO rollout row."""
    covered = {row[m.ROLLOUT_STEP.name] for row in split.ppo_rollout_rows}
    missing = [f"rollout/step={step!r}: no row with {', '.join(REQUIRED_ROLLOUT_KEYS)}"
               for step in split.rollout_steps if step not in covered]  # fmt: skip
    return missing + _row_problems("PPO rollout", m.ROLLOUT_STEP.name, split.ppo_rollout_rows, REQUIRED_ROLLOUT_KEYS)


def critic_problems(split: PpoRows) -> list[str]:
    """No critic step at all, or a critic step with a missing or non-finite key."""
    none = [] if split.critic_rows else [f"no critic optimizer step: no train/step row with {CRITIC_KEY_PREFIX}* keys"]
    return none + _row_problems("critic", m.TRAIN_STEP.name, split.critic_rows, REQUIRED_CRITIC_KEYS)


def actor_problems(split: PpoRows) -> list[str]:
    """Actor steps with a missing or non-finite key (critic-only rollouts have none, which is no problem)."""
    return _row_problems("actor", m.TRAIN_STEP.name, split.actor_rows, REQUIRED_ACTOR_KEYS)


def ppo_record_problems(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every required PPO key missing or non-finite in a run's rows; empty when the records are complete."""
    split = split_rows(rows)
    return rollout_problems(split) + critic_problems(split) + actor_problems(split)

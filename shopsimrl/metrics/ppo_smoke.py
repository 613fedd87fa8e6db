"""The PPO micro smoke's criteria and observations, one implementation for both backends.

`make train-smoke [RUNNER=local] ALGO=ppo`. Required criteria, each checked on the run's metric rows (the
local metrics.jsonl, or slime's job log read by ops/slime_log.py; keys of metrics/ppo_records.py):

| criterion                       | passes when                                                             |
| ------------------------------- | ----------------------------------------------------------------------- |
| ppo_values_returns_advantages   | every rollout step has finite rollout/values, returns, advantages and   |
|                                 | their rollout/ppo/*_std                                                 |
| ppo_actor_loss_finite           | every actor step's train/loss, pg_loss, pg_clipfrac, ppo_kl,           |
|                                 | entropy_loss and grad_norm are finite                                   |
| ppo_critic_loss_finite          | every critic step's train/critic-value_loss, value_clipfrac, grad_norm |
|                                 | are finite                                                              |
| ppo_actor_optimizer_steps       | at least MIN_OPTIMIZER_STEPS actor steps (train/* rows)                 |
| ppo_critic_optimizer_steps      | at least MIN_OPTIMIZER_STEPS critic steps (train/critic-* rows)         |

Observations sit beside the verdict and never decide it: the explained variance of each rollout and
the reward spread. An engineering pass says the PPO machinery produced finite numbers and stepped both
optimizers; a negative explained variance or a reward from a single task is not a failure, and a pass
is not evidence of a capability gain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shopsimrl.metrics import names as m
from shopsimrl.metrics.ppo_records import (
    REQUIRED_ACTOR_KEYS,
    REQUIRED_CRITIC_KEYS,
    REQUIRED_ROLLOUT_KEYS,
    actor_problems,
    critic_problems,
    rollout_problems,
    split_rows,
)

MIN_OPTIMIZER_STEPS = 2  # "two optimizer steps" each, actor and critic
ENGINEERING_NOTE = (
    "engineering pass is not capability gain: the criteria check that PPO's values, returns, advantages "
    "and both losses are finite and that both optimizers stepped; explained variance and reward spread "
    "are reported, not judged"
)


def ppo_criteria(rows: Sequence[Mapping[str, Any]], *, source: str = "metrics.jsonl") -> list[tuple[str, bool, str]]:
    """(name, passed, evidence) of every required PPO criterion; `source` names the record in evidence."""
    split = split_rows(rows)
    out = [
        finite_criterion("ppo_values_returns_advantages", rollout_problems(split), split.ppo_rollout_rows,
                         REQUIRED_ROLLOUT_KEYS, m.ROLLOUT_STEP.name, source),  # fmt: skip
        finite_criterion("ppo_actor_loss_finite", actor_problems(split), split.actor_rows, REQUIRED_ACTOR_KEYS[:2],
                         m.TRAIN_STEP.name, source),  # fmt: skip
        finite_criterion("ppo_critic_loss_finite", critic_problems(split), split.critic_rows,
                         REQUIRED_CRITIC_KEYS[:1], m.TRAIN_STEP.name, source),  # fmt: skip
    ]
    for name, kind_rows in (("ppo_actor_optimizer_steps", split.actor_rows),
                            ("ppo_critic_optimizer_steps", split.critic_rows)):  # fmt: skip
        steps = [row[m.TRAIN_STEP.name] for row in kind_rows]
        out.append((name, len(steps) >= MIN_OPTIMIZER_STEPS,
                    f"{len(steps)} step(s) (need >= {MIN_OPTIMIZER_STEPS}): train/step = {steps}"))  # fmt: skip
    return out


def finite_criterion(
    name: str,
    problems: list[str],
    rows: Sequence[Mapping[str, Any]],
    shown: Sequence[str],
    step_key: str,
    source: str = "metrics.jsonl",
) -> tuple[str, bool, str]:
    """Fails with the problems; passes with the `shown` values of every row as evidence (no row: fails)."""
    if problems:
        return name, False, "; ".join(problems)
    if not rows:
        return name, False, f"no row in {source}"
    values = [f"{step_key}={row.get(step_key)}: " + ", ".join(f"{k}={row[k]:.4g}" for k in shown) for row in rows]
    return name, True, " | ".join(values)


def ppo_observations(rows: Sequence[Mapping[str, Any]], in_group_reward_difference: bool) -> dict[str, Any]:
    """Explained variance and reward spread per rollout step, with the note that they decide nothing."""
    split = split_rows(rows)
    rollout_rows = [r for r in rows if m.PERF_ROLLOUT_TIME.name in r and m.TRAIN_STEP.name not in r]
    explained = {
        str(r[m.ROLLOUT_STEP.name]): r.get(m.PPO_EXPLAINED_VARIANCE.name) for r in split.ppo_rollout_rows
    }
    spread = {
        str(r[m.ROLLOUT_STEP.name]): {
            "returns_std": r.get(m.PPO_RETURNS_STD.name),
            "accepted_groups": next((x.get(m.TRAIN_GROUP_COUNT.name) for x in rollout_rows
                                     if x[m.ROLLOUT_STEP.name] == r[m.ROLLOUT_STEP.name]), None),  # fmt: skip
        }
        for r in split.ppo_rollout_rows
    }
    negative = [step for step, value in explained.items() if value is not None and value < 0]
    return {
        "explained_variance": explained,
        "explained_variance_negative_steps": negative,
        "reward_spread": spread,
        "in_group_reward_difference": in_group_reward_difference,
        "note": ENGINEERING_NOTE
        + ("; explained variance was undefined (null) where every trained token had the same return"
           if any(v is None for v in explained.values()) else ""),  # fmt: skip
    }

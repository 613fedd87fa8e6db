"""A deterministic history shaped like a four-round slime run's, for tests and the export benchmark.

Per rollout batch `r` slime logs five events (so 20 batches make 100 events per run):
the rollout manager's batch metrics, two optimizer updates (`train/step` = 2r and 2r + 1), the
trainer's own rollout data and the training perf metrics. Four rounds of 20 batches give
`rollout/step` 1-80 and `train/step` 2-161, as in a real four-round run. Some values are left out on purpose
(`omitted`), and eight zero-gradient updates are reproduced.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from shopsimrl.tracking.export import keys

SEED_ZERO_GRAD_ORDINALS = (66, 70, 82, 116, 140, 142, 156, 160)


def omitted_truncated_ratio(rollout_step: int) -> bool:
    return rollout_step % 7 == 0


def omitted_clip_fraction(train_step: int) -> bool:
    return train_step % 11 == 0


def update_values(train_step: int, updates_per_rollout: int = 2) -> dict[str, float]:
    ordinal = train_step - (updates_per_rollout - 1)
    values = {
        "train/loss": round(0.01 * ((train_step % 5) - 2), 6),
        "train/pg_loss": round(0.005 * ((train_step % 3) - 1), 6),
        keys.ENTROPY: round(0.2 - 0.0005 * ordinal, 6),
        keys.CLIP_FRACTION: round(0.0015 - 0.000008 * ordinal, 8),
        keys.PPO_KL: 0.0 if train_step % 2 == 0 else round(0.0001 * (train_step % 13), 6),
        keys.GRAD_NORM: 0.0 if ordinal in SEED_ZERO_GRAD_ORDINALS else round(2.5 - 0.01 * ordinal, 4),
        keys.LOGPROB_ABS_DIFF: round(0.01 + 0.0001 * (train_step % 4), 6),
    }
    if omitted_clip_fraction(train_step):
        del values[keys.CLIP_FRACTION]
    return values


def rollout_values(rollout_step: int) -> dict[str, float]:
    values = {
        keys.RAW_REWARD: round(0.3 + 0.005 * rollout_step, 6),
        keys.RESPONSE_LEN_MEAN: float(200 + (rollout_step * 37) % 120),
        keys.TRUNCATED_RATIO: round(0.1 + 0.002 * (rollout_step % 50), 6),
        keys.ROLLOUT_TIME: round(200.0 + (rollout_step * 13) % 60, 3),
    }
    if omitted_truncated_ratio(rollout_step):
        del values[keys.TRUNCATED_RATIO]
    return values


def seed_shaped_events(
    round_index: int, rollouts_per_round: int = 20, updates_per_rollout: int = 2
) -> Iterator[dict[str, Any]]:
    """The log events of one round, in slime's order."""
    first = round_index * rollouts_per_round + 1
    for rollout_step in range(first, first + rollouts_per_round):
        yield {"rollout/step": rollout_step, **rollout_values(rollout_step)}
        for step_id in range(updates_per_rollout):
            train_step = rollout_step * updates_per_rollout + step_id
            yield {"train/step": train_step, **update_values(train_step, updates_per_rollout)}
        yield {"rollout/step": rollout_step, "rollout/log_probs": round(-0.5 - 0.001 * rollout_step, 6)}
        yield {
            "rollout/step": rollout_step,
            keys.ACTOR_TOKENS_PER_S: round(13500.0 + (rollout_step % 9) * 5.0, 2),
            "perf/train_time": round(30.0 + rollout_step % 4, 2),
        }

"""The pure computation of every `rollout/shopsim/*` metric of one rollout step.

Inputs are plain data (group summaries, accepted group indices, drop counts, retry results, triage
counts), so the same function serves slime's hooks, the local backend and the tests. Each metric's
denominator is the one declared in `shopsimrl.metrics.names`; a rate whose denominator is 0 is left
out of the result rather than reported as 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shopsimrl.contract import Arm
from shopsimrl.metrics import names as m
from shopsimrl.metrics.groups import GroupSummary, TrajectorySummary


@dataclass(frozen=True)
class RetryOutcome:
    """A finished diagnostic full-skill retry, as the metrics see it."""

    source_group_index: int | None
    scorable: bool
    success: bool | None
    technical_error: bool


@dataclass(frozen=True)
class TriageCounts:
    """Triaged all-wrong groups of this round, and how many of them have a failure card."""

    all_wrong_groups: int
    with_failure_card: int


@dataclass(frozen=True)
class RolloutMetricsInput:
    completed_groups: Sequence[GroupSummary]  # every completed group of the step (retries excluded)
    accepted_group_indices: frozenset[int]  # groups that entered the trainer
    drop_counts: Mapping[str, int]  # really dropped groups per filter reason (slime's drop counters)
    q: float
    rho: Mapping[str, float]  # active chunk id -> target rho
    reward_key: str = "reward"
    retry_outcomes: Sequence[RetryOutcome] = ()
    triage: TriageCounts | None = None
    source_all_samples: bool = True
    technical_reason: str = "technical_error"
    zero_std_reason_prefix: str = "zero_std_"
    extra_chunk_ids: Iterable[str] = field(default_factory=tuple)


def _outcome_means(trajectories: Sequence[TrajectorySummary], keys: tuple[str, str, str]) -> dict[str, float]:
    scorable = [t for t in trajectories if t.scorable]
    if not scorable:
        return {}
    n = len(scorable)
    reward_key, strict_key, success_key = keys
    out: dict[str, float] = {}
    rewards = [t.reward for t in scorable if t.reward is not None]
    stricts = [t.strict_reward for t in scorable if t.strict_reward is not None]
    successes = [t.success for t in scorable if t.success is not None]
    # A scorable trajectory must carry all three; a missing one is a producer bug, not a 0.
    if len(rewards) != n or len(stricts) != n or len(successes) != n:
        bad = next(t for t in scorable if None in (t.reward, t.strict_reward, t.success))
        raise ValueError(
            f"scorable trajectory rollout_id={bad.rollout_id} lacks reward/strict_reward/success"
        )
    out[reward_key] = sum(rewards) / n
    out[strict_key] = sum(stricts) / n
    out[success_key] = sum(1 for s in successes if s) / n
    return out


def _ratio(out: dict[str, float], key: str, numerator: float, denominator: float) -> None:
    if denominator > 0:
        out[key] = numerator / denominator


def compute_shopsim_metrics(data: RolloutMetricsInput) -> dict[str, float]:
    """Every `rollout/shopsim/*` metric of one step, keyed by its declared name."""
    groups = [g for g in data.completed_groups if not g.is_retry]
    out: dict[str, float] = {m.Q.name: float(data.q)}
    out[m.SOURCE_ALL_SAMPLES.name] = 1.0 if data.source_all_samples else 0.0
    n_groups = len(groups)
    out[m.COMPLETED_GROUP_COUNT.name] = float(n_groups)

    trajectories = [t for g in groups for t in g.trajectories]
    out.update(
        _outcome_means(trajectories, (m.REWARD_MEAN.name, m.STRICT_REWARD_MEAN.name, m.SUCCESS_RATE.name))
    )
    _ratio(out, m.SCORED_RATE.name, sum(1 for t in trajectories if t.scorable), len(trajectories))

    # Curriculum: skill-free groups over all completed groups; inclusion over assisted(+empty) only.
    _ratio(out, m.SKILL_FREE_GROUP_RATE.name, sum(1 for g in groups if g.arm == Arm.SKILL_FREE), n_groups)
    assisted = [g for g in groups if g.arm in (Arm.ASSISTED, Arm.ASSISTED_EMPTY)]
    out[m.ASSISTED_GROUP_COUNT.name] = float(len(assisted))
    chunk_ids = list(dict.fromkeys([*data.rho, *data.extra_chunk_ids]))
    for chunk_id in chunk_ids:
        if chunk_id in data.rho:
            out[m.chunk_target_rho_key(chunk_id)] = float(data.rho[chunk_id])
        _ratio(
            out,
            m.chunk_inclusion_rate_key(chunk_id),
            sum(1 for g in assisted if chunk_id in g.mask),
            len(assisted),
        )

    _ratio(out, m.ALL_WRONG_GROUP_RATE.name, sum(1 for g in groups if g.all_wrong), n_groups)
    _ratio(
        out, m.ZERO_STD_GROUP_RATE.name, sum(1 for g in groups if g.is_zero_std(data.reward_key)), n_groups
    )

    # The two drop rates share the accepted denominator; each counts only its own drops.
    accepted = len(data.accepted_group_indices)
    zero_std_drops = sum(c for r, c in data.drop_counts.items() if r.startswith(data.zero_std_reason_prefix))
    technical_drops = data.drop_counts.get(data.technical_reason, 0)
    out[m.TECHNICAL_GROUP_DROP_COUNT.name] = float(technical_drops)
    _ratio(out, m.ZERO_STD_GROUP_DROP_RATE.name, zero_std_drops, accepted)
    _ratio(out, m.TECHNICAL_GROUP_DROP_RATE.name, technical_drops, accepted)

    # A group counts once whether its own trajectories or its diagnostic retry hit the error.
    error_groups = {g.group_index for g in groups if g.has_technical_error}
    error_groups |= {
        r.source_group_index if r.source_group_index is not None else f"retry-{i}"
        for i, r in enumerate(data.retry_outcomes)
        if r.technical_error
    }
    _ratio(out, m.RUNTIME_ERROR_GROUP_RATE.name, len(error_groups), n_groups)

    scorable_retries = [r for r in data.retry_outcomes if r.scorable]
    _ratio(
        out,
        m.FULL_SKILL_RETRY_SUCCESS_RATE.name,
        sum(1 for r in scorable_retries if r.success),
        len(scorable_retries),
    )

    if data.triage is not None:
        pending = data.triage.all_wrong_groups - data.triage.with_failure_card
        _ratio(out, m.PENDING_ANALYSIS_RATE.name, pending, data.triage.all_wrong_groups)

    accepted_groups = [g for g in groups if g.group_index in data.accepted_group_indices]
    out[m.TRAIN_GROUP_COUNT.name] = float(len(accepted_groups))
    out.update(
        _outcome_means(
            [t for g in accepted_groups for t in g.trajectories],
            (m.TRAIN_REWARD_MEAN.name, m.TRAIN_STRICT_REWARD_MEAN.name, m.TRAIN_SUCCESS_RATE.name),
        )
    )
    return out

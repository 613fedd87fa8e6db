"""Estimation and selection: OLS of the paired deltas on the K mask indicators (statsmodels).

Model (docs/gate.md, "Estimator"): for pair p of task t,

    y_a,p - y_b,p = b0 + sum_k beta_k * d_pk + e_p,      d_pk = m_a,pk - m_b,pk

The task and the sampling seed are the same in both episodes of a pair, so the task's difficulty
and the shared randomness cancel in the delta. beta_k is candidate k's effect on the outcome
averaged over the random background of the other candidates (interactions average out under the
balanced 1/2 design). Standard errors are cluster-robust by task (several replicates of one task
are not independent), with t inference on (tasks - 1) degrees of freedom.

Selection rule, with Holm's step-down correction across the K candidates for each family, stated
on the reported (Holm-adjusted) interval [ci_low, ci_high] so that the interval and the decision
cannot disagree:

* `selected` <=> ci_low > 0: the one-sided test of H0 beta_k <= 0 rejects (Holm at alpha);
* `rejected` <=> not selected and ci_high < min_effect: the one-sided test of H0 beta_k >= min_effect
  rejects (Holm): credibly worse than the smallest effect worth keeping (harmful ones included);
* `insufficient`: neither (or the data cannot identify beta_k): more pairs are needed.

Each bound inverts Holm's step-down at the candidate's own level alpha / m_k (`holm_divisors`), so it
also carries the step-down's stopping rule: a candidate whose own test would pass but that Holm never
reaches (an earlier step failed) gets ci_low <= 0. The unadjusted (1 - 2 alpha) interval is reported
beside it as `unadjusted_ci_low` / `unadjusted_ci_high` and decides nothing.

    effects = estimate_effects(observations, candidates, alpha=0.05, min_effect=0.10)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import numpy as np

# Cluster-robust standard errors are too small with few clusters (Cameron & Miller 2015): below this
# many tasks with a scored pair the gate estimates nothing and decides nothing.
MIN_TASKS = 20


class Status(StrEnum):
    SELECTED = "selected"
    REJECTED = "rejected"
    INSUFFICIENT = "insufficient"


@dataclass(frozen=True)
class PairObservation:
    """One pair whose two episodes were both scored."""

    task_id: str
    indicators: tuple[int, ...]  # d_k per candidate
    y_a: float
    y_b: float

    @property
    def delta(self) -> float:
        return self.y_a - self.y_b


@dataclass(frozen=True)
class Effect:
    intervention_id: str
    coefficient: float | None
    se: float | None
    ci_low: float | None  # Holm-adjusted lower bound: selected <=> ci_low > 0
    ci_high: float | None  # Holm-adjusted upper bound: rejected <=> not selected and ci_high < min_effect
    unadjusted_ci_low: float | None  # two-sided (1 - 2 alpha) interval, not adjusted for K: decides nothing
    unadjusted_ci_high: float | None
    p_benefit: float | None  # one-sided, H0: beta <= 0
    p_benefit_adjusted: float | None  # Holm across the K candidates
    p_below_min_effect: float | None  # one-sided, H0: beta >= min_effect
    p_below_min_effect_adjusted: float | None
    status: Status
    reason: str
    rank: int  # 1 = largest coefficient; candidates without an estimate rank last, in pool order

    def to_json(self) -> dict[str, Any]:
        raw = asdict(self)
        raw["status"] = self.status.value
        return raw


@dataclass(frozen=True)
class Estimate:
    effects: tuple[Effect, ...]
    pairs: int
    tasks: int
    intercept: float | None
    df: int | None
    alpha: float
    min_effect: float  # the rejection bound this outcome was decided against

    def to_json(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "tasks": self.tasks,
            "intercept": self.intercept,
            "df": self.df,
            "alpha": self.alpha,
            "min_effect": self.min_effect,
            "effects": [effect.to_json() for effect in self.effects],
        }


def estimate_effects(
    observations: Sequence[PairObservation],
    candidates: Sequence[str],
    *,
    alpha: float,
    min_effect: float,
) -> Estimate:
    """Fit the model on `observations` (in design order, for byte-identical results) and decide."""
    k = len(candidates)
    tasks = sorted({obs.task_id for obs in observations})

    def undecided(reason: str) -> Estimate:
        return Estimate(_undecided(candidates, reason), len(observations), len(tasks), None, None, alpha, min_effect)

    if k == 0:
        return undecided("")
    if len(tasks) < MIN_TASKS or len(observations) <= k + 1:
        reason = (
            f"{len(observations)} scored pairs from {len(tasks)} tasks: too few to estimate {k} effects "
            f"(clustered standard errors need at least {MIN_TASKS} tasks)"
        )
        return undecided(reason)

    y = np.array([obs.delta for obs in observations], dtype=np.float64)
    d = np.array([obs.indicators for obs in observations], dtype=np.float64).reshape(len(observations), k)
    cluster_of = {task: index for index, task in enumerate(tasks)}
    groups = np.array([cluster_of[obs.task_id] for obs in observations])
    usable = [j for j in range(k) if np.ptp(d[:, j]) > 0]
    reasons = {j: "its indicator never varied across the scored pairs" for j in range(k) if j not in usable}
    x = np.column_stack([np.ones(len(y)), d[:, usable]])
    if np.linalg.matrix_rank(x) < x.shape[1]:
        reason = "the indicators of the scored pairs are collinear (design too small)"
        return undecided(reason)
    if np.ptp(y) == 0:
        reason = f"every paired delta is {y[0]:g}: no variation to estimate from"
        return undecided(reason)

    import statsmodels.api as sm
    from scipy import stats
    from statsmodels.stats.multitest import multipletests

    fit = sm.OLS(y, x).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    df = int(fit.df_resid_inference)  # tasks - 1: statsmodels' t degrees of freedom for clustered errors
    coef = {j: float(fit.params[i + 1]) for i, j in enumerate(usable)}
    se = {j: float(fit.bse[i + 1]) for i, j in enumerate(usable)}
    ci = fit.conf_int(alpha=2 * alpha)
    bounds = {j: (float(ci[i + 1][0]), float(ci[i + 1][1])) for i, j in enumerate(usable)}
    p_benefit: dict[int, float] = {}
    p_below: dict[int, float] = {}
    for j in usable:
        if not (se[j] > 0 and math.isfinite(se[j])):
            reasons[j] = "its standard error is zero or undefined"
            continue
        p_benefit[j] = float(stats.t.sf(coef[j] / se[j], df))
        p_below[j] = float(stats.t.cdf((coef[j] - min_effect) / se[j], df))
    # Holm over all K candidates: one without a p-value counts as p = 1 (it never rejects, and the
    # family size stays K, so an unidentified candidate cannot loosen the others' thresholds).
    benefit_adj = _holm([p_benefit.get(j, 1.0) for j in range(k)], alpha, multipletests)
    below_adj = _holm([p_below.get(j, 1.0) for j in range(k)], alpha, multipletests)
    critical = [0.0] + [float(stats.t.isf(alpha / m, df)) for m in range(1, k + 1)]  # one-sided, level alpha/m

    def low(j: int, m: int) -> float:
        return coef[j] - se[j] * critical[m]

    def high(j: int, m: int) -> float:
        return coef[j] + se[j] * critical[m]

    # The decisions are read off the very numbers that are reported, so they agree exactly.
    # Holm's order in each family: the largest t statistic (smallest p) first.
    tested = sorted(p_benefit, key=lambda j: (-coef[j] / se[j], j))
    below = sorted(p_below, key=lambda j: (-(min_effect - coef[j]) / se[j], j))
    low_divisor = holm_divisors(tested, k, lambda j, m: low(j, m) > 0)
    high_divisor = holm_divisors(below, k, lambda j, m: high(j, m) < min_effect)
    ci_low = {j: low(j, low_divisor[j]) for j in tested}
    ci_high = {j: high(j, high_divisor[j]) for j in tested}

    order = sorted(range(k), key=lambda j: (j not in coef, -coef.get(j, 0.0), j))
    rank = {j: position + 1 for position, j in enumerate(order)}
    effects = []
    for j, intervention_id in enumerate(candidates):
        if j in ci_low and ci_low[j] > 0:
            status, reason = Status.SELECTED, (
                f"Holm-adjusted lower bound {ci_low[j]:+.4g} > 0 (adjusted one-sided p = {benefit_adj[j]:.4g}, "
                f"alpha {alpha:g})"
            )
        elif j in ci_high and ci_high[j] < min_effect:
            status, reason = Status.REJECTED, (
                f"Holm-adjusted upper bound {ci_high[j]:+.4g} < min_effect {min_effect:g} (adjusted one-sided "
                f"p = {below_adj[j]:.4g}, alpha {alpha:g})"
            )
        elif j in reasons:
            status, reason = Status.INSUFFICIENT, reasons[j]
        else:
            status, reason = Status.INSUFFICIENT, "neither a benefit nor an effect below min_effect is established"
        effects.append(
            Effect(
                intervention_id=intervention_id,
                coefficient=coef.get(j),
                se=se.get(j),
                ci_low=ci_low.get(j),
                ci_high=ci_high.get(j),
                unadjusted_ci_low=bounds[j][0] if j in bounds else None,
                unadjusted_ci_high=bounds[j][1] if j in bounds else None,
                p_benefit=p_benefit.get(j),
                p_benefit_adjusted=benefit_adj[j] if j in p_benefit else None,
                p_below_min_effect=p_below.get(j),
                p_below_min_effect_adjusted=below_adj[j] if j in p_below else None,
                status=status,
                reason=reason,
                rank=rank[j],
            )
        )
    return Estimate(tuple(effects), len(observations), len(tasks), float(fit.params[0]), df, alpha, min_effect)


def holm_divisors(order: Sequence[int], k: int, clears: Callable[[int, int], bool]) -> dict[int, int]:
    """Each candidate's Holm level as a divisor m (its test runs at alpha / m), stopping rule included.

    Holm tests `order` (most significant first) at alpha / k, alpha / (k - 1), ... and stops at the
    first test that fails; `clears(j, m)` says whether candidate j's test passes at alpha / m. Leave
    candidate i out and let s_i be how many of the others the step-down passes before its first
    failure: Holm rejects i exactly when i's own test passes at alpha / (k - s_i), so i's bound at
    that level crosses its threshold exactly when Holm decides. Why, with t = i's position in the
    full order: if t <= s_i, the other sorted right after i passed at alpha / (k - t + 1) <=
    alpha / (k - s_i), so i (at least as significant) passes both and Holm rejects it; if
    t = s_i + 1, Holm tests i at exactly alpha / (k - s_i); if t > s_i + 1, the other at position
    s_i + 1 fails at alpha / (k - s_i), Holm stops before i, and i (less significant) fails that
    level too. Candidates not in `order` count as never passing (p = 1) but still count in k.
    """
    divisors = {}
    for i in order:
        passed = 0
        for j in order:
            if j == i:
                continue
            if not clears(j, k - passed):
                break
            passed += 1
        divisors[i] = k - passed
    return divisors


def _holm(pvalues: list[float], alpha: float, multipletests: Any) -> list[float]:
    """Holm-adjusted p-values, reported beside the bounds (the bounds decide)."""
    _, adjusted, _, _ = multipletests(pvalues, alpha=alpha, method="holm")
    return [float(p) for p in adjusted]


def _undecided(candidates: Sequence[str], reason: str) -> tuple[Effect, ...]:
    return tuple(
        Effect(c, None, None, None, None, None, None, None, None, None, None, Status.INSUFFICIENT, reason, position + 1)
        for position, c in enumerate(candidates)
    )

"""Intervals and tests for evaluation outcomes, honest about episodes of one task being correlated.

* `wilson`: the Wilson score interval of a success rate, treating episodes as independent draws.
* `cluster_bootstrap`: a percentile interval of a mean from resampling *tasks* with replacement,
  keeping each task's episodes together (several seeds of one task are not independent evidence).
* `paired_difference`: after - before on the same episodes: the mean difference, its task-cluster
  bootstrap interval, and a two-sided sign-flip permutation test on the per-task mean differences
  (under "no effect" each task's difference is as likely to have either sign).

Every resampling takes a seed, so the same inputs give the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from statsmodels.stats.proportion import proportion_confint

CONFIDENCE = 0.95
_PERMUTATIONS = 20_000  # Monte Carlo sign flips when 2**tasks is larger than this
_EXACT_UP_TO = 14  # tasks with a non-zero difference: enumerate every sign pattern up to 2**14


def wilson(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    if n <= 0:
        return None
    low, high = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
    return float(low), float(high)


def _task_means(values_by_task: Mapping[str, Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    sums = np.array([float(np.sum(v)) for v in values_by_task.values()])
    counts = np.array([len(v) for v in values_by_task.values()], dtype=float)
    return sums, counts


def cluster_bootstrap(values_by_task: Mapping[str, Sequence[float]], *, samples: int, seed: int,
                      confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Percentile interval of the episode mean, resampling tasks (clusters) with replacement."""
    sums, counts = _task_means({k: v for k, v in values_by_task.items() if len(v)})
    if len(sums) == 0:
        return None
    rng = np.random.Generator(np.random.PCG64(seed))
    picks = rng.integers(0, len(sums), size=(samples, len(sums)))
    means = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


@dataclass(frozen=True)
class PairedDifference:
    before: float
    after: float
    difference: float  # after - before, over the episodes both evaluations scored
    ci: tuple[float, float] | None
    p_value: float | None  # two-sided; None without any task
    episodes: int
    tasks: int
    exact: bool  # every sign pattern enumerated (else Monte Carlo with a fixed seed)


def paired_difference(pairs_by_task: Mapping[str, Sequence[tuple[float, float]]], *, samples: int, seed: int,
                      confidence: float = CONFIDENCE) -> PairedDifference:
    """`pairs_by_task`: task -> [(before, after)] for every episode scored in both evaluations."""
    tasks = {task: pairs for task, pairs in pairs_by_task.items() if pairs}
    episodes = sum(len(pairs) for pairs in tasks.values())
    if not tasks:
        return PairedDifference(float("nan"), float("nan"), float("nan"), None, None, 0, 0, True)
    before = float(np.mean([b for pairs in tasks.values() for b, _ in pairs]))
    after = float(np.mean([a for pairs in tasks.values() for _, a in pairs]))
    ci = cluster_bootstrap({t: [a - b for b, a in pairs] for t, pairs in tasks.items()},
                           samples=samples, seed=seed, confidence=confidence)
    per_task = np.array([np.mean([a - b for b, a in pairs]) for pairs in tasks.values()])
    p_value, exact = _sign_flip_p(per_task, seed)
    return PairedDifference(before, after, after - before, ci, p_value, episodes, len(tasks), exact)


def _sign_flip_p(differences: np.ndarray, seed: int) -> tuple[float, bool]:
    """Two-sided p of |mean| under random signs; tasks with a zero difference carry no sign."""
    nonzero = differences[np.abs(differences) > 1e-12]  # a difference of means of 0/1 and [0,1] values
    if len(nonzero) == 0:
        return 1.0, True
    observed = abs(nonzero.sum())
    if len(nonzero) <= _EXACT_UP_TO:
        patterns = ((np.arange(2 ** len(nonzero))[:, None] >> np.arange(len(nonzero))) & 1) * 2 - 1
        stats = np.abs(patterns @ nonzero)
        return float(np.mean(stats >= observed - 1e-12)), True
    rng = np.random.Generator(np.random.PCG64(seed))
    signs = rng.choice(np.array([-1.0, 1.0]), size=(_PERMUTATIONS, len(nonzero)))
    stats = np.abs(signs @ nonzero)
    # The observed sign pattern counts as one of the permutations (the p-value is never 0).
    return float((np.sum(stats >= observed - 1e-12) + 1) / (_PERMUTATIONS + 1)), False

"""The gate's budget from K: the fewest pairs whose power reaches the target (docs/gate.md, "Budget").

A candidate's coefficient, estimated from N pairs on n = min(N, tasks) distinct tasks, has under the
planning outcome model

    SE^2 = pair_variance / (N * Var d) + effect_sd^2 / n

* `pair_variance` 0.5: a paired delta of two independent 0/1 outcomes has variance
  p_a(1 - p_a) + p_b(1 - p_b), at most 0.5 (every task at 50%: bench/bench_gate.py's `half`). The
  typical value is lower (0.4 for base success Beta(2, 2)), but a budget planned for the typical case
  measured power 0.74-0.79 in the bench's noisier models, so the budget is planned for the ceiling;
* `Var d`: 1 for the fold-over (`complement`, d = +-1), 1/4 for `bare` (d = 1/0);
* `effect_sd` 0.14: a candidate's effect varies across tasks with this standard deviation (0.14: an
  effect of +0.10 on average that acts on 40% of the tasks, the bench's `some`); the tasks are a sample
  of those the next round meets, so this term does not shrink with replicates.

Power is that of the first Holm step (level alpha / K: the hardest test a lone helpful candidate
faces) of the sequential test the looks, the spending rule and both futility rules define, at an
effect of `min_effect`; a fixed gate is the one-look case.

    pairs_for_power(candidates=4, tasks=200, pairing="complement", alpha=0.025, min_effect=0.10,
                    looks=5, rho=2.0, futility=0.4, futility_trend=0.05)   # 764
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from shopsimrl.gate.config import DesignConfig, Pairing
from shopsimrl.gate.estimate import MIN_TASKS
from shopsimrl.gate.sequential import (
    crossing_probability,
    futility_bounds,
    higher_bounds,
    nominal_levels,
    trend_futility_bounds,
)

MAX_REPLICATES = 64  # a budget above tasks x 64 pairs is refused rather than planned
TARGET_POWER = 0.8


@dataclass(frozen=True)
class OutcomeModel:
    """The outcome model the budget is planned for (module docstring)."""

    pair_variance: float = 0.5
    effect_sd: float = 0.14


PLANNING = OutcomeModel()


def standard_error(*, pairs: int, tasks: int, pairing: Pairing | str, model: OutcomeModel = PLANNING) -> float:
    """SE of one candidate's coefficient from `pairs` pairs on min(pairs, tasks) tasks."""
    var_d = 1.0 if Pairing(pairing) is Pairing.COMPLEMENT else 0.25
    return math.sqrt(model.pair_variance / (pairs * var_d) + model.effect_sd**2 / min(pairs, tasks))


def selection_power(*, pairs: int, candidates: int, tasks: int, pairing: Pairing | str, alpha: float,
                    min_effect: float, looks: int, rho: float, futility: float, futility_trend: float = 0.0,
                    model: OutcomeModel = PLANNING) -> float:
    """Power to select a candidate whose effect is `min_effect`, at the first Holm step (level alpha / K),
    with both futility rules stopping the path (sequential.py)."""
    fractions = tuple(j / looks for j in range(1, looks + 1))  # the looks' fractions, up to rounding of pairs
    levels = _levels(fractions, alpha / max(1, candidates), rho)
    drift = min_effect / standard_error(pairs=pairs, tasks=tasks, pairing=pairing, model=model)
    design = futility_bounds(fractions, levels[-1], drift, futility) if futility > 0 else [None] * looks
    bounds = higher_bounds(design, trend_futility_bounds(fractions, levels[-1], futility_trend))
    return crossing_probability(fractions, levels, drift, bounds)


@lru_cache(maxsize=256)  # a pure function, asked once per gate (and per simulated gate by the benchmark)
def pairs_for_power(*, candidates: int, tasks: int, pairing: Pairing | str, alpha: float, min_effect: float,
                    looks: int, rho: float, futility: float, futility_trend: float = 0.0,
                    target: float = TARGET_POWER, model: OutcomeModel = PLANNING) -> int:
    """The fewest pairs whose `selection_power` reaches `target` (bisection; power grows with pairs).

    Raises ValueError when tasks x MAX_REPLICATES pairs do not (few tasks and the effect_sd floor)."""

    def enough(pairs: int) -> bool:
        return selection_power(pairs=pairs, candidates=candidates, tasks=tasks, pairing=pairing, alpha=alpha,
                               min_effect=min_effect, looks=looks, rho=rho, futility=futility,
                               futility_trend=futility_trend, model=model) >= target

    low, high = MIN_TASKS, tasks * MAX_REPLICATES  # below MIN_TASKS pairs the estimator decides nothing
    if not enough(high):
        raise ValueError(
            f"no budget reaches power {target:g} at +{min_effect:g} for K={candidates} with {tasks} tasks "
            f"(even {MAX_REPLICATES} replicates): the task-to-task spread of an effect needs more tasks"
        )
    if enough(low):
        return low
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def planned_pairs(design: DesignConfig, *, candidates: int, tasks: int) -> int:
    """The pairs a gate plans: tasks x replicates, or with `replicates: power` the fewest pairs with power
    0.8 for K = `candidates` (`pairs_for_power`), rounded up to whole replicates for a fixed gate (looks 1)."""
    if design.replicates != "power":
        return tasks * design.replicates
    if candidates == 0 or tasks == 0:
        return 0
    pairs = pairs_for_power(candidates=candidates, tasks=tasks, pairing=design.pairing, alpha=design.alpha,
                            min_effect=design.min_effect_for(design.outcome), looks=design.looks,
                            rho=design.spending_rho, futility=design.futility, futility_trend=design.futility_trend)
    return pairs if design.looks > 1 else tasks * math.ceil(pairs / tasks)


@lru_cache(maxsize=64)
def _levels(fractions: tuple[float, ...], alpha: float, rho: float) -> tuple[float, ...]:
    return tuple(nominal_levels(fractions, alpha, rho))

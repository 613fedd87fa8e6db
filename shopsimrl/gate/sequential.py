"""The sequential gate: interim analyses at fixed points of the design order, alpha spent by a rule.

A sequential design lists its pairs replicate by replicate (every task's first replicate, then every
task's second, ...; `build_design(order="replicate")`) and analyses the first `n_j` pairs at look
j = 1..J, `n_j = floor(j N / J)` (the last look is the whole plan). Every look runs the gate's own
estimate (`estimate_effects`: clustered OLS, Holm across the K candidates, the selection rule) at
that look's alpha. The gate stops at the first look at which every candidate is `selected`,
`rejected` or futile (`decide_look`), and writes that look's estimate. A look depends only on the
final evaluations of its pairs, so a resumed gate takes the same decisions.

Alpha spending (Lan & DeMets 1983; power family, Kim & DeMets 1987): a single one-sided test of total
level a spends `a * t**rho` by information fraction t (rho = 1 is close to Pocock's boundaries,
rho = 3 to O'Brien-Fleming's). `nominal_levels` turns that into the nominal one-sided level of each
look for a statistic with independent increments (the canonical joint distribution; Jennison &
Turnbull 2000, ch. 19: recursive numerical integration on a fixed grid, so the levels are a
deterministic function of (fractions, a, rho)).

Holm with K candidates: each candidate gets its own sequential test at level alpha / K, and a look
passes `K * nominal(alpha / K)` to `estimate_effects` as its alpha, whose first Holm step then
compares p with `nominal(alpha / K)`. Why the family-wise error stays at alpha over all looks: with
m true nulls, the first true null Holm rejects at look j has p <= alpha_j / m, and
`(K / m) * nominal_j(alpha / K) <= nominal_j(alpha / m)` (a nominal level grows at least linearly
with the total level; tests/gate/test_sequential.py checks it), so some true null is rejected at
some look with probability <= m * alpha / m. The same alpha serves the `rejected` family
(H0: beta >= min_effect).

Futility (non-binding): an `insufficient` candidate no longer holds the gate open when

* its conditional power under the design effect (`conditional_power`: the chance to clear the last
  look's first Holm step if its effect from here on were `min_effect`) is below `futility`, or
* from look `TREND_FROM_LOOK` on, its conditional power under its current estimate
  (`trend_conditional_power`: stochastic curtailment on the observed trend) is below the look's
  `trend_futility` (`DesignConfig.futility_trend`).

Either rule decides nothing (the candidate stays `insufficient`, its reason says why the gate
stopped), so neither can raise false selection; both cost power, which the budget (power.py)
accounts for exactly: each rule is a lower bound on the score at each look (`futility_bounds`,
`trend_futility_bounds`), and the power is the crossing probability with the higher of the two.

    plan = look_plan(pairs=627, looks=5, alpha=0.025, rho=2.0, candidates=4)
    plan[0]   # Look(index=1, pairs=125, fraction=0.199..., alpha=0.0009936, trend_futility=0.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from shopsimrl.gate.estimate import Estimate, Status

_GRID = 801  # points of the integration grid per look: nominal levels within 3e-5 (relative) of a 2x finer grid
_TAIL = 9.0  # the continuation region is cut at 9 standard deviations below the mean (mass < 1e-18)
# The trend rule waits for look 2: look 1 sees each task once, and an estimate that noisy stops too many
# helpful candidates (from look 1 it cost more budget than it saved, docs/gate.md "Sequential gate").
TREND_FROM_LOOK = 2


@dataclass(frozen=True)
class Look:
    index: int  # 1-based
    pairs: int  # the look analyses the first `pairs` pairs of the design order
    fraction: float  # pairs / planned pairs (the information fraction)
    alpha: float  # what estimate_effects receives at this look (Holm inside)
    # The trend rule's threshold at this look (0 = not applied here). The plan carries it, so the rule is
    # pre-registered with the looks and a resumed gate applies it at the same looks.
    trend_futility: float = 0.0

    def describe(self, looks: int) -> str:
        return f"look {self.index} of {looks} ({self.pairs} pairs, alpha {self.alpha:.4g})"


def spent(fraction: float, alpha: float, rho: float) -> float:
    """Cumulative alpha spent by information fraction t: alpha * t**rho."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction {fraction}: must lie in [0, 1]")
    return alpha * fraction**rho


def look_pairs(pairs: int, looks: int) -> list[int]:
    """The pair counts of the looks: floor(j * pairs / looks), the last one the whole plan."""
    if looks < 1:
        raise ValueError(f"looks={looks}: at least 1")
    counts = [(j * pairs) // looks for j in range(1, looks + 1)]
    return [n for i, n in enumerate(counts) if n > 0 and (i == 0 or n > counts[i - 1])]


def nominal_levels(fractions: Sequence[float], alpha: float, rho: float) -> list[float]:
    """One-sided nominal level of each look of a single test of total level `alpha` (spending alpha * t**rho).

    The statistic is a Brownian motion in information (Z_j = S_j / sqrt(t_j), S with independent
    increments); look j rejects when Z_j >= c_j, and c_j solves P0(first crossing at j) =
    spent(t_j) - spent(t_{j-1}). Returns 1 - Phi(c_j) for every look.
    """
    from scipy import optimize, special

    _check_fractions(fractions)
    levels: list[float] = []
    grid = weights = density = None  # the sub-density of S_{j-1} on the continuation region
    previous_t = previous_spent = 0.0
    for t in fractions:
        target = spent(t, alpha, rho) - previous_spent
        if grid is None:
            c = -float(special.ndtri(target))
        else:
            step = math.sqrt(t - previous_t)
            mass = weights * density

            def excess(c: float, mass: np.ndarray = mass, grid: np.ndarray = grid, step: float = step,
                       root_t: float = math.sqrt(t), target: float = target) -> float:
                return float(np.dot(mass, special.ndtr((grid - c * root_t) / step))) - target

            c = float(optimize.brentq(excess, -10.0, 40.0, xtol=1e-12, rtol=1e-12, maxiter=200))
        levels.append(float(special.ndtr(-c)))
        grid, weights, density = _advance(grid, weights, density, previous_t, t, c)
        previous_t, previous_spent = t, spent(t, alpha, rho)
    return levels


def crossing_probability(fractions: Sequence[float], levels: Sequence[float], drift: float,
                         futility: Sequence[float | None] | None = None) -> float:
    """P(Z_j >= c_j at some look before the path leaves the continuation region), when E[Z at fraction 1] =
    drift: the power of one sequential test. `futility[j]` (score scale S_j = sqrt(t_j) Z_j, None = no
    bound) stops the path without a rejection when S_j falls below it."""
    from scipy import special

    _check_fractions(fractions)
    bounds = list(futility) if futility is not None else [None] * len(fractions)
    grid = weights = density = None
    previous_t = 0.0
    crossed = 0.0
    for t, level, low in zip(fractions, levels, bounds, strict=True):
        c = -float(special.ndtri(level))
        bound = c * math.sqrt(t)
        if grid is None:
            crossed += float(special.ndtr((drift * t - bound) / math.sqrt(t)))
        else:
            step = math.sqrt(t - previous_t)
            crossed += float(np.dot(weights * density, special.ndtr((grid + drift * (t - previous_t) - bound) / step)))
        grid, weights, density = _advance(grid, weights, density, previous_t, t, c, drift, low)
        previous_t = t
    return crossed


def futility_bounds(fractions: Sequence[float], final_level: float, drift: float, gamma: float) -> list[float | None]:
    """Score-scale bounds below which the conditional power is < gamma (None at the last look).

    Conditional power at fraction t, if the effect from here on is the design's (drift = its Z at
    fraction 1): P(S_1 >= c_J | S_t) = Phi((S_t + (1 - t) drift - c_J) / sqrt(1 - t)), c_J the last
    look's critical value; below `c_J - (1 - t) drift + sqrt(1 - t) Phi^-1(gamma)` it is < gamma."""
    from scipy import stats

    c_final = float(stats.norm.isf(final_level))
    z_gamma = float(stats.norm.ppf(gamma))
    return [None if t >= 1.0 else c_final - (1 - t) * drift + math.sqrt(1 - t) * z_gamma for t in fractions]


def trend_futility_bounds(fractions: Sequence[float], final_level: float, gamma: float) -> list[float | None]:
    """Score-scale bounds below which the conditional power under the current trend is < gamma; None where
    the rule does not apply (before look TREND_FROM_LOOK, at the last look, gamma 0).

    Under the trend the drift is estimated by S_t / t, so P(S_1 >= c_J | S_t) = Phi((S_t / t - c_J) / sqrt(1 - t)),
    below gamma exactly when S_t < t (c_J + sqrt(1 - t) Phi^-1(gamma)): free of the design's drift."""
    from scipy import stats

    if gamma <= 0:
        return [None] * len(fractions)
    c_final = float(stats.norm.isf(final_level))
    z_gamma = float(stats.norm.ppf(gamma))
    return [None if t >= 1.0 or j + 1 < TREND_FROM_LOOK else t * (c_final + math.sqrt(1 - t) * z_gamma)
            for j, t in enumerate(fractions)]


def higher_bounds(*bounds: Sequence[float | None]) -> list[float | None]:
    """Look by look, the higher of several score-scale futility bounds (a path stops if any rule stops it)."""
    merged = []
    for at_look in zip(*bounds, strict=True):
        present = [b for b in at_look if b is not None]
        merged.append(max(present) if present else None)
    return merged


def trend_conditional_power(*, coefficient: float, se: float, fraction: float, final_level: float) -> float:
    """The chance that a candidate reaches the last look's first Holm step if its effect from here on is its
    current estimate (stochastic curtailment on the trend); the final SE projected as in `conditional_power`."""
    from scipy import stats

    if fraction >= 1.0:
        raise ValueError("no conditional power at the last look")
    drift = coefficient / (se * math.sqrt(fraction))  # the estimated Z at fraction 1
    c_final = float(stats.norm.isf(final_level))
    return float(stats.norm.cdf((drift - c_final) / math.sqrt(1 - fraction)))


def conditional_power(*, coefficient: float, se: float, fraction: float, final_level: float, min_effect: float) -> float:
    """The chance that a candidate reaches the last look's first Holm step if its effect from here on is
    `min_effect` (the design effect), from its estimate at a look (docs/gate.md, "Sequential gate").

    The final standard error is projected as se * sqrt(fraction) (the SE shrinks as 1 / sqrt(pairs))."""
    from scipy import stats

    if fraction >= 1.0:
        raise ValueError("no conditional power at the last look")
    se_final = se * math.sqrt(fraction)
    score = fraction * coefficient / se_final
    drift = min_effect / se_final
    c_final = float(stats.norm.isf(final_level))
    return float(stats.norm.cdf((score + (1 - fraction) * drift - c_final) / math.sqrt(1 - fraction)))


def look_plan(*, pairs: int, looks: int, alpha: float, rho: float, candidates: int,
              trend_futility: float = 0.0) -> tuple[Look, ...]:
    """The looks of a gate with `pairs` planned pairs and K = `candidates` (module docstring); the trend rule's
    threshold `trend_futility` is set on the interim looks from TREND_FROM_LOOK on.

    One look (a fixed gate, or a plan too small to split) is the whole plan at the whole alpha."""
    counts = look_pairs(pairs, looks) if pairs > 0 else []
    if len(counts) <= 1:
        return (Look(index=1, pairs=pairs, fraction=1.0, alpha=alpha),)
    fractions = [n / pairs for n in counts]
    k = max(1, candidates)
    levels = nominal_levels(fractions, alpha / k, rho)
    return tuple(
        Look(index=j + 1, pairs=n, fraction=f, alpha=_round_down(k * level),
             trend_futility=trend_futility if TREND_FROM_LOOK <= j + 1 < len(counts) else 0.0)
        for j, (n, f, level) in enumerate(zip(counts, fractions, levels, strict=True))
    )


@dataclass(frozen=True)
class LookDecision:
    """What one look decided: whether the gate stops, and which undecided candidates no longer hold it open."""

    look: Look
    looks: int
    stop: bool
    futile: tuple[tuple[str, float], ...]  # (intervention_id, conditional power) below the futility bound
    # (intervention_id, conditional power under its estimate) below the look's trend_futility
    trend_futile: tuple[tuple[str, float], ...] = ()

    def summary(self, planned_pairs: int, futility: float) -> dict[str, object]:
        """The `sequential` block of contributions.json's summary."""
        return {
            "looks": self.looks,
            "stopped_at_look": self.look.index,
            "pairs_analysed": self.look.pairs,
            "pairs_planned": planned_pairs,
            "alpha_at_look": self.look.alpha,
            "futility": futility,
            "futile": [{"intervention_id": i, "conditional_power": cp} for i, cp in self.futile],
            "futility_trend_at_look": self.look.trend_futility,
            "trend_futile": [{"intervention_id": i, "conditional_power_trend": cp} for i, cp in self.trend_futile],
        }


def decide_look(estimate: Estimate, look: Look, plan: Sequence[Look], *, min_effect: float,
                futility: float) -> LookDecision:
    """Stop at this look when every candidate is `selected`, `rejected` or futile; always at the last look.

    Futile: still `insufficient`, but with a conditional power (`conditional_power`, at the last look's
    first Holm step) below `futility`: even an effect of `min_effect` from here on would rarely select
    it; or, where the look carries a `trend_futility`, with a conditional power under its current
    estimate (`trend_conditional_power`) below that. Futility only stops the gate early, it never
    decides; so it cannot raise false selection."""
    last = look.index == len(plan)
    final_level = plan[-1].alpha / max(1, len(estimate.effects))
    futile: list[tuple[str, float]] = []
    trend_futile: list[tuple[str, float]] = []
    held_open = False
    for effect in estimate.effects:
        if effect.status is not Status.INSUFFICIENT or last:
            continue
        if effect.coefficient is None or effect.se is None or not effect.se > 0:
            held_open = True  # nothing to project from: only more pairs can settle it
            continue
        if futility > 0:
            power = conditional_power(coefficient=effect.coefficient, se=effect.se, fraction=look.fraction,
                                      final_level=final_level, min_effect=min_effect)
            if power < futility:
                futile.append((effect.intervention_id, power))
                continue
        if look.trend_futility > 0:
            trend = trend_conditional_power(coefficient=effect.coefficient, se=effect.se, fraction=look.fraction,
                                            final_level=final_level)
            if trend < look.trend_futility:
                trend_futile.append((effect.intervention_id, trend))
                continue
        held_open = True
    return LookDecision(look, len(plan), stop=last or not held_open, futile=tuple(futile),
                        trend_futile=tuple(trend_futile))


def annotate(estimate: Estimate, decision: LookDecision, futility: float) -> Estimate:
    """The estimate with the futile candidates' reasons saying why the gate stopped with them undecided."""
    if not decision.futile and not decision.trend_futile:
        return estimate
    stopped = f"the gate stopped at look {decision.look.index} of {decision.looks}"
    why = {i: f"conditional power {cp:.2f} < futility {futility:g}" for i, cp in decision.futile}
    why |= {i: f"conditional power under its estimate {cp:.2f} < futility_trend {decision.look.trend_futility:g}"
            for i, cp in decision.trend_futile}
    effects = tuple(
        replace(effect, reason=f"{effect.reason}; {stopped}: {why[effect.intervention_id]}")
        if effect.intervention_id in why else effect
        for effect in estimate.effects
    )
    return replace(estimate, effects=effects)


def _advance(grid: np.ndarray | None, weights: np.ndarray | None, density: np.ndarray | None,
             previous_t: float, t: float, c: float, drift: float = 0.0,
             futility: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sub-density of S_j on (futility, c sqrt(t)) given the one of S_{j-1}; trapezoid weights."""
    upper = c * math.sqrt(t)
    lower = min(upper, drift * t) - _TAIL * math.sqrt(t)
    if futility is not None:
        lower = min(max(lower, futility), upper)
    new_grid = np.linspace(lower, upper, _GRID)
    new_weights = np.full(_GRID, (upper - lower) / (_GRID - 1))
    new_weights[[0, -1]] /= 2
    if grid is None:
        new_density = _normal_pdf(new_grid, drift * t, math.sqrt(t))
    else:
        step = math.sqrt(t - previous_t)
        kernel = _normal_pdf(new_grid[:, None] - grid[None, :], drift * (t - previous_t), step)
        new_density = kernel @ (weights * density)
    return new_grid, new_weights, new_density


def _normal_pdf(x: np.ndarray, mean: float, sd: float) -> np.ndarray:
    return np.exp(-0.5 * ((x - mean) / sd) ** 2) / (sd * math.sqrt(2.0 * math.pi))


def _check_fractions(fractions: Sequence[float]) -> None:
    if not fractions or any(not 0.0 < f <= 1.0 for f in fractions) or list(fractions) != sorted(set(fractions)):
        raise ValueError(f"fractions {list(fractions)}: strictly increasing, in (0, 1]")


def _round_down(level: float) -> float:
    """Four significant digits, rounded down: a stable number in reasons and reports, never above the level."""
    exponent = math.floor(math.log10(level)) - 3
    return float(f"{math.floor(level / 10.0**exponent)}e{exponent}")

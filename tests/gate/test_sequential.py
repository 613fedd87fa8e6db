"""The sequential gate's statistics: nominal levels, power, looks and the stopping rule.

Nominal levels and crossing probabilities are checked against a slow obvious reference: a Monte
Carlo of the Brownian motion the looks sample (fixed seed; the tolerance is 4 Monte Carlo
standard errors). The stopping rule is checked on real estimates from `estimate_effects`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from shopsimrl.gate.design import build_design
from shopsimrl.gate.estimate import PairObservation, Status, estimate_effects
from shopsimrl.gate.sequential import (
    TREND_FROM_LOOK,
    annotate,
    conditional_power,
    crossing_probability,
    decide_look,
    futility_bounds,
    higher_bounds,
    look_pairs,
    look_plan,
    nominal_levels,
    spent,
    trend_conditional_power,
    trend_futility_bounds,
)

FRACTIONS = [0.2, 0.4, 0.6, 0.8, 1.0]


def _monte_carlo_crossing(fractions, levels, drift, *, paths=200_000, seed=0, futility=None):
    """P(Z_j >= c_j at some look before S_j < futility_j) by simulating the score process."""
    rng = np.random.default_rng(seed)
    steps = np.diff([0.0, *fractions])
    scores = np.cumsum(rng.normal(size=(paths, len(fractions))) * np.sqrt(steps) + drift * steps, axis=1)
    z = scores / np.sqrt(fractions)
    cross = z >= stats.norm.isf(levels)
    alive = np.ones(paths, dtype=bool)
    crossed = np.zeros(paths, dtype=bool)
    for j in range(len(fractions)):
        crossed |= alive & cross[:, j]
        alive &= ~cross[:, j]
        if futility is not None and futility[j] is not None:
            alive &= scores[:, j] >= futility[j]
    return crossed.mean(), math.sqrt(crossed.mean() * (1 - crossed.mean()) / paths)


def test_one_look_is_the_whole_alpha_and_the_first_look_spends_alpha_t_to_the_rho():
    assert nominal_levels([1.0], 0.025, 2.0) == pytest.approx([0.025], rel=1e-12)
    levels = nominal_levels(FRACTIONS, 0.025, 2.0)
    assert levels[0] == pytest.approx(spent(0.2, 0.025, 2.0), rel=1e-12)  # nothing spent before look 1
    assert spent(0.2, 0.025, 2.0) == pytest.approx(0.025 * 0.04, rel=1e-12)
    assert all(a < b for a, b in zip(levels, levels[1:], strict=False))  # rho = 2 spends late


@pytest.mark.parametrize("rho", [1.0, 2.0])
def test_the_levels_spend_exactly_alpha_under_the_null(rho):
    levels = nominal_levels(FRACTIONS, 0.025, rho)
    assert crossing_probability(FRACTIONS, levels, 0.0) == pytest.approx(0.025, abs=1e-6)  # the recursion itself
    simulated, se = _monte_carlo_crossing(FRACTIONS, levels, 0.0)
    assert abs(simulated - 0.025) < 4 * se


def test_power_with_a_futility_bound_matches_the_simulated_process():
    levels = nominal_levels(FRACTIONS, 0.025 / 4, 2.0)
    bounds = futility_bounds(FRACTIONS, levels[-1], 3.5, 0.4)
    exact = crossing_probability(FRACTIONS, levels, 3.5, bounds)
    simulated, se = _monte_carlo_crossing(FRACTIONS, levels, 3.5, futility=bounds)
    assert abs(exact - simulated) < 4 * se
    assert exact < crossing_probability(FRACTIONS, levels, 3.5)  # futility only ever costs power


def test_a_larger_family_never_loosens_a_look_the_holm_argument():
    """(K / m) * nominal_j(alpha / K) <= nominal_j(alpha / m): why passing K * nominal(alpha / K) to Holm
    keeps the family-wise error at alpha over all looks (sequential.py's docstring)."""
    for k in (2, 4, 8):
        wide = nominal_levels(FRACTIONS, 0.025 / k, 2.0)
        for m in range(1, k):
            narrow = nominal_levels(FRACTIONS, 0.025 / m, 2.0)
            assert all(k / m * w <= n * (1 + 1e-9) for w, n in zip(wide, narrow, strict=True))


def test_conditional_power_at_the_futility_bound_is_the_futility_threshold():
    fraction, level, se, effect = 0.4, 0.004, 0.05, 0.10
    se_final = se * math.sqrt(fraction)
    [bound] = futility_bounds([fraction], level, effect / se_final, 0.4)
    coefficient = bound * se_final / fraction  # the score S = fraction * coefficient / se_final
    power = conditional_power(coefficient=coefficient, se=se, fraction=fraction, final_level=level, min_effect=effect)
    assert power == pytest.approx(0.4, abs=1e-12)


def test_look_plan_splits_the_pairs_and_scales_alpha_by_k():
    plan = look_plan(pairs=627, looks=5, alpha=0.025, rho=2.0, candidates=4)
    assert [look.pairs for look in plan] == [125, 250, 376, 501, 627] == look_pairs(627, 5)
    levels = nominal_levels([n / 627 for n in look_pairs(627, 5)], 0.025 / 4, 2.0)
    for look, level in zip(plan, levels, strict=True):
        assert 4 * level * (1 - 1e-3) <= look.alpha <= 4 * level  # rounded down to 4 significant digits
    fixed = look_plan(pairs=600, looks=1, alpha=0.025, rho=2.0, candidates=3)
    assert [(look.pairs, look.alpha) for look in fixed] == [(600, 0.025)]  # the whole alpha, exactly
    assert look_plan(pairs=3, looks=5, alpha=0.025, rho=2.0, candidates=2)[-1].pairs == 3
    assert [look.pairs for look in look_plan(pairs=3, looks=5, alpha=0.025, rho=2.0, candidates=2)] == [1, 2, 3]


def _estimate(effects, *, tasks=60, replicates=2, alpha=0.01, seed=0):
    """Real estimates of three candidates from outcomes with the given effects on P(success)."""
    rng = np.random.default_rng(seed)
    candidates = [f"c{j}" for j in range(len(effects))]
    design = build_design([f"t{i:03d}" for i in range(tasks)], candidates=candidates, replicates=replicates,
                          pairing="complement", seed=seed)
    observations = []
    for pair in design.pairs:
        outcome = []
        for mask in (pair.mask_a, pair.mask_b):
            p = 0.5 + sum(effects[int(c[1:])] for c in mask)
            outcome.append(float(rng.random() < min(max(p, 0.0), 1.0)))
        observations.append(PairObservation(pair.task_id, tuple(design.indicators(pair)), *outcome))
    return estimate_effects(observations, candidates, alpha=alpha, min_effect=0.10)


def test_a_look_stops_when_every_candidate_is_decided_or_futile_and_the_last_look_always_stops():
    plan = look_plan(pairs=240, looks=4, alpha=0.025, rho=2.0, candidates=3)
    decided = _estimate([0.45, -0.45, -0.45], alpha=plan[1].alpha)
    assert [e.status for e in decided.effects] == [Status.SELECTED, Status.REJECTED, Status.REJECTED]
    stop = decide_look(decided, plan[1], plan, min_effect=0.10, futility=0.4)
    assert stop.stop and stop.futile == ()

    mixed = _estimate([0.45, -0.45, 0.06], alpha=plan[1].alpha)  # c2 between 0 and min_effect
    assert mixed.effects[2].status is Status.INSUFFICIENT
    held = decide_look(mixed, plan[1], plan, min_effect=0.10, futility=0.0)  # futility off: c2 holds it open
    assert not held.stop
    power = conditional_power(coefficient=mixed.effects[2].coefficient, se=mixed.effects[2].se,
                              fraction=plan[1].fraction, final_level=plan[-1].alpha / 3, min_effect=0.10)
    futile = decide_look(mixed, plan[1], plan, min_effect=0.10, futility=min(0.99, power + 0.01))
    assert futile.stop and futile.futile == (("c2", power),)
    assert not decide_look(mixed, plan[1], plan, min_effect=0.10, futility=power - 0.01).stop
    assert decide_look(mixed, plan[-1], plan, min_effect=0.10, futility=0.0).stop  # the last look decides

    noted = annotate(mixed, futile, 0.99)
    assert noted.effects[2].reason == (f"{mixed.effects[2].reason}; the gate stopped at look 2 of 4: "
                                       f"conditional power {power:.2f} < futility 0.99")
    assert noted.effects[:2] == mixed.effects[:2] and noted.effects[2].status is Status.INSUFFICIENT


def test_an_unidentified_candidate_holds_an_interim_look_open():
    plan = look_plan(pairs=240, looks=4, alpha=0.025, rho=2.0, candidates=3)
    too_few = _estimate([0.45, -0.45, -0.45], tasks=10, alpha=plan[0].alpha)  # < 20 tasks: nothing estimated
    assert all(e.coefficient is None for e in too_few.effects)
    assert not decide_look(too_few, plan[0], plan, min_effect=0.10, futility=0.4).stop


def test_the_trend_bounds_start_at_look_2_and_match_the_simulated_process():
    levels = nominal_levels(FRACTIONS, 0.025 / 4, 2.0)
    trend = trend_futility_bounds(FRACTIONS, levels[-1], 0.05)
    assert TREND_FROM_LOOK == 2 and trend[0] is None and trend[-1] is None
    assert all(b is not None for b in trend[1:-1])
    assert trend_futility_bounds(FRACTIONS, levels[-1], 0.0) == [None] * 5  # 0 = off
    bounds = higher_bounds(futility_bounds(FRACTIONS, levels[-1], 3.5, 0.4), trend)
    exact = crossing_probability(FRACTIONS, levels, 3.5, bounds)
    simulated, se = _monte_carlo_crossing(FRACTIONS, levels, 3.5, futility=bounds)
    assert abs(exact - simulated) < 4 * se
    assert higher_bounds([None, 1.0, 2.0], [0.5, None, 3.0]) == [0.5, 1.0, 3.0]


def test_conditional_power_under_the_trend_at_its_bound_is_the_threshold():
    fraction, level, se = 0.4, 0.004, 0.05
    [bound] = trend_futility_bounds([0.2, fraction, 1.0], level, 0.05)[1:2]
    se_final = se * math.sqrt(fraction)
    coefficient = bound * se_final / fraction  # the score S = fraction * coefficient / se_final
    power = trend_conditional_power(coefficient=coefficient, se=se, fraction=fraction, final_level=level)
    assert power == pytest.approx(0.05, abs=1e-12)
    # The design effect is more hopeful than a trend below it: the trend rule is the one that stops nulls.
    assert conditional_power(coefficient=coefficient, se=se, fraction=fraction, final_level=level,
                             min_effect=0.10) > power


def test_look_plan_sets_the_trend_rule_on_the_interim_looks_from_look_2():
    plan = look_plan(pairs=600, looks=5, alpha=0.025, rho=2.0, candidates=4, trend_futility=0.05)
    assert [look.trend_futility for look in plan] == [0.0, 0.05, 0.05, 0.05, 0.0]
    assert [look.trend_futility for look in look_plan(pairs=600, looks=5, alpha=0.025, rho=2.0,
                                                      candidates=4)] == [0.0] * 5


def test_a_candidate_below_the_trend_rule_no_longer_holds_the_gate_open():
    unplanned = look_plan(pairs=240, looks=4, alpha=0.025, rho=2.0, candidates=3)  # trend rule off
    mixed = _estimate([0.45, -0.45, 0.06], alpha=unplanned[1].alpha)  # c2 between 0 and min_effect
    c2 = mixed.effects[2]
    final_level = unplanned[-1].alpha / 3
    design = conditional_power(coefficient=c2.coefficient, se=c2.se, fraction=unplanned[1].fraction,
                               final_level=final_level, min_effect=0.10)
    trend = trend_conditional_power(coefficient=c2.coefficient, se=c2.se, fraction=unplanned[1].fraction,
                                    final_level=final_level)
    assert trend < design  # c2's estimate (about 0.06) is below the design effect
    gamma, futility = (trend + design) / 2, design * 0.99  # only the trend rule calls c2 futile
    plan = look_plan(pairs=240, looks=4, alpha=0.025, rho=2.0, candidates=3, trend_futility=gamma)
    assert [look.alpha for look in plan] == [look.alpha for look in unplanned]
    assert not decide_look(mixed, unplanned[1], unplanned, min_effect=0.10, futility=futility).stop
    stop = decide_look(mixed, plan[1], plan, min_effect=0.10, futility=futility)
    assert stop.stop and stop.futile == () and stop.trend_futile == (("c2", trend),)
    noted = annotate(mixed, stop, futility)
    assert noted.effects[2].reason == (f"{c2.reason}; the gate stopped at look 2 of 4: conditional power under its "
                                       f"estimate {trend:.2f} < futility_trend {gamma:g}")
    assert noted.effects[2].status is Status.INSUFFICIENT  # futility decides nothing
    assert stop.summary(240, futility)["trend_futile"] == [{"intervention_id": "c2", "conditional_power_trend": trend}]
    first = _estimate([0.45, -0.45, 0.06], alpha=plan[0].alpha)
    assert decide_look(first, plan[0], plan, min_effect=0.10, futility=0.0).trend_futile == ()  # not at look 1

"""The estimator against a slow obvious reference (numpy least squares and the cluster sandwich) and the rule."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from shopsimrl.gate.design import build_design
from shopsimrl.gate.estimate import PairObservation, Status, estimate_effects, holm_divisors

CANDIDATES = ["up", "null", "down"]


def _data(effects, *, tasks=60, replicates=2, noise=0.3, seed=0, pairing="complement", candidates=CANDIDATES):
    rng = np.random.default_rng(seed)
    task_ids = [f"t{i:03d}" for i in range(tasks)]
    design = build_design(task_ids, candidates=candidates, replicates=replicates, pairing=pairing, seed=seed)
    out = []
    for pair in design.pairs:
        d = design.indicators(pair)
        delta = float(np.dot(d, effects)) + float(rng.normal(scale=noise))
        out.append(PairObservation(pair.task_id, tuple(d), delta, 0.0))
    return out


def _reference(observations):
    """OLS by lstsq and the CR1 cluster-robust sandwich, written out."""
    y = np.array([o.delta for o in observations])
    x = np.column_stack([np.ones(len(y)), np.array([o.indicators for o in observations], dtype=float)])
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    resid = y - x @ beta
    bread = np.linalg.inv(x.T @ x)
    tasks = sorted({o.task_id for o in observations})
    meat = np.zeros((x.shape[1], x.shape[1]))
    for task in tasks:
        rows = [i for i, o in enumerate(observations) if o.task_id == task]
        score = x[rows].T @ resid[rows]
        meat += np.outer(score, score)
    n, k, g = len(y), x.shape[1], len(tasks)
    cov = bread @ meat @ bread * (g / (g - 1)) * ((n - 1) / (n - k))
    return beta, np.sqrt(np.diag(cov))


def test_coefficients_and_clustered_standard_errors_match_the_reference():
    observations = _data([0.3, 0.0, -0.3])
    estimate = estimate_effects(observations, CANDIDATES, alpha=0.05, min_effect=0.1)
    beta, se = _reference(observations)
    assert [e.coefficient for e in estimate.effects] == pytest.approx(list(beta[1:]), abs=1e-9)
    assert [e.se for e in estimate.effects] == pytest.approx(list(se[1:]), rel=1e-6)
    assert estimate.intercept == pytest.approx(beta[0], abs=1e-9)
    assert estimate.df == 59


def test_selection_rule_selects_the_benefit_rejects_the_harm_and_ranks_by_coefficient():
    estimate = estimate_effects(_data([0.3, 0.0, -0.3]), CANDIDATES, alpha=0.05, min_effect=0.1)
    by_id = {e.intervention_id: e for e in estimate.effects}
    assert by_id["up"].status is Status.SELECTED
    assert by_id["down"].status is Status.REJECTED
    assert by_id["null"].status is Status.REJECTED  # credibly below min_effect = 0.1 with this little noise
    assert [by_id[c].rank for c in ("up", "null", "down")] == [1, 2, 3]
    assert by_id["up"].ci_low > 0 and by_id["down"].ci_high < 0


def test_noisy_small_data_is_insufficient_not_rejected():
    estimate = estimate_effects(_data([0.05, 0.0, 0.0], tasks=20, noise=1.0, seed=0), CANDIDATES, alpha=0.05,
                                min_effect=0.1)
    assert {e.status for e in estimate.effects} == {Status.INSUFFICIENT}


def test_holm_adjusts_across_the_candidates():
    for seed in range(200):  # find data where the raw one-sided p passes alpha but the Holm-adjusted one fails
        estimate = estimate_effects(_data([0.09, 0.0, 0.0], tasks=80, noise=0.5, seed=seed), CANDIDATES,
                                    alpha=0.05, min_effect=0.001)
        up = estimate.effects[0]
        if up.p_benefit < 0.05 < up.p_benefit_adjusted:
            break
    else:
        pytest.fail("no seed gave a p-value that Holm should overturn")
    assert up.status is Status.INSUFFICIENT
    smallest = min(e.p_benefit for e in estimate.effects)
    assert up.p_benefit == smallest  # the first Holm step multiplies the smallest p by K
    assert up.p_benefit_adjusted == pytest.approx(min(1.0, 3 * up.p_benefit), rel=1e-9)


def test_every_delta_equal_is_insufficient_with_the_reason():
    rng = np.random.default_rng(0)
    observations = [PairObservation(f"t{i // 2}", tuple(int(v) for v in rng.choice([-1, 1], size=3)), 0.0, 0.0)
                    for i in range(40)]
    estimate = estimate_effects(observations, CANDIDATES, alpha=0.05, min_effect=0.1)
    assert {e.status for e in estimate.effects} == {Status.INSUFFICIENT}
    assert estimate.effects[0].reason == "every paired delta is 0: no variation to estimate from"


def test_a_candidate_whose_indicator_never_varies_is_insufficient_and_the_others_are_estimated():
    rng = np.random.default_rng(1)
    observations = []
    for i in range(60):
        d = (int(rng.choice([-1, 1])), 1, int(rng.choice([-1, 1])))
        observations.append(PairObservation(f"t{i // 2}", d, 0.4 * d[0] + float(rng.normal(scale=0.1)), 0.0))
    effects = estimate_effects(observations, CANDIDATES, alpha=0.05, min_effect=0.1).effects
    assert effects[1].status is Status.INSUFFICIENT
    assert effects[1].reason == "its indicator never varied across the scored pairs"
    assert effects[0].status is Status.SELECTED
    assert effects[1].rank == 3  # no estimate: ranked last


def test_too_few_pairs_or_tasks():
    one_task = [PairObservation("t0", (1, -1, 1), 1.0, 0.0)] * 5
    estimate = estimate_effects(one_task, CANDIDATES, alpha=0.05, min_effect=0.1)
    assert estimate.effects[0].reason == (
        "5 scored pairs from 1 tasks: too few to estimate 3 effects (clustered standard errors need at least 20 tasks)"
    )
    many = [PairObservation(f"t{i}", (1, -1, 1) if i % 2 else (-1, 1, 1), float(i % 3), 0.0) for i in range(19)]
    assert "from 19 tasks" in estimate_effects(many, CANDIDATES, alpha=0.05, min_effect=0.1).effects[0].reason
    assert estimate_effects([], [], alpha=0.05, min_effect=0.1).effects == ()


# Float rounding of one bound computed two ways (statsmodels' conf_int vs coefficient - se * t quantile).
ROUNDING = 1e-12


def _reference_holm(pvalues, alpha):
    """Holm's step-down written out: sort, test the j-th smallest at alpha / (K - j + 1), stop at the first failure."""
    k = len(pvalues)
    rejected = [False] * k
    for step, index in enumerate(sorted(range(k), key=lambda i: pvalues[i])):
        if pvalues[index] > alpha / (k - step):
            break
        rejected[index] = True
    return rejected


def test_holm_divisors_reproduce_holms_step_down_and_its_stopping_rule():
    rng = np.random.default_rng(0)
    alpha = 0.025
    for _ in range(2000):
        k = int(rng.integers(1, 9))
        p = list(rng.uniform(0, 0.05, size=k) ** rng.uniform(0.5, 2.0))  # many near the Holm thresholds
        order = sorted(range(k), key=lambda i: p[i])
        divisors = holm_divisors(order, k, lambda j, m, p=p: p[j] <= alpha / m)
        assert [p[i] <= alpha / divisors[i] for i in range(k)] == _reference_holm(p, alpha), p
    # The stopping rule: C's own test passes at its position (0.02 <= 0.025 / 1), but Holm stops at A.
    p = [0.01, 0.011, 0.02]
    assert holm_divisors([0, 1, 2], 3, lambda j, m: p[j] <= 0.025 / m) == {0: 3, 1: 3, 2: 3}
    assert _reference_holm(p, 0.025) == [False, False, False]


def test_the_reported_interval_is_the_deciding_one_and_the_unadjusted_one_sits_beside_it():
    """The interval above 0 next to "not selected". Fails on the code that reported the raw interval."""
    alpha = 0.025
    for seed in range(200):
        estimate = estimate_effects(_data([0.09, 0.0, 0.0], tasks=80, noise=0.5, seed=seed), CANDIDATES,
                                    alpha=alpha, min_effect=0.1)
        up = estimate.effects[0]
        raw_low = up.coefficient - up.se * stats.t.isf(alpha, estimate.df)
        if raw_low > 0 and up.status is not Status.SELECTED:
            break
    else:
        pytest.fail("no seed gave an unadjusted interval above 0 for a candidate Holm does not select")
    assert up.ci_low <= 0  # the reported interval agrees with "not selected"
    assert up.unadjusted_ci_low == pytest.approx(raw_low, abs=ROUNDING)
    raw_high = up.coefficient + up.se * stats.t.isf(alpha, estimate.df)
    assert up.unadjusted_ci_high == pytest.approx(raw_high, abs=ROUNDING)
    assert up.ci_high >= up.unadjusted_ci_high  # equal when Holm reached the last step of that family
    assert estimate.to_json()["min_effect"] == 0.1 and estimate.to_json()["alpha"] == alpha


def test_selected_and_rejected_are_read_off_the_reported_interval_and_agree_with_holm():
    """selected <=> ci_low > 0; rejected <=> not selected and ci_high < min_effect; both as Holm on the p-values."""
    alpha, min_effect = 0.025, 0.1
    candidates = ["c0", "c1", "c2", "c3"]
    rng = np.random.default_rng(7)
    stopped = 0  # candidates whose test passes at their own Holm position but that Holm never reaches
    for seed in range(30):
        effects = list(rng.choice([-0.05, 0.0, 0.05, 0.08, 0.1], size=4))
        estimate = estimate_effects(_data(effects, noise=0.5, seed=seed, candidates=candidates), candidates,
                                    alpha=alpha, min_effect=min_effect)
        p_benefit = [e.p_benefit for e in estimate.effects]
        benefit = _reference_holm(p_benefit, alpha)
        below = _reference_holm([e.p_below_min_effect for e in estimate.effects], alpha)
        order = sorted(range(4), key=lambda i: p_benefit[i])
        for i, effect in enumerate(estimate.effects):
            expected = Status.SELECTED if benefit[i] else Status.REJECTED if below[i] else Status.INSUFFICIENT
            assert effect.status is expected
            assert (effect.status is Status.SELECTED) == (effect.ci_low > 0)
            assert (effect.status is Status.REJECTED) == (effect.ci_low <= 0 and effect.ci_high < min_effect)
            assert effect.ci_low <= effect.unadjusted_ci_low and effect.ci_high >= effect.unadjusted_ci_high
            stopped += not benefit[i] and p_benefit[i] <= alpha / (4 - order.index(i))
    assert stopped > 0  # the data exercised Holm's stopping rule, not only its first step

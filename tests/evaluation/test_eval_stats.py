"""Intervals and the paired test of evaluation outcomes, against values computed by hand."""

from __future__ import annotations

import math

import pytest

from shopsimrl.evaluation.stats import cluster_bootstrap, paired_difference, wilson

# Interval ends are computed floats: 1e-4 is far below any difference that matters in a report
# and far above what Intel and AMD float kernels disagree by.
TOL = 1e-4


def test_wilson_matches_the_closed_form():
    # 5/10 at 95%: centre 0.5, half-width z*sqrt(pq/n + z^2/4n^2)/(1 + z^2/n) with z = 1.959964.
    z = 1.959963984540054
    n, p = 10, 0.5
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low, high = wilson(5, 10)
    assert low == pytest.approx(centre - half, abs=TOL) and high == pytest.approx(centre + half, abs=TOL)
    zero_low, zero_high = wilson(0, 10)
    assert zero_low == pytest.approx(0.0, abs=TOL) and zero_high == pytest.approx(0.2775, abs=TOL)
    assert wilson(0, 0) is None


def test_cluster_bootstrap_resamples_tasks_not_episodes():
    # Two tasks, perfectly consistent within each: every resample's mean is 0, 0.5 or 1 (whole tasks).
    values = {"t1": [1.0, 1.0, 1.0], "t2": [0.0, 0.0, 0.0]}
    low, high = cluster_bootstrap(values, samples=500, seed=3)
    assert (low, high) == (0.0, 1.0)
    assert cluster_bootstrap(values, samples=500, seed=3) == (low, high)  # seeded: the same numbers
    assert cluster_bootstrap({}, samples=500, seed=3) is None


def test_paired_difference_exact_sign_flip_p_value():
    # Five tasks, each improved by one success in two: all 2^5 sign patterns, only the two
    # all-same-sign ones reach |sum| = 2.5, so p = 2/32.
    pairs = {f"t{i}": [(0.0, 1.0), (1.0, 1.0)] for i in range(5)}
    result = paired_difference(pairs, samples=300, seed=0)
    assert result.exact and result.tasks == 5 and result.episodes == 10
    assert result.difference == pytest.approx(0.5, abs=TOL)
    assert result.p_value == pytest.approx(2 / 32, abs=1e-12)
    assert result.ci == (0.5, 0.5)


def test_paired_difference_without_change_and_without_pairs():
    unchanged = paired_difference({"t1": [(1.0, 1.0)], "t2": [(0.0, 0.0)]}, samples=200, seed=0)
    assert unchanged.p_value == 1.0 and unchanged.difference == 0.0
    empty = paired_difference({}, samples=200, seed=0)
    assert empty.p_value is None and empty.episodes == 0


def test_many_tasks_use_a_seeded_monte_carlo_test():
    # 30 tasks with a clear improvement: Monte Carlo (2^30 patterns is too many), small p, reproducible.
    pairs = {f"t{i}": [(0.0, 1.0 if i % 5 else 0.0)] for i in range(30)}
    first = paired_difference(pairs, samples=200, seed=1)
    assert not first.exact and first.p_value < 0.001
    assert paired_difference(pairs, samples=200, seed=1).p_value == first.p_value

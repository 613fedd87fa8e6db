"""The pure parts of the gate's positive control (shopsimrl/gate/positive_control.py): GEPA's acceptance
rule replayed on paired episodes, checked against exhaustive enumeration, and the report's table."""

from __future__ import annotations

import itertools
import math

import pytest

from shopsimrl.gate.positive_control import (
    GepaRule,
    control_lines,
    control_report,
    gepa_admits,
    gepa_final_pick,
    gepa_minibatch_rule,
)


def test_gepa_admits_a_child_only_when_its_minibatch_sum_beats_the_parents_strictly():
    assert gepa_admits([0.0, 1.0, 0.0], [1.0, 1.0, 0.0]) is True
    assert gepa_admits([0.0, 1.0, 0.0], [1.0, 0.0, 0.0]) is False  # equal sums: GEPA's default rule is strict
    assert gepa_admits([1.0, 0.0, 0.0], [0.0, 0.0, 0.0]) is False
    assert gepa_admits([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]) is None  # a perfect parent proposes nothing
    with pytest.raises(ValueError, match=r"as many parent as child scores \(got 2 and 3\)"):
        gepa_admits([0.0, 1.0], [0.0, 1.0, 1.0])


def _exact_rates(pairs_by_task: dict[str, list[tuple[float, float]]], minibatch: int) -> tuple[float, float]:
    """(P(admit | proposed), P(skip)) by enumerating every set of distinct tasks and every choice of one
    episode each, all equally likely: the slow obvious version of the rule's random draws."""
    admitted = skipped = total = 0
    for tasks in itertools.combinations(pairs_by_task, minibatch):
        for episodes in itertools.product(*(pairs_by_task[t] for t in tasks)):
            total += 1
            verdict = gepa_admits([p for p, _ in episodes], [c for _, c in episodes])
            skipped += verdict is None
            admitted += verdict is True
    return admitted / (total - skipped), skipped / total


def test_the_replayed_rule_matches_exhaustive_enumeration():
    # 5 tasks x 2 episodes; the edit helps on two tasks, hurts on one, nothing on the others.
    pairs = {"t1": [(0.0, 1.0), (0.0, 1.0)], "t2": [(1.0, 0.0), (1.0, 1.0)], "t3": [(1.0, 1.0), (1.0, 1.0)],
             "t4": [(0.0, 0.0), (0.0, 1.0)], "t5": [(1.0, 1.0), (0.0, 0.0)]}  # fmt: skip
    draws = 20_000
    rule = gepa_minibatch_rule(pairs, minibatch=3, draws=draws, seed=7)
    admit, skip = _exact_rates(pairs, 3)
    # Monte Carlo of `draws` binomial trials: 5 standard errors (a false failure about once in 3.5 million runs).
    assert rule.skip_rate == pytest.approx(skip, abs=5 * math.sqrt(skip * (1 - skip) / draws))
    proposed = draws * (1 - skip)
    assert rule.admit_rate == pytest.approx(admit, abs=5 * math.sqrt(admit * (1 - admit) / proposed))
    # The first minibatch: t1, t2, t3 with their first episodes: parent 0+1+1 = 2, child 1+0+1 = 2 -> not admitted.
    assert rule.first_admitted is False
    assert (rule.minibatch, rule.draws) == (3, draws)
    assert gepa_minibatch_rule(pairs, minibatch=3, draws=500, seed=1) == gepa_minibatch_rule(
        pairs, minibatch=3, draws=500, seed=1)  # fmt: skip


def test_the_rule_admits_a_harmful_edit_on_some_minibatches():
    """What the anchors describe (P(admit) 0.26 at -0.10): a strict sum on 3 single episodes is noise."""
    pairs = {f"t{i}": [(1.0, 0.0)] if i % 5 == 0 else [(float(i % 2), float((i + 1) % 2))] for i in range(20)}
    admit, _ = _exact_rates(pairs, 3)
    assert 0 < admit < 0.5
    assert gepa_minibatch_rule(pairs, minibatch=3, draws=2000, seed=0).admit_rate > 0


def test_the_rule_refuses_fewer_tasks_than_a_minibatch():
    with pytest.raises(ValueError, match="needs at least 3 tasks with a paired episode, got 2"):
        gepa_minibatch_rule({"a": [(0.0, 1.0)], "b": [(1.0, 1.0)], "c": []})


def test_gepa_returns_the_highest_mean_and_the_earlier_program_on_a_tie():
    assert gepa_final_pick({"none": 0.5, "a": 0.6, "b": 0.55}) == "a"
    assert gepa_final_pick({"none": 0.6, "a": 0.6}) == "none"
    with pytest.raises(ValueError, match="no program to pick from"):
        gepa_final_pick({})


def _gate_document() -> dict:
    return {"decided_on": "success", "contributions": [
        {"intervention_id": "pc-helpful", "status": "selected", "coefficient": 0.21, "ci_low": 0.12, "ci_high": 0.30},
        {"intervention_id": "pc-misleading", "status": "rejected", "coefficient": -0.18, "ci_low": -0.27,
         "ci_high": -0.09}]}  # fmt: skip


def _effect(difference: float, after: float) -> dict:
    return {"before": 0.5, "after": after, "difference": difference, "bootstrap_ci": [difference - 0.1, difference + 0.1],
            "p_value": 0.004, "exact": False, "episodes": 200, "tasks": 100}  # fmt: skip


def test_the_report_puts_each_edits_effect_beside_the_gates_and_gepas_verdicts():
    gepa = {"pc-helpful": GepaRule(3, 2000, True, 0.61, 0.1), "pc-misleading": GepaRule(3, 2000, None, 0.22, 0.15)}
    report = control_report({"pc-helpful": _effect(0.2, 0.7), "pc-misleading": _effect(-0.15, 0.35)}, _gate_document(),
                            gate_episodes=612, fixed_episodes=852, gepa=gepa, baseline_mean=0.5)  # fmt: skip
    assert report["gepa_final_pick"] == "pc-helpful"
    assert report["means"] == {"none": 0.5, "pc-helpful": 0.7, "pc-misleading": 0.35}
    assert control_lines(report) == [
        "| edit | measured effect on success (eval, paired) [95% CI] p | gate (success) [Holm CI] | "
        "GEPA first minibatch | GEPA P(admit) (skipped) |",
        "| --- | --- | --- | --- | --- |",
        "| pc-helpful | +0.200 [+0.100, +0.300] p=0.004 (200 episodes) | selected +0.210 [+0.120, +0.300] | admit | "
        "0.61 (0.10) |",
        "| pc-misleading | -0.150 [-0.250, -0.050] p=0.004 (200 episodes) | rejected -0.180 [-0.270, -0.090] | "
        "skipped | 0.22 (0.15) |",
        "",
        "Gate episodes: 612 (the fixed design's: 852).",
        "GEPA's returned program (highest mean of none / each edit on the eval's episodes): pc-helpful.",
    ]  # fmt: skip


def test_the_report_refuses_an_edit_the_gate_did_not_decide_on():
    gepa = {"pc-other": GepaRule(3, 10, False, 0.0, 0.0)}
    with pytest.raises(ValueError, match=r"the gate decided nothing on \['pc-other'\]"):
        control_report({"pc-other": _effect(0.0, 0.5)}, _gate_document(), gate_episodes=1, fixed_episodes=1, gepa=gepa,
                       baseline_mean=0.5)  # fmt: skip


def test_without_the_gate_the_report_says_it_was_not_run_and_keeps_the_effects_and_gepa():
    gepa = {"pc-helpful": GepaRule(3, 2000, False, 0.16, 0.2), "pc-misleading": GepaRule(3, 2000, False, 0.10, 0.2)}
    report = control_report({"pc-helpful": _effect(0.025, 0.113), "pc-misleading": _effect(0.025, 0.113)}, None,
                            gate_episodes=None, fixed_episodes=1288, gepa=gepa, baseline_mean=0.087)  # fmt: skip
    assert [row["gate"] for row in report["rows"]] == [None, None]
    assert report["decided_on"] is None
    lines = control_lines(report)
    assert lines[0].startswith("| edit | measured effect on success (eval, paired) [95% CI] p | gate (not run) [Holm CI]")
    assert lines[2] == ("| pc-helpful | +0.025 [-0.075, +0.125] p=0.004 (200 episodes) | not run | reject | "
                        "0.16 (0.20) |")  # fmt: skip
    assert lines[-2] == "Gate not run (--no-gate); the fixed design would run 1288 episodes."
    assert report["gepa_final_pick"] == "pc-helpful"  # the earlier program on a tie

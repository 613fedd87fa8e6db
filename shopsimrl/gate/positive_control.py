"""The gate's positive control on real episodes: two skill edits of known effect, the gate's decisions,
and what GEPA's acceptance rule would have kept on the same episodes (bench/gate_positive_control.py).

    rule = gepa_minibatch_rule(pairs, minibatch=3, draws=2000, seed=0)   # parent/child outcomes per task
    report = control_report(effects, gate_document, gate_episodes=..., fixed_episodes=..., gepa=...)
    lines = control_lines(report)

GEPA's rule, as its reference code behaves (../shared/reference/skill_loop_anchors.md, section 2.2),
restated here: a child prompt is *admitted* when the sum of its scores on a minibatch of 3 training
examples is strictly greater than its parent's on the same 3 examples; a minibatch on which the parent
already scores perfectly proposes nothing (skipped); an admitted child joins the pool whatever its
validation score, and the program returned at the end is the one with the highest validation mean.
Each example is scored once (one episode). Here the parent is the policy with the round's skillbank,
the child the same policy with one edit, and an example is one task with one of its paired episodes:
the rule is replayed on episodes that were run for the paired evaluation, not on new ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

GEPA_MINIBATCH = 3  # reflection_minibatch_size's default in GEPA's reference code


@dataclass(frozen=True)
class GepaRule:
    minibatch: int
    draws: int
    first_admitted: bool | None  # the first `minibatch` tasks' first episodes; None: skipped (parent perfect)
    admit_rate: float  # over `draws` minibatches of distinct tasks (one random episode each), skips excluded
    skip_rate: float  # minibatches on which the parent was already perfect


def gepa_admits(parent: Sequence[float], child: Sequence[float]) -> bool | None:
    """GEPA's acceptance on one minibatch: True when the child's sum beats the parent's strictly, False when
    it does not, None when the parent is already perfect there (nothing would have been proposed)."""
    if len(parent) != len(child) or not parent:
        raise ValueError(f"a minibatch needs as many parent as child scores (got {len(parent)} and {len(child)})")
    if all(score >= 1.0 for score in parent):
        return None
    return sum(child) > sum(parent)


def gepa_minibatch_rule(pairs_by_task: Mapping[str, Sequence[tuple[float, float]]], *, minibatch: int = GEPA_MINIBATCH,
                        draws: int = 2000, seed: int = 0) -> GepaRule:  # fmt: skip
    """The rule replayed on paired episodes: task -> [(parent outcome, child outcome)] per episode, in plan
    order. The first minibatch is deterministic (the first `minibatch` tasks, their first episodes); the
    rates come from `draws` random minibatches of distinct tasks, each with one of its episodes at random."""
    tasks = [task for task, pairs in pairs_by_task.items() if pairs]
    if len(tasks) < minibatch:
        raise ValueError(f"the rule needs at least {minibatch} tasks with a paired episode, got {len(tasks)}")
    first = [pairs_by_task[task][0] for task in tasks[:minibatch]]
    first_admitted = gepa_admits([p for p, _ in first], [c for _, c in first])
    rng = np.random.Generator(np.random.PCG64(seed))
    admitted = skipped = 0
    for _ in range(draws):
        chosen = rng.choice(len(tasks), size=minibatch, replace=False)
        episodes = [pairs_by_task[tasks[i]][int(rng.integers(len(pairs_by_task[tasks[i]])))] for i in chosen]
        verdict = gepa_admits([p for p, _ in episodes], [c for _, c in episodes])
        if verdict is None:
            skipped += 1
        elif verdict:
            admitted += 1
    proposed = draws - skipped
    return GepaRule(minibatch, draws, first_admitted, admitted / proposed if proposed else float("nan"),
                    skipped / draws)  # fmt: skip


def gepa_final_pick(means: Mapping[str, float]) -> str:
    """GEPA's returned program: the highest validation mean; a tie goes to the earlier program (dict order)."""
    if not means:
        raise ValueError("no program to pick from")
    best = max(means.values())
    return next(name for name, mean in means.items() if mean == best)


def control_report(effects: Mapping[str, dict[str, Any]], gate_document: dict[str, Any] | None, *,
                   gate_episodes: int | None, fixed_episodes: int, gepa: Mapping[str, GepaRule],
                   baseline_mean: float) -> dict[str, Any]:  # fmt: skip
    """One row per edit: its measured effect (eval comparison's success entry: difference, bootstrap_ci,
    p_value, episodes, after), the gate's status and interval, and GEPA's verdicts; plus the budgets.
    `gate_document` None: the gate was not run (bench --no-gate), and each row says so."""
    by_id = {} if gate_document is None else {row["intervention_id"]: row for row in gate_document["contributions"]}
    missing = sorted(set(effects) - set(by_id))
    if gate_document is not None and missing:
        raise ValueError(f"the gate decided nothing on {missing} (its contributions: {sorted(by_id)})")
    rows = []
    for edit, effect in effects.items():
        gate = by_id.get(edit)
        rows.append({"edit": edit, "effect": dict(effect),
                     "gate": None if gate is None else {key: gate[key] for key in ("status", "coefficient", "ci_low", "ci_high")},
                     "gepa": asdict(gepa[edit])})  # fmt: skip
    means = {"none": baseline_mean, **{edit: effect["after"] for edit, effect in effects.items()}}
    return {"schema_version": 1, "kind": "gate_positive_control",
            "decided_on": None if gate_document is None else gate_document["decided_on"],
            "rows": rows, "gate_episodes": gate_episodes, "fixed_design_episodes": fixed_episodes,
            "gepa_final_pick": gepa_final_pick(means), "means": means}  # fmt: skip


def control_lines(report: dict[str, Any]) -> list[str]:
    """The report as a Markdown table and two lines of budget and final pick."""
    decided_on = report["decided_on"] or "not run"
    lines = ["| edit | measured effect on success (eval, paired) [95% CI] p | gate (" + decided_on
             + ") [Holm CI] | GEPA first minibatch | GEPA P(admit) (skipped) |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in report["rows"]:
        effect, gate, gepa = row["effect"], row["gate"], row["gepa"]
        ci = effect.get("bootstrap_ci")
        interval = "n/a" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"
        first = {None: "skipped", True: "admit", False: "reject"}[gepa["first_admitted"]]
        verdict = "not run" if gate is None else (
            f"{gate['status']} {_signed(gate['coefficient'])} [{_signed(gate['ci_low'])}, {_signed(gate['ci_high'])}]")
        lines.append(f"| {row['edit']} | {effect['difference']:+.3f} {interval} p={effect['p_value']:.3f} "
                     f"({effect['episodes']} episodes) | {verdict} | {first} | "
                     f"{gepa['admit_rate']:.2f} ({gepa['skip_rate']:.2f}) |")  # fmt: skip
    budget = ("Gate not run (--no-gate); the fixed design would run " + f"{report['fixed_design_episodes']} episodes."
              if report["gate_episodes"] is None
              else f"Gate episodes: {report['gate_episodes']} (the fixed design's: {report['fixed_design_episodes']}).")
    lines += ["", budget,
              f"GEPA's returned program (highest mean of none / each edit on the eval's episodes): "
              f"{report['gepa_final_pick']}."]  # fmt: skip
    return lines


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.3f}"

"""Benchmark: false selection when rounds reuse the validation tasks adaptively (docs/gate.md, "Validation reuse").

Simulates chains of N rounds. Every round's gate is the shipped default (`DesignConfig()`: budget from
power, sequential looks) run through the real code (`plan_gate`, `estimate_effects`, `decide_look`), with
its own design seed (fresh masks, sampling and environment seeds, as `shopsimrl/round/seeds.py` gives
every round). What carries over between rounds is the validation tasks and the proposer's memory.

Outcome model: task base success Beta(2, 2); a candidate's effect on task t is its population effect mu
(scaled by the room the task leaves, bench_gate.py's `uniform`) plus a task-specific part 0.12 * eta_t,
eta ~ N(0, 1) per (candidate, task): on any finite task set a null edit (mu = 0) helps or hurts a little,
and a proposer that learns from earlier gates on the same tasks can exploit that. A selection is
false when the edit's population effect mu <= 0 (it would not help on new tasks). Fresh edits: mu =
+0.10, 0, -0.10 with probabilities 1/4, 1/2, 1/4. K = 4 candidates per round.

Proposers (what the next round's pool is made of):
* `fresh`: four new edits every round (no adaptivity: the per-gate baseline);
* `retest`: each edit left `insufficient` comes back once more with probability 1/2 (the ledger lets
  it), the rest are new: what the Analyst does today (it reads verdicts, not coefficients);
* `exploit`: the two `insufficient` edits with the largest coefficients come back, plus a variant of the
  best of them that shares 80% of its task-specific pattern and adds nothing on new tasks (mu = 0),
  plus one new edit: an Analyst that reads coefficients and chases them (an upper scenario).

Task policies: `same` (every round the same 62 tasks: production, whose validation split has 62);
`fresh` (62 new tasks every round: needs 62 x N tasks in the split); `half` (62 of a 124-task pool,
drawn per round).

    nice -n 19 .venv/bin/python bench/bench_reuse.py --chains 60 --rounds 10
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_gate import cpu_model, wilson  # noqa: E402

from shopsimrl.gate.config import DesignConfig  # noqa: E402
from shopsimrl.gate.estimate import PairObservation, Status, estimate_effects  # noqa: E402
from shopsimrl.gate.plan import plan_gate  # noqa: E402
from shopsimrl.gate.sequential import decide_look  # noqa: E402

K = 4
TASKS = 62
TASK_SD = 0.12  # the task-to-task spread of an edit's effect (bench_gate.py's `some` pattern has 0.12)
VARIANT_SHARE = 0.8  # `exploit`: the variant's task pattern correlates 0.8 with its parent's
MEAN_BASE = 0.5


@dataclass
class Edit:
    mu: float  # population effect on P(success)
    eta: np.ndarray  # task-specific pattern over the whole pool (N(0, 1) per task)
    tests: int = 0


def _fresh_edit(rng: np.random.Generator, pool: int) -> Edit:
    mu = rng.choice([0.10, 0.0, -0.10], p=[0.25, 0.5, 0.25])
    return Edit(float(mu), rng.normal(size=pool))


def run_gate(edits: list[Edit], tasks: np.ndarray, base: np.ndarray, design: DesignConfig, seed: int,
             rng: np.random.Generator) -> tuple[list[Status], list[float | None], int]:
    """One gate on the pool's `tasks`: (statuses, coefficients, pairs analysed)."""
    candidates = [f"c{j}" for j in range(len(edits))]
    task_ids = [f"validation-{t:05d}" for t in tasks]
    plan = plan_gate(design.model_copy(update={"seed": seed}), task_ids, candidates)
    pairs = plan.design.pairs
    index = {task_id: t for task_id, t in zip(task_ids, tasks, strict=True)}
    observations = []
    for pair in pairs:
        t = index[pair.task_id]
        y = []
        for mask in (pair.mask_a, pair.mask_b):
            p = base[t]
            for c in mask:
                edit = edits[int(c[1:])]
                room = (1.0 - base[t]) / (1.0 - MEAN_BASE) if edit.mu > 0 else base[t] / MEAN_BASE
                p += edit.mu * room + TASK_SD * edit.eta[t]
            y.append(float(rng.random() < min(max(p, 0.0), 1.0)))
        observations.append(PairObservation(pair.task_id, tuple(plan.design.indicators(pair)), y[0], y[1]))
    min_effect = design.min_effect_for(design.outcome)
    for look in plan.looks:
        estimate = estimate_effects(observations[: look.pairs], candidates, alpha=look.alpha, min_effect=min_effect)
        if decide_look(estimate, look, plan.looks, min_effect=min_effect, futility=design.futility).stop:
            return [e.status for e in estimate.effects], [e.coefficient for e in estimate.effects], look.pairs
    raise AssertionError("the last look always stops")


def run_chain(policy: str, proposer: str, rounds: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    pool = {"same": TASKS, "half": 2 * TASKS, "fresh": TASKS * rounds}[policy]
    base = rng.beta(2.0, 2.0, size=pool)
    design = DesignConfig(tasks=TASKS)
    edits = [_fresh_edit(rng, pool) for _ in range(K)]
    out = []
    for r in range(rounds):
        if policy == "same":
            tasks = np.arange(TASKS)
        elif policy == "fresh":
            tasks = np.arange(r * TASKS, (r + 1) * TASKS)
        else:
            tasks = np.sort(rng.choice(pool, size=TASKS, replace=False))
        statuses, coefficients, pairs = run_gate(edits, tasks, base, design, seed * 1000 + r, rng)
        for edit in edits:
            edit.tests += 1
        false = [s is Status.SELECTED and e.mu <= 0 for e, s in zip(edits, statuses, strict=True)]
        out.append({"round": r, "false_any": any(false), "false": sum(false),
                    "nulls": sum(e.mu <= 0 for e in edits), "retests": sum(e.tests > 1 for e in edits),
                    "pairs": pairs})
        open_ = [(c if c is not None else -1.0, j) for j, (s, c) in enumerate(zip(statuses, coefficients, strict=True))
                 if s is Status.INSUFFICIENT]
        if proposer == "fresh":
            nxt: list[Edit] = []
        elif proposer == "retest":
            nxt = [edits[j] for _, j in open_ if edits[j].tests < 2 and rng.random() < 0.5]
        else:
            best = [edits[j] for _, j in sorted(open_, reverse=True)[:2]]
            nxt = list(best)
            if best:
                parent = best[0]
                eta = VARIANT_SHARE * parent.eta + np.sqrt(1 - VARIANT_SHARE**2) * rng.normal(size=pool)
                nxt.append(Edit(0.0, eta))
        edits = nxt[:K] + [_fresh_edit(rng, pool) for _ in range(K - len(nxt[:K]))]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=20, help="simulated chains of rounds per cell")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--policies", nargs="+", default=["same", "half", "fresh"], choices=["same", "half", "fresh"])
    parser.add_argument("--proposers", nargs="+", default=["fresh", "retest", "exploit"],
                        choices=["fresh", "retest", "exploit"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    run_chain("same", "fresh", 1, 0)
    gc.freeze()  # bench_gate.py: statsmodels' gc.collect() would dominate
    started, cpu_started = time.perf_counter(), time.process_time()
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    rows = []
    for p, policy in enumerate(args.policies):
        for q, proposer in enumerate(args.proposers):
            t0 = time.perf_counter()
            gates = [g for c in range(args.chains) for g in run_chain(policy, proposer, args.rounds,
                                                                      seed=10_000 * (10 * p + q) + c)]
            late = [g for g in gates if g["round"] >= 2]
            rows.append({
                "policy": policy, "proposer": proposer, "gates": len(gates),
                "false_per_gate": wilson(sum(g["false_any"] for g in gates), len(gates)),
                "false_per_gate_from_round_3": wilson(sum(g["false_any"] for g in late), len(late)),
                "false_per_null": wilson(sum(g["false"] for g in gates), sum(g["nulls"] for g in gates)),
                "retested_share": sum(g["retests"] for g in gates) / (K * len(gates)),
                "mean_episodes": 2 * float(np.mean([g["pairs"] for g in gates])),
            })
            print(f"  {policy:<6} {proposer:<8} {len(gates)} gates {time.perf_counter() - t0:6.1f} s",
                  file=sys.stderr, flush=True)
    print(f"\ncpu: {cpu_model()}; command: {command}; {args.chains} chains x {args.rounds} rounds per cell; "
          f"wall {time.perf_counter() - started:.0f} s, cpu {time.process_time() - cpu_started:.0f} s")
    print("| tasks per round | proposer | gates | false selection per gate | from round 3 on | per null edit "
          "| edits retested | mean episodes |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        cells = [f"{row[k][0]:.3f} [{row[k][1]:.3f}, {row[k][2]:.3f}]"
                 for k in ("false_per_gate", "false_per_gate_from_round_3", "false_per_null")]
        print(f"| {row['policy']} | {row['proposer']} | {row['gates']} | {' | '.join(cells)} | "
              f"{row['retested_share']:.2f} | {row['mean_episodes']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

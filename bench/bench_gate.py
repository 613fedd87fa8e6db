"""Benchmark: statistical validity of the online gate's design, estimator and selection rule.

Runs the real code (`shopsimrl.gate.design.build_design` for the masks, `estimate_effects` for the
clustered OLS, Holm and the selection rule) on a simulated policy, many simulated gates per setting,
and reports with 95% Wilson intervals:

* power: how often a candidate with a +0.10 effect on success is `selected` (goal >= 0.8);
* false selection of a null candidate and of a -0.10 candidate (goal <= 5%);
* for K = 1, 4 and 8 candidates, with at most 200 validation tasks.

Simulated policy: task base success `sigmoid(-0.4 + z_t)`, `z_t ~ N(0, 1)` (the reference's model,
mean success ~0.42) plus replicate noise `N(0, 0.5)` on the logit shared by the two episodes of a
pair (same seed); planted chunk effects added to the success probability; an interaction between
the +0.10 and the -0.10 chunk (-0.05 when both are on; main effects shifted so that the average
effects are exactly the planted ones); technical failures: every attempt fails with probability
0.05 and is re-run up to 3 times, and 1% of tasks always fail (their pairs are unscorable and drop
out). The two draws of a pair are independent (`--coupling 0`, the conservative default: an LLM
with a different prompt couples only partly); `--coupling c` reuses the first draw with probability c.

The peer, measured in the same run: the same budget with pairing `bare` (arm b runs no
candidate), the issue's literal design and the costliest variant (reference/gate_design.md).

    .venv/bin/python bench/bench_gate.py                 # quick: 60 gates per setting
    .venv/bin/python bench/bench_gate.py --gates 500     # the run recorded in docs/gate.md
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shopsimrl.gate.config import DesignConfig, Pairing  # noqa: E402
from shopsimrl.gate.design import build_design  # noqa: E402
from shopsimrl.gate.estimate import PairObservation, Status, estimate_effects  # noqa: E402

INTERACTION = -0.05  # added to P(success) when the +0.10 and the -0.10 chunk are both on
ATTEMPT_FAILURE = 0.05
MAX_ATTEMPTS = 3
BROKEN_TASKS = 0.01
REPLICATE_SD = 0.5


@dataclass(frozen=True)
class Setting:
    label: str
    effects: tuple[float, ...]  # average effect of each candidate on P(success)
    interaction: bool


def settings_for(k: int) -> list[Setting]:
    if k == 1:  # one candidate: one setting per planted effect
        return [Setting(f"K=1, effect {e:+.2f}", (e,), False) for e in (0.10, 0.0, -0.10)]
    base = [0.10, 0.0, -0.10, 0.0, 0.05, 0.0, -0.05, 0.0][:k]
    return [Setting(f"K={k}", tuple(base), True)]


def simulate_gate(setting: Setting, *, tasks: int, replicates: int, pairing: Pairing, coupling: float,
                  seed: int, alpha: float, min_effect: float) -> tuple[list[Status], int]:
    """One simulated gate: (status per candidate, episodes run including re-runs)."""
    rng = np.random.default_rng(seed)
    k = len(setting.effects)
    candidates = [f"c{j}" for j in range(k)]
    task_ids = [f"validation-{t:05d}" for t in range(tasks)]
    design = build_design(task_ids, candidates=candidates, replicates=replicates, pairing=pairing, seed=seed)
    main = np.array(setting.effects, dtype=np.float64)
    if setting.interaction:  # keep the average effects at the planted values under the 1/2 design
        main[0] -= INTERACTION / 2
        main[2] -= INTERACTION / 2
    z = rng.normal(size=tasks)
    broken = rng.random(tasks) < BROKEN_TASKS
    n = len(design.pairs)
    on = np.zeros((2, n, k))
    for i, pair in enumerate(design.pairs):
        for arm, mask in enumerate((pair.mask_a, pair.mask_b)):
            for c in mask:
                on[arm, i, int(c[1:])] = 1.0
    task_index = np.repeat(np.arange(tasks), replicates)
    logit = -0.4 + z[task_index] + rng.normal(scale=REPLICATE_SD, size=n)
    base = 1.0 / (1.0 + np.exp(-logit))
    p = base[None, :] + on @ main
    if setting.interaction:
        p += INTERACTION * on[:, :, 0] * on[:, :, 2]
    p = np.clip(p, 0.0, 1.0)
    u_a = rng.random(n)
    u_b = np.where(rng.random(n) < coupling, u_a, rng.random(n))
    y = np.stack([u_a, u_b]) < p
    # technical failures: attempts until one succeeds (at most MAX_ATTEMPTS); broken tasks always fail
    attempts = np.minimum(rng.geometric(1.0 - ATTEMPT_FAILURE, size=(2, n)), MAX_ATTEMPTS + 1)
    scored = (attempts <= MAX_ATTEMPTS) & ~broken[task_index][None, :]
    episodes = int(np.where(broken[task_index][None, :], MAX_ATTEMPTS, np.minimum(attempts, MAX_ATTEMPTS)).sum())
    observations = [
        PairObservation(pair.task_id, tuple(design.indicators(pair)), float(y[0, i]), float(y[1, i]))
        for i, pair in enumerate(design.pairs)
        if scored[0, i] and scored[1, i]
    ]
    estimate = estimate_effects(observations, candidates, alpha=alpha, min_effect=min_effect)
    return [effect.status for effect in estimate.effects], episodes


def wilson(successes: int, trials: int) -> tuple[float, float, float]:
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(successes, trials, alpha=0.05, method="wilson")
    return successes / trials, float(low), float(high)


def run_setting(setting: Setting, *, gates: int, tasks: int, replicates: int, pairing: Pairing, coupling: float,
                alpha: float, min_effect: float, seed_base: int) -> dict:
    counts: dict[str, list[int]] = {"pos": [0, 0], "null": [0, 0], "neg": [0, 0], "null_rejected": [0, 0],
                                    "any_null": [0, 0]}
    episodes = []
    started = time.perf_counter()
    for g in range(gates):
        statuses, cost = simulate_gate(setting, tasks=tasks, replicates=replicates, pairing=pairing,
                                       coupling=coupling, seed=seed_base + g, alpha=alpha, min_effect=min_effect)
        episodes.append(cost)
        any_null = False
        for effect, status in zip(setting.effects, statuses, strict=True):
            selected = status is Status.SELECTED
            kind = "pos" if effect >= 0.10 else "neg" if effect <= -0.10 else "null" if effect == 0 else None
            if kind is None:
                continue
            counts[kind][0] += selected
            counts[kind][1] += 1
            if kind == "null":
                counts["null_rejected"][0] += status is Status.REJECTED
                counts["null_rejected"][1] += 1
                any_null |= selected
        if any(e == 0 for e in setting.effects):
            counts["any_null"][0] += any_null
            counts["any_null"][1] += 1
        if (g + 1) % max(1, gates // 10) == 0 or g + 1 == gates:
            print(f"\r  {pairing.value:<10} {setting.label:<18} {g + 1}/{gates} gates", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    row = {"setting": setting.label, "pairing": pairing.value, "tasks": tasks, "replicates": replicates,
           "planned_episodes": 2 * tasks * replicates, "mean_episodes_run": float(np.mean(episodes)),
           "gates": gates, "seconds_per_gate": (time.perf_counter() - started) / gates}
    for key, (hits, trials) in counts.items():
        if trials:
            row[key] = wilson(hits, trials)
    return row


def _fmt(cell: tuple[float, float, float] | None) -> str:
    return "-" if cell is None else f"{cell[0]:.3f} [{cell[1]:.3f}, {cell[2]:.3f}]"


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return platform.processor() or "unknown"
    for line in out.splitlines():
        if line.startswith("Model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    defaults = DesignConfig()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gates", type=int, default=60, help="simulated gates per setting (500 for the recorded run)")
    parser.add_argument("--tasks", type=int, default=defaults.tasks)
    parser.add_argument("--replicates", type=int, default=defaults.replicates)
    parser.add_argument("--coupling", type=float, default=0.0, help="probability that arm b reuses arm a's draw")
    parser.add_argument("--k", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--no-peer", action="store_true", help="skip the bare-pairing peer")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    # statsmodels' Holm ends with gc.collect(); with statsmodels, scipy and pandas loaded that full
    # collection costs ~0.1 s, 90% of a simulated gate. Freezing the import-time heap makes it cheap
    # without changing any result (the gate itself calls it twice per run and does not care).
    simulate_gate(settings_for(1)[0], tasks=4, replicates=2, pairing=Pairing.COMPLEMENT, coupling=0.0, seed=0,
                  alpha=0.05, min_effect=0.10)
    gc.freeze()
    pairings = [Pairing.COMPLEMENT] + ([] if args.no_peer else [Pairing.BARE])
    started = time.perf_counter()
    print(f"cpu: {cpu_model()}; command: {' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}", file=sys.stderr)
    rows = []
    for pairing in pairings:
        for index, k in enumerate(args.k):
            for offset, setting in enumerate(settings_for(k)):
                rows.append(run_setting(setting, gates=args.gates, tasks=args.tasks, replicates=args.replicates,
                                        pairing=pairing, coupling=args.coupling, alpha=defaults.alpha,
                                        min_effect=defaults.min_effect, seed_base=1_000_000 * (10 * index + offset)))
    print(f"\ncpu: {cpu_model()}; {args.gates} gates per setting; coupling {args.coupling}; "
          f"wall {time.perf_counter() - started:.1f} s")
    print("| pairing | setting | tasks x reps | episodes planned (run) | power at +0.10 | false sel. null "
          "| false sel. -0.10 | any null selected | null rejected | s/gate |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['pairing']} | {row['setting']} | {row['tasks']} x {row['replicates']} | "
              f"{row['planned_episodes']} ({row['mean_episodes_run']:.0f}) | {_fmt(row.get('pos'))} | "
              f"{_fmt(row.get('null'))} | {_fmt(row.get('neg'))} | {_fmt(row.get('any_null'))} | "
              f"{_fmt(row.get('null_rejected'))} | {row['seconds_per_gate']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

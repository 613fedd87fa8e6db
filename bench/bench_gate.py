"""Benchmark: the online gate's decisions under heterogeneous outcome models, fixed vs sequential.

Runs the real code on simulated policies, many simulated gates per setting: `build_design` for the
masks, `estimate_effects` (clustered OLS, Holm, the selection rule) at every look, and for the
sequential gate `pairs_for_power` (its budget), `look_plan` and `decide_look` (its stopping rule).
Reported with 95% Wilson intervals:

* power: how often a candidate whose average effect on success is +0.10 is `selected` (goal >= 0.8);
* false selection of a null candidate, per candidate and per gate (goal <= 5% per gate), and of a
  -0.10 candidate;
* episodes run (planned pairs x 2 plus re-runs of technical failures), fixed vs sequential
  (goal at K = 4: <= 65% of the fixed design's 1,200).

Designs: `fixed` is the design shipped before the sequential gate (200 tasks x 3 replicates, one analysis);
`sequential` is the default `DesignConfig()` (budget from power for K under power.py's planning model, looks,
spending, both futility rules).

Outcome models (`MODELS`): a task's base success b_t, plus per candidate k an effect e_kt:
* base `reference`: sigmoid(-0.4 + z_t + e), z_t ~ N(0, 1), e ~ N(0, 0.5) shared by a pair's two
  episodes (docs/gate.md, "Power analysis"); `spread`: Beta(2, 2) (2 E[b(1-b)] = 0.4, near the 0.5
  ceiling); `bimodal`: Beta(0.3, 0.7) (most tasks nearly always fail or succeed); `half`: every
  task at 0.5 (the ceiling of the paired variance, a worst case);
* effects `uniform`: on every task, scaled by the room the task leaves (a helpful edit adds
  e (1 - b_t) / (1 - E b), a harmful one takes e b_t / E b), so the average over tasks is e and no
  probability leaves [0, 1] for one candidate; `some`: each candidate acts on its own random 40% of
  the tasks, 2.5 x as strongly (its effect's task-to-task SD is >= 0.12 at e = 0.10);
* `interacting`: candidates 1 and 3 (null on average) are worth +0.14 each alone and nothing
  together (an interaction of -0.28), beside the +0.10 candidate 0.
The two draws of a pair are independent (no common-random-number coupling: conservative). Technical
failures: each attempt fails with probability 0.05 and is re-run up to 3 times; 1% of the tasks
always fail (their pairs are unscorable and drop out).

    .venv/bin/python bench/bench_gate.py                  # quick: 60 gates per setting
    nice -n 19 .venv/bin/python bench/bench_gate.py --gates 300 --json /tmp/gate.json   # docs/gate.md
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shopsimrl.gate.config import DesignConfig  # noqa: E402
from shopsimrl.gate.estimate import PairObservation, Status, estimate_effects  # noqa: E402
from shopsimrl.gate.plan import plan_gate  # noqa: E402
from shopsimrl.gate.power import PLANNING  # noqa: E402
from shopsimrl.gate.sequential import decide_look  # noqa: E402

ATTEMPT_FAILURE = 0.05
MAX_ATTEMPTS = 3
BROKEN_TASKS = 0.01
REPLICATE_SD = 0.5
SOME_SHARE = 0.4  # `some`: the share of tasks a candidate acts on
INTERACTION_MAIN, INTERACTION = 0.14, -0.28  # `interacting`: candidates 1 and 3
FIXED = DesignConfig(replicates=3, looks=1)  # the design shipped before the sequential gate: 200 x 3, one analysis
POOL = 200  # validation tasks available to the simulated gates


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class OutcomeModel:
    name: str
    base: Callable[[np.random.Generator, int], np.ndarray]  # task-level base success (or logit for reference)
    mean_base: float  # E b over tasks (the room scaling's denominator)
    logit: bool  # base is a logit, with replicate noise added per pair
    pattern: str  # "uniform" or "some"
    interacting: bool


def _mean_reference() -> float:
    rng = np.random.default_rng(12345)
    return float(_sigmoid(-0.4 + rng.normal(size=400_000) + rng.normal(scale=REPLICATE_SD, size=400_000)).mean())


MODELS = {
    "reference": OutcomeModel("reference", lambda rng, n: -0.4 + rng.normal(size=n), _mean_reference(), True,
                              "uniform", False),
    "spread": OutcomeModel("spread", lambda rng, n: rng.beta(2.0, 2.0, size=n), 0.5, False, "uniform", False),
    "spread-some": OutcomeModel("spread-some", lambda rng, n: rng.beta(2.0, 2.0, size=n), 0.5, False, "some", False),
    "bimodal-some": OutcomeModel("bimodal-some", lambda rng, n: rng.beta(0.3, 0.7, size=n), 0.3, False, "some",
                                 False),
    "spread-interacting": OutcomeModel("spread-interacting", lambda rng, n: rng.beta(2.0, 2.0, size=n), 0.5, False,
                                       "uniform", True),
    "half": OutcomeModel("half", lambda rng, n: np.full(n, 0.5), 0.5, False, "uniform", False),
}


@dataclass(frozen=True)
class Setting:
    label: str
    effects: tuple[float, ...]  # average effect of each candidate on P(success)


SETTINGS = {
    1: [Setting("K=1 +0.10", (0.10,)), Setting("K=1 null", (0.0,))],
    4: [Setting("K=4 mixed", (0.10, 0.0, -0.10, 0.0)), Setting("K=4 null", (0.0, 0.0, 0.0, 0.0))],
    8: [Setting("K=8 mixed", (0.10, 0.0, -0.10, 0.0, 0.05, 0.0, -0.05, 0.0))],
}


def _probabilities(model: OutcomeModel, setting: Setting, rng: np.random.Generator, task_index: np.ndarray,
                   on: np.ndarray, tasks: int) -> np.ndarray:
    """P(success) of both arms of every pair, shape (2, pairs)."""
    k = len(setting.effects)
    base_t = model.base(rng, tasks)
    if model.logit:
        base = _sigmoid(base_t[task_index] + rng.normal(scale=REPLICATE_SD, size=len(task_index)))
    else:
        base = base_t[task_index]
    effects = np.zeros((len(task_index), k))
    for j, e in enumerate(setting.effects):
        if model.interacting and j in (1, 3):
            effects[:, j] = INTERACTION_MAIN
            continue
        room = (1.0 - base) / (1.0 - model.mean_base) if e > 0 else base / model.mean_base
        acts = np.ones(tasks)
        if model.pattern == "some":
            acts = (rng.random(tasks) < SOME_SHARE) / SOME_SHARE
        effects[:, j] = e * room * acts[task_index]
    p = base[None, :] + np.einsum("apk,pk->ap", on, effects)
    if model.interacting and k >= 4:
        p += INTERACTION * on[:, :, 1] * on[:, :, 3]
    return np.clip(p, 0.0, 1.0)


def simulate_gate(model: OutcomeModel, setting: Setting, design_config: DesignConfig, *,
                  seed: int) -> tuple[list[Status], int, int, int]:
    """One simulated gate, planned as the stage plans it (`plan_gate`): (status per candidate, episodes run
    including re-runs, the look it stopped at, planned pairs)."""
    rng = np.random.default_rng(seed)
    k = len(setting.effects)
    candidates = [f"c{j}" for j in range(k)]
    task_ids = [f"validation-{t:05d}" for t in range(POOL)]
    plan = plan_gate(design_config.model_copy(update={"seed": seed}), task_ids, candidates)
    design = plan.design
    n = len(design.pairs)
    on = np.zeros((2, n, k))
    task_index = np.empty(n, dtype=np.int64)
    index_of = {task_id: t for t, task_id in enumerate(task_ids)}
    for i, pair in enumerate(design.pairs):
        task_index[i] = index_of[pair.task_id]
        for arm, mask in enumerate((pair.mask_a, pair.mask_b)):
            for c in mask:
                on[arm, i, int(c[1:])] = 1.0
    p = _probabilities(model, setting, rng, task_index, on, POOL)
    y = rng.random((2, n)) < p
    broken = (rng.random(POOL) < BROKEN_TASKS)[task_index]
    attempts = np.minimum(rng.geometric(1.0 - ATTEMPT_FAILURE, size=(2, n)), MAX_ATTEMPTS + 1)
    scored = (attempts <= MAX_ATTEMPTS).all(axis=0) & ~broken
    cost = np.where(broken[None, :], MAX_ATTEMPTS, np.minimum(attempts, MAX_ATTEMPTS)).sum(axis=0)
    observations = [
        PairObservation(pair.task_id, tuple(design.indicators(pair)), float(y[0, i]), float(y[1, i]))
        for i, pair in enumerate(design.pairs)
    ]
    min_effect = design_config.min_effect_for(design_config.outcome)
    for look in plan.looks:
        used = [obs for obs, ok in zip(observations[: look.pairs], scored[: look.pairs], strict=True) if ok]
        estimate = estimate_effects(used, candidates, alpha=look.alpha, min_effect=min_effect)
        decision = decide_look(estimate, look, plan.looks, min_effect=min_effect, futility=design_config.futility)
        if decision.stop:
            return [effect.status for effect in estimate.effects], int(cost[: look.pairs].sum()), look.index, n
    raise AssertionError("the last look always stops")


def wilson(successes: int, trials: int) -> tuple[float, float, float]:
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(successes, trials, alpha=0.05, method="wilson")
    return successes / trials, float(low), float(high)


def run_setting(model: OutcomeModel, setting: Setting, design_config: DesignConfig, *, name: str, gates: int,
                seed_base: int) -> dict:
    counts: dict[str, list[int]] = {"pos": [0, 0], "null": [0, 0], "neg": [0, 0], "any_null": [0, 0]}
    episodes, looks = [], []
    started = time.perf_counter()
    for g in range(gates):
        statuses, cost, look, pairs = simulate_gate(model, setting, design_config, seed=seed_base + g)
        episodes.append(cost)
        looks.append(look)
        any_null = False
        for effect, status in zip(setting.effects, statuses, strict=True):
            kind = "pos" if effect >= 0.10 else "neg" if effect <= -0.10 else "null" if effect == 0 else None
            if kind is None:
                continue
            selected = status is Status.SELECTED
            counts[kind][0] += selected
            counts[kind][1] += 1
            any_null |= kind == "null" and selected
        if any(e == 0 for e in setting.effects):
            counts["any_null"][0] += any_null
            counts["any_null"][1] += 1
    print(f"  {model.name:<19} {setting.label:<10} {name:<10} {gates} gates "
          f"{time.perf_counter() - started:6.1f} s", file=sys.stderr, flush=True)
    row = {"model": model.name, "setting": setting.label, "design": name, "gates": gates,
           "planned_episodes": 2 * pairs, "mean_episodes": float(np.mean(episodes)),
           "episodes_sd": float(np.std(episodes)), "mean_look": float(np.mean(looks)),
           "seconds_per_gate": (time.perf_counter() - started) / gates}
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


def table(rows: list[dict]) -> list[str]:
    """One line per (model, setting): fixed and sequential side by side."""
    lines = [
        "| model | setting | power at +0.10: fixed / sequential | false sel. null, per gate: fixed / sequential "
        "| false sel. -0.10: fixed / seq. | episodes: fixed / sequential (planned max, mean look) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    by_key = {(r["model"], r["setting"], r["design"]): r for r in rows}
    for model, setting in dict.fromkeys((r["model"], r["setting"]) for r in rows):
        fixed, seq = by_key.get((model, setting, "fixed")), by_key.get((model, setting, "sequential"))

        def both(key: str, fixed: dict | None = fixed, seq: dict | None = seq) -> str:
            cells = [_fmt(r.get(key)) if r else "-" for r in (fixed, seq)]
            return "-" if cells == ["-", "-"] else " / ".join(cells)

        episodes = " / ".join(
            [f"{fixed['mean_episodes']:.0f}" if fixed else "-"]
            + ([f"{seq['mean_episodes']:.0f} ({seq['planned_episodes']}, {seq['mean_look']:.2f}; "
                f"{seq['mean_episodes'] / fixed['mean_episodes']:.0%})" if fixed else f"{seq['mean_episodes']:.0f}"]
               if seq else ["-"])
        )
        lines.append(f"| {model} | {setting} | {both('pos')} | {both('any_null')} | {both('neg')} | {episodes} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gates", type=int, default=60, help="simulated gates per setting and design")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--k", type=int, nargs="+", default=[1, 4, 8], choices=[1, 4, 8])
    parser.add_argument("--designs", nargs="+", default=["fixed", "sequential"], choices=["fixed", "sequential"])
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    # statsmodels' Holm ends with gc.collect(); with statsmodels, scipy and pandas loaded that full
    # collection dominates a simulated gate. Freezing the import-time heap makes it cheap without
    # changing any result.
    simulate_gate(MODELS["spread"], SETTINGS[1][0], FIXED, seed=0)
    gc.freeze()
    started, cpu_started = time.perf_counter(), time.process_time()
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    print(f"cpu: {cpu_model()}; command: {command}", file=sys.stderr)
    rows = []
    for m, name in enumerate(args.models):
        for k in args.k:
            for s, setting in enumerate(SETTINGS[k]):
                for design in args.designs:
                    config = FIXED if design == "fixed" else DesignConfig()
                    rows.append(run_setting(MODELS[name], setting, config, name=design, gates=args.gates,
                                            seed_base=1_000_000 * (100 * m + 10 * k + s)))
    defaults = DesignConfig()
    print(f"\ncpu: {cpu_model()}; command: {command}; {args.gates} gates per setting and design; wall "
          f"{time.perf_counter() - started:.0f} s, cpu {time.process_time() - cpu_started:.0f} s")
    print(f"sequential = DesignConfig(): replicates {defaults.replicates} (planning model: pair variance "
          f"{PLANNING.pair_variance:g}, effect sd {PLANNING.effect_sd:g}), looks {defaults.looks}, spending alpha t^"
          f"{defaults.spending_rho:g}, futility {defaults.futility:g}, futility_trend {defaults.futility_trend:g}; "
          f"fixed = 200 x 3, one look; alpha {defaults.alpha:g}, min_effect {defaults.min_effect_success:g}")
    print("\n".join(table(rows)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Does the loop help on the CPU? Chained rounds with and without the Analyst and gate (docs/local_backend.md).

Runs, each through the real CLI in a subprocess:

1. the loop: `shopsimrl training rounds CONFIG --count N` (train -> Analyst -> gate, each round from the
   last one's checkpoint with the skillbank its gate selected);
2. the control: the same chain with the same seeds (round.seed and the index), but
   `analysis.trial.enabled: false`: no lesson becomes a candidate, the gate selects nothing and the
   skillbank stays frozen: training alone;
3. `shopsimrl eval` on one fixed plan (validation tasks x seeds, no skill chunks in the prompt, so
   every evaluation is pairable) of round 000's start (the cached warm start) and of every round's
   final checkpoint in both chains; each against the start and each loop round against the control
   round of the same index (`--compare`: paired, task-bootstrap interval).

    .venv/bin/python bench/loop_run.py [--config configs/local/demo_round.yaml] [--rounds 3] \
        [--name loop] [--tasks 40] [--seeds 2] [--json runs/loop-rounds/loop_run.json]

Prints the machine (CPU model, cores), every command with its wall time, and the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from learning_run import CLI, ROOT, cpu_model, run  # bench/ is the script's own directory: one copy of each


def group(name: str, index: int) -> str:
    return f"{name}-round-{index:03d}"


def final_checkpoint(round_dir: Path) -> str:
    state = json.loads((round_dir / "round_state.json").read_text(encoding="utf-8"))
    return state["stages"]["train"]["outputs"]["checkpoint"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local/demo_round.yaml")
    parser.add_argument("--eval-config", default="configs/local/eval.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="loop")
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--json", default=None, help="the summary (default runs/<name>-rounds/loop_run.json)")
    parser.add_argument("--table", default=None, help="only print the table of this earlier summary")
    args = parser.parse_args()
    if args.table:
        print_table(args.table)
        return

    log: list[dict[str, Any]] = []
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()}
    print(f"machine: {machine['cpu']}, {machine['cores']} cores", flush=True)
    started = time.perf_counter()
    control = f"{args.name}ctl"
    for name, extra in ((args.name, []), (control, ["--set", "analysis.trial.enabled=false"])):
        run([*CLI, "training", "rounds", args.config, "--count", str(args.rounds), "--no-wandb",
             "--set", f"round.group={group(name, 0)}", *extra], log)  # fmt: skip

    from shopsimrl.round import load_round_config

    first = load_round_config(ROOT / args.config, {"round.group": group(args.name, 0)})
    from shopsimrl.local.warm_start_cache import CACHE_DIR, MODEL_DIR, key_digest, warm_start_key

    start = Path(first.train_config().run.checkpoints_root) / CACHE_DIR
    start = start / key_digest(warm_start_key(first.train_config()))[:16] / MODEL_DIR
    eval_group = f"{args.name}-eval"
    plan = ["--group", eval_group, "--tasks", str(args.tasks), "--seeds", str(args.seeds), "--mask", "none",
            "--set", f"catalog.level={first.shopsim().catalog.level}",
            "--set", f"catalog.num_products={first.shopsim().catalog.num_products}",
            "--set", f"catalog.seed={first.shopsim().catalog.seed}",
            "--set", f"catalog.tools={first.shopsim().catalog.tools}", "--no-progress"]  # fmt: skip
    eval_dir = ROOT / "runs" / eval_group / "eval"
    run([*CLI, "eval", args.eval_config, "--checkpoint", str(start), "--name", "start", *plan], log)
    rows = []
    for index in range(args.rounds):
        row: dict[str, Any] = {"round": index}
        for name, label in ((control, "control"), (args.name, "loop")):
            checkpoint = final_checkpoint(ROOT / "runs" / group(name, index))
            compare = ["--compare", str(eval_dir / "start")]
            run([*CLI, "eval", args.eval_config, "--checkpoint", checkpoint, "--name", f"{label}-{index}", *plan,
                 *compare], log)  # fmt: skip
            row[label] = _eval_numbers(eval_dir / f"{label}-{index}")
        # The same evaluation directory again: every episode is there, only the comparison is new.
        run([*CLI, "eval", args.eval_config, "--checkpoint", final_checkpoint(ROOT / "runs" / group(args.name, index)),
             "--name", f"loop-{index}", *plan, "--compare", str(eval_dir / f"control-{index}")], log)
        row["loop_vs_control"] = _comparison(eval_dir / f"loop-{index}", f"control-{index}")
        row["gate"] = _gate(ROOT / "runs" / group(args.name, index))
        rows.append(row)
    start_numbers = _eval_numbers(eval_dir / "start")
    summary = {"machine": machine, "config": args.config, "rounds": args.rounds, "plan": plan,
               "start": start_numbers, "rows": rows, "commands": log,
               "wall_s": round(time.perf_counter() - started, 1)}  # fmt: skip
    out = Path(args.json) if args.json else ROOT / "runs" / f"{args.name}-rounds" / "loop_run.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(table(summary))
    print(f"summary: {out}\ntotal {summary['wall_s'] / 60:.1f} min", flush=True)


def _eval_numbers(directory: Path) -> dict[str, Any]:
    report = json.loads((directory / "eval_report.json").read_text(encoding="utf-8"))
    numbers = {"success": report["outcomes"]["success"], "reward": report["outcomes"]["reward"]}
    numbers["vs_start"] = _comparison(directory, "start")
    return numbers


def _comparison(directory: Path, before: str) -> dict[str, Any] | None:
    path = directory / f"comparison_vs_{before}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _gate(round_dir: Path) -> dict[str, Any]:
    path = round_dir / "gate" / "contributions.json"
    if not path.is_file():
        return {}
    document = json.loads(path.read_text(encoding="utf-8"))
    effects = document["estimates"][document["decided_on"]]["effects"]
    return {"decided_on": document["decided_on"],
            "effects": [{k: e[k] for k in ("intervention_id", "status", "coefficient", "ci_low", "ci_high")}
                        for e in effects]}  # fmt: skip


def _interval(numbers: dict[str, Any], key: str) -> str:
    value = numbers[key]
    low, high = value.get("wilson_ci") or value["bootstrap_ci"]
    return f"{value['mean']:.3f} [{low:.3f}, {high:.3f}]"


def _difference(comparison: dict[str, Any] | None, key: str) -> str:
    """A paired difference with its task-bootstrap interval and permutation p, or '-' without one."""
    if comparison is None:
        return "-"
    entry = comparison["outcomes"][key]
    low, high = entry["bootstrap_ci"]
    return f"{entry['difference']:+.3f} [{low:+.3f}, {high:+.3f}] p={entry['p_value']:.2f}"


def _gate_cell(gate: dict[str, Any]) -> str:
    if not gate.get("effects"):
        return "no candidate"
    return "; ".join(f"{e['intervention_id']}: {e['status']} {e['coefficient']:+.3f} [{e['ci_low']:+.3f}, "
                     f"{e['ci_high']:+.3f}]" if e.get("coefficient") is not None else
                     f"{e['intervention_id']}: {e['status']}" for e in gate["effects"])  # fmt: skip


def table(summary: dict[str, Any]) -> str:
    lines = ["| checkpoint | validation success [95% Wilson] | reward [95% CI] | success vs start (paired) "
             "| success vs control (paired) | gate of the round |",
             "| --- | --- | --- | --- | --- | --- |",
             f"| round 000 start (warm start) | {_interval(summary['start'], 'success')} | "
             f"{_interval(summary['start'], 'reward')} | - | - | - |"]  # fmt: skip
    for row in summary["rows"]:
        for label in ("control", "loop"):
            numbers = row[label]
            versus = _difference(row.get("loop_vs_control"), "success") if label == "loop" else "-"
            gate = _gate_cell(row.get("gate", {})) if label == "loop" else "frozen skillbank"
            lines.append(f"| round {row['round']:03d} {label} | {_interval(numbers, 'success')} | "
                         f"{_interval(numbers, 'reward')} | {_difference(numbers.get('vs_start'), 'success')} | "
                         f"{versus} | {gate} |")  # fmt: skip
    return "\n".join(lines)


def print_table(path: str) -> None:
    """The table of an earlier run's summary (`python bench/loop_run.py --table runs/loop-rounds/loop_run.json`)."""
    print(table(json.loads(Path(path).read_text(encoding="utf-8"))))


if __name__ == "__main__":
    main()

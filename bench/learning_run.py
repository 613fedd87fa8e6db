"""A measured learning run on ShopSim: does GRPO raise held-out success and reward? (docs/local_backend.md)

Runs, each through the real CLI in a subprocess:

1. `shopsimrl training run` with configs/local/learning_run.yaml: the demo model warm-started on the
   expert (that policy saved as `warm-start`), then GRPO for `driver.num_rollout` rollouts, a
   checkpoint every `driver.save_interval` rollouts;
2. `shopsimrl eval` of the warm-start checkpoint and of every saved GRPO checkpoint on one fixed
   plan (configs/local/eval.yaml's: validation tasks x seeds, same seeds for every checkpoint);
3. the final checkpoint against the warm start: `--compare` (paired, episode by episode);
4. the learning curve: training reward and success per rollout, and held-out success with its 95%
   interval at each evaluated checkpoint, as a PNG.

    .venv/bin/python bench/learning_run.py [--group learning-run-001] [--tasks 40] [--seeds 2] \
        [--set driver.num_rollout=12 ...] [--eval-set generator.concurrency=16 ...] \
        [--png docs/img/learning_curve.png] [--json out.json]

Prints the machine (CPU model, cores), every command with its wall time, and the before/after table.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "shopsimrl.cli"]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def run(command: list[str], log: list[dict[str, Any]]) -> float:
    print("$ " + " ".join(command), flush=True)
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    elapsed = time.perf_counter() - started
    log.append({"command": " ".join(command), "wall_s": round(elapsed, 1)})
    print(f"  ({elapsed / 60:.1f} min)", flush=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local/learning_run.yaml")
    parser.add_argument("--eval-config", default="configs/local/eval.yaml")
    parser.add_argument("--group", default=f"learning-run-{time.strftime('%Y%m%d-%H%M%S')}")
    parser.add_argument("--tasks", type=int, default=None, help="validation tasks per evaluation (eval config's)")
    parser.add_argument("--seeds", type=int, default=None, help="episodes per task (eval config's)")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="training config override")
    parser.add_argument("--eval-set", dest="eval_sets", action="append", default=[], help="eval config override")
    parser.add_argument("--skip-training", action="store_true", help="evaluate the group's existing checkpoints")
    parser.add_argument("--png", default=None, help="the learning curve (default runs/<group>/learning_curve.png)")
    parser.add_argument("--json", default=None, help="the summary (default runs/<group>/learning_run.json)")
    args = parser.parse_args()

    log: list[dict[str, Any]] = []
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()}
    print(f"machine: {machine['cpu']}, {machine['cores']} cores", flush=True)
    started = time.perf_counter()
    if not args.skip_training:
        sets = [f"run.group={args.group}", *args.sets]
        run([*CLI, "training", "run", "--config", args.config, "--no-progress",
             *[item for s in sets for item in ("--set", s)]], log)
    checkpoints = ROOT / "checkpoints" / args.group
    evaluated = sorted(p for p in checkpoints.iterdir() if (p / "checkpoint.json").is_file())
    evaluated.sort(key=lambda p: -1 if p.name == "warm-start" else int(p.name.split("-")[-1]))
    plan = [f"--group={args.group}"]
    plan += [f"--tasks={args.tasks}"] if args.tasks else []
    plan += [f"--seeds={args.seeds}"] if args.seeds else []
    eval_dirs = []
    for checkpoint in evaluated:
        name = checkpoint.name
        extra = ["--compare", str(ROOT / "runs" / args.group / "eval" / "warm-start")] \
            if checkpoint == evaluated[-1] and evaluated[0].name == "warm-start" and len(evaluated) > 1 else []
        run([*CLI, "eval", args.eval_config, "--checkpoint", str(checkpoint), "--name", name,
             *plan, *[item for s in args.eval_sets for item in ("--set", s)], *extra], log)
        eval_dirs.append(ROOT / "runs" / args.group / "eval" / name)
    summary = summarize(args.group, eval_dirs, machine, log, time.perf_counter() - started)
    png = Path(args.png) if args.png else ROOT / "runs" / args.group / "learning_curve.png"
    plot(png, summary)
    out = Path(args.json) if args.json else ROOT / "runs" / args.group / "learning_run.json"
    out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(f"curve: {png}\nsummary: {out}\ntotal {summary['wall_s'] / 60:.1f} min", flush=True)


def summarize(group: str, eval_dirs: list[Path], machine: dict[str, Any], log: list[dict[str, Any]],
              wall: float) -> dict[str, Any]:
    from shopsimrl.metrics import names as m
    from shopsimrl.storage import read_jsonl

    training = []
    metrics = ROOT / "runs" / group / "train" / "metrics.jsonl"
    for record in read_jsonl(metrics, strict_middle=False).records if metrics.exists() else []:
        if m.ROLLOUT_STEP.name in record and m.REWARD_MEAN.name in record:
            training.append({"rollout": record[m.ROLLOUT_STEP.name], "reward": record[m.REWARD_MEAN.name],
                             "success": record.get(m.SUCCESS_RATE.name)})
    evals = []
    for directory in eval_dirs:
        report = json.loads((directory / "eval_report.json").read_text(encoding="utf-8"))
        rollout_id = report["plan"]["rollout_id"]
        evals.append({
            "checkpoint": directory.name,
            "eval_step": 0 if rollout_id is None else rollout_id + 1,
            "success": report["outcomes"]["success"],
            "reward": report["outcomes"]["reward"],
            "episodes": report["episodes"],
            "failure_modes": report["failure_modes"],
        })
    comparison = None
    if eval_dirs:
        found = sorted(eval_dirs[-1].glob("comparison_vs_*.json"))
        comparison = json.loads(found[0].read_text(encoding="utf-8")) if found else None
    return {"group": group, "machine": machine, "commands": log, "wall_s": round(wall, 1),
            "training": training, "evals": evals, "comparison": comparison}


def plot(path: Path, summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.5, 4), dpi=100)
    rows = summary["training"]
    # Training rollout r is sampled by the policy after r updates: x = r, as eval/step.
    axes.plot([r["rollout"] for r in rows], [r["reward"] for r in rows], color="tab:blue", alpha=0.6,
              marker=".", label="train reward (rollout mean)")
    with_success = [r for r in rows if r["success"] is not None]
    axes.plot([r["rollout"] for r in with_success], [r["success"] for r in with_success], color="tab:orange",
              alpha=0.6, marker=".", label="train success (rollout mean)")
    for key, color, label in (("success", "tab:red", "validation success, 95% bootstrap"),
                              ("reward", "tab:green", "validation reward, 95% bootstrap")):
        xs = [e["eval_step"] for e in summary["evals"]]
        means = [e[key]["mean"] for e in summary["evals"]]
        lows = [e[key]["mean"] - e[key]["bootstrap_ci"][0] for e in summary["evals"]]
        highs = [e[key]["bootstrap_ci"][1] - e[key]["mean"] for e in summary["evals"]]
        axes.errorbar(xs, means, yerr=[lows, highs], color=color, marker="s", capsize=4, label=label)
    axes.set_xlabel("GRPO rollouts trained (rollout/step, eval/step)")
    axes.set_ylim(-0.05, 1.05)
    axes.legend(loc="best", fontsize=7)
    axes.set_title(f"{summary['group']}: {summary['machine']['cpu']}", fontsize=8)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())


if __name__ == "__main__":
    main()

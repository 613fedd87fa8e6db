"""The gate's positive control on real episodes (docs/gate.md, "Positive control on real episodes").

Given a checkpoint and two skill edits, one meant to help (a procedure the policy often gets wrong)
and one meant to mislead, each through the real CLI in a subprocess:

1. `shopsimrl eval` of the checkpoint with the round's skillbank (`none`: no edit), then with each edit
   added, on one plan (the same tasks and seeds), each edit paired against `none` (`--compare`):
   the edit's measured effect on success with its task-bootstrap interval and permutation p;
2. `shopsimrl training online-gate` with both edits as candidates and the gate's validated design
   (DesignConfig's defaults: 200 validation tasks, replicates for power 0.8 at +0.10, 5 looks), so it
   must select the helpful edit and reject the misleading one; its episodes against the fixed design's;
3. GEPA's acceptance rule (shopsimrl/gate/positive_control.py, restated from its reference code) replayed
   on step 1's paired episodes: its verdict on the first 3-task minibatch, how often it admits each edit
   over random minibatches, and which program its final validation argmax would return.

    .venv/bin/python bench/gate_positive_control.py --checkpoint checkpoints/learning-round-002/rollout-0009 \
        --helpful "Before checkout, compare the price with the ceiling in the instruction ..." \
        --misleading "Buy the first search result without opening it ..." [--group gate-positive-control]

The shop follows --round-config (level, tool offer, episode limits) with --num-products 5000 (200
validation and 200 test tasks on the `budget` level: the validated design's 200). Step 1 evaluates on
the test split (--eval-split), so the effects are established on episodes the gate never sees.
Writes runs/<group>/positive_control/{report.json,report.md}; prints the machine and each command's wall time.
--no-gate stops after step 1 (and reports step 3): the gate's validated design costs hours, and is
worth them only once step 1 shows one edit helping and the other hurting.
Smallest smoke (tiny scale, not a measurement): --tasks 3 --seeds 1 --gate-set design.tasks=20
--gate-set design.replicates=1 --gate-set design.looks=1 --num-products 1000.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml
from learning_run import cpu_model, run  # bench/ is sys.path[0] when this script runs

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "shopsimrl.cli"]
EDITS = ("helpful", "misleading")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="the policy (an HF checkpoint directory)")
    parser.add_argument("--helpful", required=True, help="the text of the edit meant to help")
    parser.add_argument("--misleading", required=True, help="the text of the edit meant to mislead")
    parser.add_argument("--round-config", default="configs/local/learning_rounds.yaml",
                        help="shop, episode limits and skillbank of the checkpoint's round")
    parser.add_argument("--skillbank", default=None, help="the skillbank the edits are added to (default: the round's)")
    parser.add_argument("--group", default="gate-positive-control")
    parser.add_argument("--num-products", type=int, default=5000, help="catalog size (5000: 200 tasks a split)")
    parser.add_argument("--eval-split", default="test", choices=["validation", "test"])
    parser.add_argument("--tasks", type=int, default=100, help="eval tasks (step 1)")
    parser.add_argument("--seeds", type=int, default=2, help="eval episodes per task (step 1)")
    parser.add_argument("--concurrency", type=int, default=16, help="episodes decoded as one batch")
    parser.add_argument("--compute-dtype", default="auto", choices=["float32", "bfloat16", "auto"],
                        help="the generators' precision, eval and gate alike (auto: bfloat16 where the CPU has it)")
    parser.add_argument("--gate-set", dest="gate_sets", action="append", default=[],
                        help="gate config override (KEY=VALUE), e.g. design.tasks=20 for a smoke")
    parser.add_argument("--no-gate", action="store_true",
                        help="steps 1 and 3 only: establish the edits' effects (and GEPA's verdicts) before the gate's hours")
    args = parser.parse_args()

    from shopsimrl.gate.positive_control import control_lines, control_report, gepa_minibatch_rule
    from shopsimrl.round import load_round_config

    log: list[dict[str, Any]] = []
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()}
    print(f"machine: {machine['cpu']}, {machine['cores']} cores", flush=True)
    started = time.perf_counter()
    round_config = load_round_config(ROOT / args.round_config)
    shopsim = round_config.shopsim()
    catalog = {**shopsim.catalog.model_dump(mode="json"), "num_products": args.num_products}
    episode = {"tool_call_format": shopsim.tool_call_format, "max_turns": shopsim.max_turns,
               "max_new_tokens_per_turn": shopsim.max_new_tokens_per_turn,
               "temperature": round_config.train_config().driver.rollout_temperature}  # fmt: skip
    out = ROOT / "runs" / args.group / "positive_control"
    out.mkdir(parents=True, exist_ok=True)
    base = Path(args.skillbank or shopsim.skillbank)
    skillbanks, pool = write_edits(out, base, args.group, {"helpful": args.helpful, "misleading": args.misleading})

    # 1. Each edit's effect on the same episodes as no edit.
    shop_sets = [f"catalog.{k}={v}" for k, v in catalog.items()] + [f"episode.{k}={v}" for k, v in episode.items()]
    shop_sets += [f"generator.concurrency={args.concurrency}", f"generator.compute_dtype={args.compute_dtype}"]
    eval_root = ROOT / "runs" / args.group / "eval"
    for name, skillbank in (("none", base), *((edit, skillbanks[edit]) for edit in EDITS)):
        compare = ["--compare", str(eval_root / "none")] if name != "none" else []
        run([*CLI, "eval", "--checkpoint", args.checkpoint, "--split", args.eval_split, "--tasks", str(args.tasks),
             "--seeds", str(args.seeds), "--skillbank", str(skillbank), "--mask", "full", "--name", name,
             "--group", args.group, "--no-progress", "--no-wandb", *[i for s in shop_sets for i in ("--set", s)],
             *compare], log)  # fmt: skip

    # 2. The gate with its validated design on both edits at once.
    gate_config = out / "gate.yaml"
    gate_config.write_text(yaml.safe_dump({
        "schema_version": 1, "round": args.group, "runs_root": "runs",
        "inputs": {"checkpoint": args.checkpoint, "candidate_pool": str(pool), "skillbank": str(base)},
        "generator": {"backend": "local", "concurrency": args.concurrency, "compute_dtype": args.compute_dtype},
        "episode": episode, "catalog": catalog,
    }, sort_keys=False), encoding="utf-8")  # fmt: skip
    if not args.no_gate:
        run([*CLI, "training", "online-gate", str(gate_config), "--no-progress", "--no-wandb",
             *[i for s in args.gate_sets for i in ("--set", s)]], log)  # fmt: skip

    # 3. The report, GEPA's rule beside the gate.
    effects, gepa, baseline = {}, {}, None
    for edit in EDITS:
        comparison = json.loads((eval_root / edit / "comparison_vs_none.json").read_text(encoding="utf-8"))
        effects[edit] = comparison["outcomes"]["success"]
        baseline = comparison["outcomes"]["success"]["before"]
        gepa[edit] = gepa_minibatch_rule(paired_outcomes(eval_root / "none", eval_root / edit))
    gate_dir = ROOT / "runs" / args.group / "gate"
    document = None if args.no_gate else json.loads((gate_dir / "contributions.json").read_text(encoding="utf-8"))
    report = control_report({f"pc-{edit}": effects[edit] for edit in EDITS}, document,
                            gate_episodes=None if document is None else document["summary"]["finished"],
                            fixed_episodes=fixed_design_episodes(gate_config, args.gate_sets, len(EDITS)),
                            gepa={f"pc-{edit}": gepa[edit] for edit in EDITS}, baseline_mean=baseline)  # fmt: skip
    report |= {"machine": machine, "commands": log, "wall_s": round(time.perf_counter() - started, 1),
               "checkpoint": args.checkpoint, "edits": {"pc-helpful": args.helpful, "pc-misleading": args.misleading}}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = control_lines(report)
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"report: {out / 'report.json'}; total {report['wall_s'] / 60:.1f} min", flush=True)


def write_edits(out: Path, base: Path, group: str, texts: dict[str, str]) -> tuple[dict[str, Path], Path]:
    """A skillbank per edit (the base plus the edit's chunk), and the gate's pool of both edits."""
    from shopsimrl.skills.candidates import CandidatePool, Intervention, apply_interventions
    from shopsimrl.skills.skillbank import load_skillbank
    from shopsimrl.storage import file_sha256

    skillbank = load_skillbank(base)
    items = {edit: Intervention(intervention_id=f"pc-{edit}", logical_chunk_id=f"pc-{edit}", operation="add",
                                text=text) for edit, text in texts.items()}  # fmt: skip
    paths = {}
    for edit, item in items.items():
        paths[edit] = out / f"skillbank_{edit}.json"
        bank = apply_interventions(skillbank, [item], group)
        paths[edit].write_text(json.dumps(bank.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8")
    pool = CandidatePool(round=group, skillbank_sha256=file_sha256(base), interventions=tuple(items.values()))
    pool_path = out / "candidate_pool.json"
    pool_path.write_text(json.dumps(pool.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8")
    return paths, pool_path


def paired_outcomes(before: Path, after: Path) -> dict[str, list[tuple[float, float]]]:
    """task -> [(success without the edit, with it)] per episode scored in both, in plan order."""
    first, second = _scored(before), _scored(after)
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for episode, record in first.items():
        if episode in second:
            pairs[record["task_id"]].append((float(record["success"]), float(second[episode]["success"])))
    return dict(pairs)


def _scored(directory: Path) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}
    for line in (directory / "episodes.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["status"] == "scored":
            records.setdefault(record["episode_id"], record)
    return records


def fixed_design_episodes(gate_config: Path, sets: list[str], candidates: int) -> int:
    """The episodes a fixed gate (looks: 1) of the same design would run: what the sequential one saves against."""
    from shopsimrl.config.overrides import parse_overrides
    from shopsimrl.gate.config import load_gate_config
    from shopsimrl.gate.power import planned_pairs

    config = load_gate_config(gate_config, parse_overrides(sets, example="design.tasks=20"))
    fixed = config.design.model_copy(update={"looks": 1})
    return 2 * planned_pairs(fixed, candidates=candidates, tasks=config.design.tasks)


if __name__ == "__main__":
    main()

"""The closing summary of `shopsimrl training round`: each stage's numbers side by side, where every
file and W&B run is, and the command that starts the next round (from the local files only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shopsimrl.ops.compose_schema import CONTAINER_WORKSPACE
from shopsimrl.round.config import RoundConfig
from shopsimrl.round.report import training_curve
from shopsimrl.round.runner import RoundResult
from shopsimrl.round.state import STAGES
from shopsimrl.storage.layout import CONTRIBUTIONS_FILE, METRICS_FILE, RunLayout


def round_summary(config: RoundConfig, result: RoundResult) -> str:
    round_dir, layout = result.round_dir, RunLayout(result.round_dir)
    lines = ["", f"=== ShopSimRL round {config.group}: summary ==="]
    curve = training_curve(layout.train_metrics)
    steps = " | ".join(
        f"step {row['step']}: reward {row['reward_mean']:.3f}, success "
        + (f"{row['success_rate']:.3f}" if "success_rate" in row else "n/a")
        for row in curve
    )
    counts = _json(layout.analysis_summary).get("metrics", {})
    gate = _json(layout.contributions)
    effects = gate["estimates"][gate["decided_on"]]["effects"] if gate else []
    selected = [e["intervention_id"] for e in effects if e["status"] == "selected"]
    verdicts = ", ".join(f"{e['intervention_id']}={e['status']}" for e in effects) or "no candidate to test"
    numbers = {
        "train": steps or f"no rollout row in {METRICS_FILE}",
        "analysis": ", ".join(f"{k.removeprefix('analysis/')}={v}" for k, v in counts.items()),
        "gate": (f"{gate['summary']['finished']}/{gate['summary']['planned']} evaluations; {verdicts}; "
                 f"selected: {', '.join(selected) or 'none'}") if gate else f"no {CONTRIBUTIONS_FILE}",  # fmt: skip
    }
    for stage in STAGES:
        how = "ran now" if stage in result.ran else "finished before"
        lines.append(f"{stage:<9} ({how:<15}) {numbers[stage]}")
    lines += result.gate_lines[1:]  # the gate's own reasons, when it ran in this call
    lines.append(f"files:       {round_dir}/{{train,analysis,gate}}/, checkpoint {result.next_round.checkpoint}")
    manifest = _json(layout.manifest)
    seeds = manifest.get("seeds", {})
    lines.append(f"round:       backend {config.backend}, seeds rollout {seeds.get('rollout')} / curriculum "
                 f"{seeds.get('curriculum')} / gate {seeds.get('gate')}, warm start "
                 f"{'yes' if manifest.get('warm_start') else 'no'}")  # fmt: skip
    for stage in STAGES:
        run_file = _json(layout.status(stage)).get("run_file")
        if run_file and run_file.startswith(CONTAINER_WORKSPACE + "/"):  # written by a service: the host's path
            run_file = run_file[len(CONTAINER_WORKSPACE) + 1 :]
        if run_file:
            lines.append(f"W&B {stage:<8} {run_file}\n  inspect:   shopsimrl wandb inspect {run_file}")
    if any(_json(layout.status(s)).get("run_file") for s in STAGES):
        lines.append(f"  upload:    make wandb-sync   (all three runs are in group {config.group})")
    else:
        lines.append("W&B: off (USE_WANDB=0); the local files are the full record")
    lines.append(f"report:      {result.report}")
    lines.append(f"next round:  {result.next_round.manifest_path} (skillbank {result.next_round.skillbank})")
    lines.append(f"start it:    {result.next_round.command}")
    return "\n".join(lines)


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

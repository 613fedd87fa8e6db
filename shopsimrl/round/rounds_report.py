"""The cross-round report of a chain: `runs/<name>-rounds/rounds_report.md` and `rounds_curves.png`.

From local files only (each round's runs/<group>/...): per round the training curve, the Analyst's
counts, the gate's decisions with their intervals, the skillbank diff against the round before, the
start checkpoint and seeds from the manifest, and whether the round warm-started. With W&B on, the
same rows go to one summary run (job type `rounds`, group `<name>-rounds`, metrics `rounds/*` against
`rounds/index`, the table `rounds/summary`, the report and the PNG as an artifact); each write that
follows new work gets its own run directory, runs/<name>-rounds/summary-<UTC time>/.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from shopsimrl.metrics import names as m
from shopsimrl.round.config import RoundConfig
from shopsimrl.round.manifest import read_round_manifest
from shopsimrl.round.report import gate_lines, skillbank_diff, training_curve
from shopsimrl.round.state import utc_now
from shopsimrl.skills.skillbank import load_skillbank
from shopsimrl.storage import atomic_write_bytes, atomic_write_text
from shopsimrl.storage.layout import ROUNDS_CURVES_FILE, ROUNDS_REPORT_FILE, RunLayout
from shopsimrl.tracking import WandbSettings


def rounds_dir(first: RoundConfig) -> Path:
    name = re.sub(r"-round-[0-9]+$", "", first.group)
    return Path(first.round.runs_root) / f"{name}-rounds"


def round_row(round_dir: Path) -> dict[str, Any]:
    """The numbers of one finished round, read back from its files."""
    manifest = read_round_manifest(round_dir)
    layout = RunLayout(round_dir)
    curve = training_curve(layout.train_metrics)
    state = _json(layout.state).get("stages", {})
    counts = _json(layout.analysis_summary).get("metrics", {})
    gate = _json(layout.contributions)
    effects = gate["estimates"][gate["decided_on"]]["effects"] if gate else []
    return {
        "group": round_dir.name,
        "manifest": manifest,
        "curve": curve,
        "warm_start_steps": state.get("train", {}).get("warm_start_steps", 0),
        "analysis": counts,
        "gate": gate,
        "selected": [e["intervention_id"] for e in effects if e["status"] == "selected"],
        "skillbank": manifest.get("skillbank"),
        "next_skillbank": state.get("gate", {}).get("outputs", {}).get("selected_skillbank"),
    }


def write_rounds_report(first: RoundConfig, round_dirs: list[Path], settings: WandbSettings, *,
                        log_summary: bool = True) -> Path:  # fmt: skip
    """Write the report (and, with W&B on and `log_summary`, the summary run); returns the report's path."""
    rows = [round_row(d) for d in round_dirs]
    out = rounds_dir(first)
    out.mkdir(parents=True, exist_ok=True)
    _write_curves(out / ROUNDS_CURVES_FILE, rows)
    lines = [f"# Rounds {rows[0]['group']} .. {rows[-1]['group']}", "",
             f"![reward and success per rollout step, round after round]({ROUNDS_CURVES_FILE})", "",
             "| round | start checkpoint | seeds (rollout / curriculum / gate) | warm-start steps | final reward | "
             "final success | Analyst candidates | gate selected |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in rows:
        manifest, last = row["manifest"], (row["curve"][-1] if row["curve"] else {})
        seeds = manifest.get("seeds", {})
        start = manifest.get("start_checkpoint") or "base model"
        success = f"{last['success_rate']:.3f}" if "success_rate" in last else "n/a"
        reward = f"{last['reward_mean']:.3f}" if last else "n/a"
        candidates = row["analysis"].get(m.ANALYSIS_CANDIDATES.name, "n/a") if row["analysis"] else "n/a"
        lines.append(f"| {row['group']} | `{start}` | {seeds.get('rollout')} / {seeds.get('curriculum')} / "
                     f"{seeds.get('gate')} | {row['warm_start_steps']} | {reward} | {success} | {candidates} | "
                     f"{', '.join(row['selected']) or 'none'} |")  # fmt: skip
    for row in rows:
        lines += ["", f"## {row['group']}", "", "Gate:", ""] + gate_lines(row["gate"])
        if row["skillbank"] and row["next_skillbank"] and Path(row["next_skillbank"]).is_file():
            diff = skillbank_diff(load_skillbank(row["skillbank"]), load_skillbank(row["next_skillbank"]))
            lines += ["", "Skillbank handed on:", "", "```", *(diff or ["(no change)"]), "```"]
        lines += ["", f"Report: `{Path(first.round.runs_root) / row['group'] / 'round_report.md'}`"]
    lines += ["", f"W&B: one group per round in project `{settings.project}` "
              f"({'on, ' + settings.mode.value if settings.enabled else 'off'}).", ""]  # fmt: skip
    path = out / ROUNDS_REPORT_FILE
    atomic_write_text(path, "\n".join(lines))
    if settings.enabled and log_summary:
        _log_summary_run(out, rows, replace(settings, group=out.name), [path, out / ROUNDS_CURVES_FILE])
    return path


def _log_summary_run(out: Path, rows: list[dict[str, Any]], settings: WandbSettings, files: list[Path]) -> None:
    from shopsimrl.tracking.logger import StageLogger

    columns = ["round", "start_checkpoint", "rollout_seed", "curriculum_seed", "gate_seed", "warm_start_steps",
               "final_reward_mean", "final_success_rate", "candidates", "selected"]  # fmt: skip
    table = []
    run_dir = out / f"summary-{utc_now().replace(':', '')}"
    with StageLogger(run_dir, stage="rounds", settings=settings, config={"rounds": [r["group"] for r in rows]},
                     step_axes={"rounds/*": m.ROUNDS_INDEX.name}) as logger:  # fmt: skip
        for row in rows:
            last, seeds = (row["curve"][-1] if row["curve"] else {}), row["manifest"].get("seeds", {})
            metrics: dict[str, Any] = {m.ROUNDS_INDEX.name: row["manifest"].get("index"),
                                       m.ROUNDS_WARM_START_STEPS.name: row["warm_start_steps"],
                                       m.ROUNDS_SELECTED.name: len(row["selected"])}  # fmt: skip
            if "reward_mean" in last:
                metrics[m.ROUNDS_FINAL_REWARD.name] = last["reward_mean"]
            if "success_rate" in last:
                metrics[m.ROUNDS_FINAL_SUCCESS.name] = last["success_rate"]
            if m.ANALYSIS_CANDIDATES.name in row["analysis"]:
                metrics[m.ROUNDS_CANDIDATES.name] = row["analysis"][m.ANALYSIS_CANDIDATES.name]
            logger.log(metrics)
            table.append([row["group"], row["manifest"].get("start_checkpoint") or "base model", seeds.get("rollout"),
                          seeds.get("curriculum"), seeds.get("gate"), row["warm_start_steps"],
                          last.get("reward_mean"), last.get("success_rate"),
                          row["analysis"].get(m.ANALYSIS_CANDIDATES.name), ", ".join(row["selected"])])  # fmt: skip
        logger.log_table(m.ROUNDS_SUMMARY_TABLE, columns, table)
        logger.log_artifact("shopsimrl-rounds", "report", [f for f in files if f.is_file()])


def _write_curves(path: Path, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 3.5), dpi=100)
    offset = 0
    for row in rows:
        steps = [offset + r["step"] for r in row["curve"]]
        axes.plot(steps, [r["reward_mean"] for r in row["curve"]], marker="o", label=f"{row['group']} reward")
        with_success = [(offset + r["step"], r["success_rate"]) for r in row["curve"] if "success_rate" in r]
        if with_success:
            axes.plot(*zip(*with_success, strict=True), marker="s", linestyle="--", label=f"{row['group']} success")
        offset += len(row["curve"])
    axes.set_xlabel("rollout step (rounds in sequence)")
    axes.set_ylim(-0.05, 1.05)
    axes.legend(loc="best", fontsize=7)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

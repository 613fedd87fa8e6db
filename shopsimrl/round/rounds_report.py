"""The cross-round report of a chain: `runs/<name>-rounds/rounds_report.md` and `rounds_curves.png`.

From local files only (each round's runs/<group>/...): per round the training curve, the Analyst's
counts, the gate's decisions with their intervals, the skillbank diff against the round before, the
start checkpoint and seeds from the manifest, and whether the round warm-started. With W&B on, the
same rows go to one summary run (job type `rounds`, group `<name>-rounds`, metrics `rounds/*` against
`rounds/index`, the table `rounds/summary`, the report and the PNG as an artifact); each write that
follows new work gets its own run directory, runs/<name>-rounds/summary-<UTC time>/.

With boundary evaluations (the config's `boundary_eval:`, boundary.py) the report gets a held-out
table (each round's final checkpoint, and the chain's start, on one fixed plan; paired differences
against the round before and against the start, with their task-bootstrap intervals and permutation
p), `boundary_eval.json` with the same numbers, the plot `rounds_heldout.png`, and the W&B run the
`rounds/heldout_*` columns.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from shopsimrl.metrics import names as m
from shopsimrl.round.boundary import boundary_results
from shopsimrl.round.config import RoundConfig
from shopsimrl.round.manifest import read_round_manifest
from shopsimrl.round.report import gate_lines, skillbank_diff, training_curve
from shopsimrl.round.state import utc_now
from shopsimrl.skills.skillbank import load_skillbank
from shopsimrl.storage import atomic_write_bytes, atomic_write_json, atomic_write_text
from shopsimrl.storage.layout import (
    BOUNDARY_RESULTS_FILE,
    ROUNDS_CURVES_FILE,
    ROUNDS_HELDOUT_FILE,
    ROUNDS_REPORT_FILE,
    RunLayout,
)
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
    heldout = boundary_results(out, round_dirs)
    if heldout is not None:
        atomic_write_json(out / BOUNDARY_RESULTS_FILE, heldout)
        _write_heldout_plot(out / ROUNDS_HELDOUT_FILE, heldout)
        lines += ["", *heldout_lines(heldout)]
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
        files = [path, out / ROUNDS_CURVES_FILE, out / BOUNDARY_RESULTS_FILE, out / ROUNDS_HELDOUT_FILE]
        _log_summary_run(out, rows, replace(settings, group=out.name), files, heldout)
    return path


def heldout_lines(heldout: dict[str, Any]) -> list[str]:
    """The held-out table of the report: one row for the start, one per round."""
    section = heldout["plan"]["boundary_eval"]
    lines = ["## Held-out evaluation at every round boundary", "",
             f"One plan for the chain: the first {section['tasks']} {section['split']} tasks x {section['seeds']} "
             f"seeds (seed {section['seed']}), each round's final checkpoint with the skillbank it hands on. "
             "Differences are paired on the same episodes: after - before, 95% task-cluster bootstrap interval, "
             "two-sided sign-flip permutation p over tasks.", "",
             f"![held-out success per round]({ROUNDS_HELDOUT_FILE})", "",
             "| policy | held-out success (95% Wilson) | reward | vs previous: diff [95% CI] p | "
             "vs start: diff [95% CI] p |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    start = heldout["start"]
    start_label = f"{heldout['plan']['start_round']} start"
    lines.append(f"| {start_label} | {_rate(start)} | {_reward(start)} | | |")
    for row in heldout["rounds"]:
        lines.append(f"| {row['round']} final | {_rate(row['final'])} | {_reward(row['final'])} | "
                     f"{_delta(row['vs_previous'])} | {_delta(row['vs_start'])} |")  # fmt: skip
    return lines


def _rate(outcomes: dict[str, Any] | None) -> str:
    if outcomes is None:
        return "not evaluated"
    low, high = outcomes["wilson_ci"] or (float("nan"), float("nan"))
    return f"{outcomes['success_rate']:.3f} ({outcomes['successes']}/{outcomes['episodes']}) [{low:.3f}, {high:.3f}]"


def _reward(outcomes: dict[str, Any] | None) -> str:
    return "n/a" if outcomes is None or outcomes["reward_mean"] is None else f"{outcomes['reward_mean']:.3f}"


def _delta(paired: dict[str, Any] | None) -> str:
    if paired is None or not paired["episodes"]:
        return "n/a"
    ci = paired["bootstrap_ci"]
    interval = "n/a" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"
    return f"{paired['difference']:+.3f} {interval} p={paired['p_value']:.3f} ({paired['against']}, {paired['episodes']} episodes)"


def _log_summary_run(out: Path, rows: list[dict[str, Any]], settings: WandbSettings, files: list[Path],
                     heldout: dict[str, Any] | None) -> None:  # fmt: skip
    from shopsimrl.tracking.logger import StageLogger

    columns = ["round", "start_checkpoint", "rollout_seed", "curriculum_seed", "gate_seed", "warm_start_steps",
               "final_reward_mean", "final_success_rate", "candidates", "selected"]  # fmt: skip
    by_round = {r["round"]: r for r in heldout["rounds"]} if heldout is not None else {}
    if heldout is not None:
        columns += ["heldout_success_rate", "heldout_vs_previous", "heldout_vs_previous_p", "heldout_vs_start",
                    "heldout_vs_start_p"]  # fmt: skip
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
            boundary = by_round.get(row["group"])
            if boundary is not None:
                metrics |= heldout_metrics(boundary, heldout["start"] if heldout and row is rows[0] else None)
            logger.log(metrics)
            table.append([row["group"], row["manifest"].get("start_checkpoint") or "base model", seeds.get("rollout"),
                          seeds.get("curriculum"), seeds.get("gate"), row["warm_start_steps"],
                          last.get("reward_mean"), last.get("success_rate"),
                          row["analysis"].get(m.ANALYSIS_CANDIDATES.name), ", ".join(row["selected"])])  # fmt: skip
            if heldout is not None:
                table[-1] += _heldout_cells(boundary)
        logger.log_table(m.ROUNDS_SUMMARY_TABLE, columns, table)
        logger.log_artifact("shopsimrl-rounds", "report", [f for f in files if f.is_file()])


def heldout_metrics(boundary: dict[str, Any], start: dict[str, Any] | None) -> dict[str, Any]:
    """A round's rounds/heldout_* scalars; a value that was not measured is absent, never 0."""
    metrics: dict[str, Any] = {}
    final = boundary["final"]
    if final is not None and final["success_rate"] is not None:
        metrics[m.ROUNDS_HELDOUT_SUCCESS.name] = final["success_rate"]
        if final["wilson_ci"] is not None:
            metrics[m.ROUNDS_HELDOUT_SUCCESS_CI_LOW.name], metrics[m.ROUNDS_HELDOUT_SUCCESS_CI_HIGH.name] = final["wilson_ci"]
    if final is not None and final["reward_mean"] is not None:
        metrics[m.ROUNDS_HELDOUT_REWARD.name] = final["reward_mean"]
    if start is not None and start["success_rate"] is not None:
        metrics[m.ROUNDS_HELDOUT_START_SUCCESS.name] = start["success_rate"]
    for label in ("previous", "start"):
        paired = boundary[f"vs_{label}"]
        if paired is None or not paired["episodes"]:
            continue
        metrics[m.ROUNDS_HELDOUT_DELTA.key(label)] = paired["difference"]
        metrics[m.ROUNDS_HELDOUT_DELTA_P.key(label)] = paired["p_value"]
        if paired["bootstrap_ci"] is not None:
            metrics[m.ROUNDS_HELDOUT_DELTA_CI_LOW.key(label)], metrics[m.ROUNDS_HELDOUT_DELTA_CI_HIGH.key(label)] = (
                paired["bootstrap_ci"])
    return metrics


def _heldout_cells(boundary: dict[str, Any] | None) -> list[Any]:
    final = boundary["final"] if boundary else None
    previous = boundary["vs_previous"] if boundary else None
    start = boundary["vs_start"] if boundary else None
    return [final["success_rate"] if final else None,
            previous["difference"] if previous else None, previous["p_value"] if previous else None,
            start["difference"] if start else None, start["p_value"] if start else None]  # fmt: skip


def _write_heldout_plot(path: Path, heldout: dict[str, Any]) -> None:
    """Held-out success of the start and of each round's final checkpoint, with the 95% Wilson interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [("start", heldout["start"])] + [(r["round"].rsplit("-", 1)[-1], r["final"]) for r in heldout["rounds"]]
    measured = [(label, o) for label, o in points if o is not None and o["success_rate"] is not None]
    figure, axes = plt.subplots(figsize=(6, 3.5), dpi=100)
    if measured:
        xs = list(range(len(measured)))
        rates = [o["success_rate"] for _, o in measured]
        # Wilson's bounds can sit a rounding error inside the rate at 0 or 1: an error bar is never negative.
        low = [max(0.0, r - (o["wilson_ci"] or [r, r])[0]) for r, (_, o) in zip(rates, measured, strict=True)]
        high = [max(0.0, (o["wilson_ci"] or [r, r])[1] - r) for r, (_, o) in zip(rates, measured, strict=True)]
        axes.errorbar(xs, rates, yerr=[low, high], marker="o", capsize=4, label="held-out success (95% Wilson)")
        axes.set_xticks(xs, [label for label, _ in measured])
    axes.set_xlabel("policy (start, then each round's final checkpoint)")
    axes.set_ylabel("success rate")
    axes.set_ylim(-0.05, 1.05)
    axes.legend(loc="best", fontsize=7)
    _save_png(plt, figure, path)


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
    _save_png(plt, figure, path)


def _save_png(plt: Any, figure: Any, path: Path) -> None:
    """The figure as a PNG at `path`, written atomically; the figure is closed."""
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

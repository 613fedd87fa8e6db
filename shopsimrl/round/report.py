"""The round report: `runs/<group>/round_report.md` and `round_curves.png`, from local files only.

Sources (no W&B server): round_manifest.json (start checkpoint, seeds, warm start),
train/metrics.jsonl (reward and success per rollout step),
analysis/analysis_summary.json (the Analyst's counts), gate/contributions.json (the gate's table and
what it selected or why it could not), the old and the selected skillbank (the diff), and each
stage's wandb_status.json (where its offline W&B run is). When the previous round's directory is
beside this one (runs/<group N-1>), its numbers stand beside this round's.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from shopsimrl.metrics import names as m
from shopsimrl.round.config import RoundConfig, previous_group
from shopsimrl.round.manifest import read_round_manifest
from shopsimrl.round.next_round import NextRound
from shopsimrl.round.state import STAGES, RoundState
from shopsimrl.skills.skillbank import Skillbank, load_skillbank
from shopsimrl.storage import atomic_write_bytes, atomic_write_text, read_jsonl
from shopsimrl.storage.layout import ROUND_CURVES_FILE, ROUND_REPORT_FILE, RunLayout
from shopsimrl.tracking import WandbSettings


def training_curve(metrics_path: Path) -> list[dict[str, float]]:
    """One row per rollout step: step, reward_mean, success_rate (absent values are left out).

    No file (a training that logged no rollout, e.g. a relaunch after its last save) is no curve.
    """
    if not metrics_path.exists():
        return []
    rows = []
    for record in read_jsonl(metrics_path, strict_middle=False).records:
        if isinstance(record, dict) and m.ROLLOUT_STEP.name in record and m.REWARD_MEAN.name in record:
            row = {"step": record[m.ROLLOUT_STEP.name], "reward_mean": record[m.REWARD_MEAN.name]}
            if m.SUCCESS_RATE.name in record:
                row["success_rate"] = record[m.SUCCESS_RATE.name]
            rows.append(row)
    return rows


def skillbank_diff(old: Skillbank, new: Skillbank) -> list[str]:
    """Lines `+ id`, `- id`, `~ id` (text revised) between the active chunks of two skillbanks."""
    before = {c.logical_chunk_id: c.text for c in old.active_chunks}
    after = {c.logical_chunk_id: c.text for c in new.active_chunks}
    lines = [f"+ {cid}: {after[cid]}" for cid in after if cid not in before]
    lines += [f"- {cid}" for cid in before if cid not in after]
    lines += [f"~ {cid}: {after[cid]}" for cid in after if cid in before and after[cid] != before[cid]]
    return lines


def write_round_report(config: RoundConfig, state: RoundState, next_round: NextRound, settings: WandbSettings) -> Path:
    round_dir, layout = config.round_dir, config.layout
    curve = training_curve(layout.train_metrics)
    _write_curves(round_dir / ROUND_CURVES_FILE, curve)
    summary = _json(layout.analysis_summary)
    contributions = _json(layout.contributions)
    old = load_skillbank(config.shopsim().skillbank or "")
    new = load_skillbank(next_round.skillbank)
    manifest = read_round_manifest(round_dir)
    lines = [f"# Round {config.group}", ""]
    seeds = manifest.get("seeds", {})
    lines += [f"Backend `{config.backend}`; started from "
              + (f"`{config.round.start_checkpoint}`" if config.round.start_checkpoint else "the base model")
              + f"; seeds rollout {seeds.get('rollout')}, curriculum {seeds.get('curriculum')}, gate {seeds.get('gate')} "
              f"(base {config.round.seed}, index {config.index}); warm start: "
              + ("yes" if manifest.get("warm_start") else "no (the first optimizer step is a GRPO step)") + ".", ""]  # fmt: skip
    lines += ["| stage | status | attempts | finished at |", "| --- | --- | --- | --- |"]
    for stage in STAGES:
        record = state.record(stage)
        lines.append(f"| {stage} | {record.get('status', 'not run')} | {record.get('attempts', 0)} | "
                     f"{record.get('finished_at', '')} |")  # fmt: skip
    lines += ["", "## Training", "", f"![reward and success per rollout step]({ROUND_CURVES_FILE})", ""]
    lines += ["| rollout step | reward_mean | success_rate |", "| --- | --- | --- |"]
    for row in curve:
        success = f"{row['success_rate']:.3f}" if "success_rate" in row else "n/a"
        lines.append(f"| {row['step']} | {row['reward_mean']:.3f} | {success} |")
    train = state.record("train")
    lines += ["", f"Final checkpoint: `{train['outputs']['checkpoint']}` (sha256 `{train['checkpoint_sha256']}`)", ""]
    lines += _beside_previous(config, curve, summary, contributions)
    lines += ["## Failure Analyst", ""]
    counts = summary.get("metrics", {})
    lines += ["| " + " | ".join(k.removeprefix("analysis/") for k in counts) + " |",
              "|" + " --- |" * len(counts), "| " + " | ".join(str(v) for v in counts.values()) + " |", ""]  # fmt: skip
    lines += ["## Gate", ""] + gate_lines(contributions) + [""]
    lines += ["## Skillbank: old -> new", "", f"old: `{config.shopsim().skillbank}`",
              f"new: `{next_round.skillbank}` (sha256 `{next_round.skillbank_sha256}`)", "", "```"]  # fmt: skip
    lines += skillbank_diff(old, new) or ["(no change: the gate selected nothing)"]
    lines += ["```", "", "## Files", ""]
    for stage in STAGES:
        lines.append(f"- {stage}: `{layout.stage_dir(stage)}/`")
    lines += [f"- training checkpoints: `{config.checkpoint_dir}/`",
              f"- round state: `{state.path}`; next round: `{next_round.manifest_path}`, `{next_round.config_path}`",
              "", "## W&B (group " + f"`{config.group}`, project `{settings.project}`)", ""]  # fmt: skip
    for stage in STAGES:
        status = _json(layout.status(stage))
        run_file = status.get("run_file")
        where = f"`{run_file}` ({status.get('mode')})" if run_file else "no W&B run (W&B off)"
        lines.append(f"- {stage}: {where}")
        if run_file:
            lines.append(f"  inspect: `shopsimrl wandb inspect {run_file}`")
    lines += ["", f"Upload the offline runs: `make wandb-sync` (WANDB_DIR={settings.dir}).", "",
              "## Next round", "", f"`{next_round.command}`", ""]  # fmt: skip
    path = round_dir / ROUND_REPORT_FILE
    atomic_write_text(path, "\n".join(lines))
    return path


def _beside_previous(config: RoundConfig, curve: list[dict[str, float]], summary: dict[str, Any],
                     contributions: dict[str, Any]) -> list[str]:  # fmt: skip
    """Round N's numbers beside round N+1's, when round N's directory is there."""
    previous = previous_group(config.group)
    before = Path(config.round.runs_root) / previous if previous else None
    if before is None or not before.is_dir():
        return []
    old = RunLayout(before)
    old_curve = training_curve(old.train_metrics)
    old_summary = _json(old.analysis_summary)
    old_gate = _json(old.contributions)

    def final(rows: list[dict[str, float]], key: str) -> str:
        return f"{rows[-1][key]:.3f}" if rows and key in rows[-1] else "n/a"

    def selected(document: dict[str, Any]) -> str:
        if not document:
            return "n/a"
        effects = document["estimates"][document["decided_on"]]["effects"]
        return ", ".join(e["intervention_id"] for e in effects if e["status"] == "selected") or "none"

    candidates = m.ANALYSIS_CANDIDATES.name
    return [f"### Beside the previous round ({previous})", "",
            f"| | {previous} | {config.group} |", "| --- | --- | --- |",
            f"| final reward_mean | {final(old_curve, 'reward_mean')} | {final(curve, 'reward_mean')} |",
            f"| final success_rate | {final(old_curve, 'success_rate')} | {final(curve, 'success_rate')} |",
            f"| Analyst candidates | {old_summary.get('metrics', {}).get(candidates, 'n/a')} | "
            f"{summary.get('metrics', {}).get(candidates, 'n/a')} |",
            f"| gate selected | {selected(old_gate)} | {selected(contributions)} |", ""]  # fmt: skip


def gate_lines(document: dict[str, Any]) -> list[str]:
    if not document:
        return ["(no contributions.json)"]
    summary = document["summary"]
    lines = [f"{summary['finished']}/{summary['planned']} evaluations, {summary['pairs_in_estimate']} scored pairs "
             f"from {summary['tasks_in_estimate']} tasks; decided on {document['decided_on']}.", ""]  # fmt: skip
    effects = document["estimates"][document["decided_on"]]["effects"]
    if not effects:
        return [*lines, "No candidate to test (the Analyst proposed none): the skillbank goes on unchanged."]
    lines += ["| candidate | status | coefficient | 95% interval | reason |", "| --- | --- | --- | --- | --- |"]
    for effect in effects:
        coefficient = "n/a" if effect["coefficient"] is None else f"{effect['coefficient']:+.3f}"
        interval = "" if effect["ci_low"] is None else f"[{effect['ci_low']:+.3f}, {effect['ci_high']:+.3f}]"
        lines.append(f"| {effect['intervention_id']} | {effect['status']} | {coefficient} | {interval} | "
                     f"{effect['reason']} |")  # fmt: skip
    selected = [e["intervention_id"] for e in effects if e["status"] == "selected"]
    lines.append("")
    if selected:
        lines.append(f"Selected: {', '.join(selected)}.")
    else:
        lines.append("Selected: none; the reasons per candidate are in the table"
                     + ("" if summary["validated_design"] else
                        " (the design is smaller than the validated one, docs/gate.md)") + ".")  # fmt: skip
    return lines


def _write_curves(path: Path, curve: list[dict[str, float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 3.5), dpi=100)
    steps = [row["step"] for row in curve]
    axes.plot(steps, [row["reward_mean"] for row in curve], marker="o", label=m.REWARD_MEAN.name)
    with_success = [row for row in curve if "success_rate" in row]
    axes.plot([r["step"] for r in with_success], [r["success_rate"] for r in with_success], marker="s",
              label=m.SUCCESS_RATE.name)  # fmt: skip
    axes.set_xlabel(m.ROLLOUT_STEP.name)
    axes.set_ylim(-0.05, 1.05)
    axes.legend(loc="best", fontsize=8)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))

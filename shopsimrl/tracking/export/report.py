"""The Markdown report of a history export: runs, axis mapping, the per-round table, zero-gradient updates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shopsimrl.tracking.export.keys import ROUND_MEANS


def _num(value: float | None, digits: int = 5) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:.2f}"
    return f"{value:.{digits}g}"


def render_report(manifest: Mapping[str, Any], summary: Mapping[str, Any], plots: list[str]) -> str:
    k = manifest["updates_per_rollout"]
    lines = [
        "# W&B history export: optimisation and system diagnostics",
        "",
        f"Source: {manifest['source']['kind']} ({manifest['source']['location']}), full history "
        f"(every row; the sampled `history()` API is not used). Exported {manifest['exported_at']}.",
        "",
        "| Round | Group | Run | Job type | State | History events |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for run in manifest["runs"]:
        lines.append(
            f"| {run['round']} | {run['group']} | {run['run_id']} | {run['job_type'] or '-'} | "
            f"{run['state']} | {run['history_rows']} |"
        )
    totals = summary["totals"]
    lines += [
        "",
        "## Axes",
        "",
        f"W&B `_step` counts log events, not training iterations. In total: {totals['rollout_steps']} rollout "
        f"steps and {totals['optimizer_updates']} optimizer updates. With {k} update(s) per rollout, the "
        f"update ordinal is `train/step - {k - 1}` and its rollout step `floor(train/step / {k})`. "
        f"Updates whose derived rollout step is not a rollout step of their run: "
        f"{summary['axis_check']['updates_outside_run_rollout_steps']}. Missing values are left empty, "
        "never interpolated.",
        "",
        "## Per-round means",
        "",
        "| Round | Rollout steps | Updates | " + " | ".join(m.label for m in ROUND_MEANS) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in ROUND_MEANS) + " |",
    ]
    for entry in summary["rounds"]:
        cells = [_num(entry["means"][m.key]) for m in ROUND_MEANS]
        lines.append(
            f"| {entry['round']} | {entry['rollout_steps']} | {entry['optimizer_updates']} | "
            + " | ".join(cells)
            + " |"
        )
    zero = summary["zero_gradient_updates"]
    lines += ["", "## Zero-gradient updates", ""]
    if zero:
        ordinals = ", ".join(str(item["update_ordinal"]) for item in zero)
        lines.append(f"{len(zero)} logged update(s) with `train/grad_norm` = 0, ordinals: {ordinals}.")
    else:
        lines.append("None logged.")
    lines += [
        "",
        "## Samples are not episodes",
        "",
        "`rollout/response_len/mean` averages the effective response length of the accepted slime Samples and "
        "`rollout/truncated_ratio` is a Sample-status share; a dynamic tool schema splits one episode into "
        "several Samples, so neither describes whole shopping episodes. The "
        "[behaviour analysis](../behavior/behavior_analysis.md) counts model turns and complete episodes from "
        "the local traces (`make behavior` or `shopsimrl behavior analyze runs/<group>`).",
    ]
    lines += [
        "",
        "## Files",
        "",
        "- [rollout_steps.csv](rollout_steps.csv), [optimizer_updates.csv](optimizer_updates.csv), "
        "[summary.json](summary.json), [manifest.json](manifest.json)",
        "- frozen numeric history per run under `runs/` (no config, credentials, console or media)",
        "",
    ]
    for plot in plots:
        lines.append(f"![{plot}]({plot})")
    return "\n".join(lines) + "\n"

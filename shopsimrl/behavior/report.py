"""`behavior_analysis.md`: episodes and slime Samples side by side, by round and by arm."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from shopsimrl.behavior.failure_mode import Ending
from shopsimrl.behavior.run_source import ProblemLog, RunSource, SlimeStep
from shopsimrl.behavior.tables import BY_ARM_CSV, BY_STEP_CSV, EPISODES_CSV, FAILURE_MODES_CSV, TOOL_CALLS_CSV
from shopsimrl.behavior.tally import ALL_ARMS, Tally

REPORT_FILE = "behavior_analysis.md"
_TOP_MODES = 4


def _num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.{digits}g}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def render_report(
    sources: Sequence[RunSource],
    tally: Tally,
    slime: dict[str, dict[int, SlimeStep]],
    plots: Sequence[Path],
    problems: ProblemLog,
) -> str:
    lines = [
        "# Behaviour analysis: shopping episodes, not Samples",
        "",
        "slime's `rollout/response_len/mean` averages the effective (loss-masked) response length of the "
        "*accepted Samples*, and `rollout/truncated_ratio` is the share of accepted Samples with status "
        "TRUNCATED. A dynamic tool schema splits one episode into several Samples (segments), so neither is "
        "a per-episode number: a Sample-level mean is the episode mean divided by the segments per episode, "
        "and a Sample truncation is not an episode failure. This page counts model turns and whole "
        "episodes directly from the group traces (every completed group: accepted, dropped and surplus).",
        "",
        "Sources: " + ", ".join(f"`{s.stage_dir}` ({s.round_label})" for s in sources) + f"; {tally.groups} "
        f"group traces. Diagnostic full-skill retry groups skipped: {tally.retry_groups_skipped}.",
        "",
        "## Episodes vs Samples, per round",
        "",
        "| Round | Episodes | Samples | Samples / episode | Split episodes | Turns / episode | "
        "Gen. tokens / episode | Gen. tokens / Sample (all) | slime response_len/mean (accepted, step mean) | "
        "Turn-limit endings | Sample truncated (all) | slime truncated_ratio (accepted, step mean) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for round_label in tally.rounds:
        c = tally.by_arm[(round_label, ALL_ARMS)]
        logged = list(slime.get(round_label, {}).values())
        lines.append(
            f"| {round_label} | {c.episodes} | {c.samples} | {_num(c.samples_per_episode)} | "
            f"{c.split_episodes} | {_num(c.turns_per_episode)} | {_num(c.generated_tokens_per_episode)} | "
            f"{_num(c.generated_tokens_per_sample)} | "
            f"{_num(_mean([s.response_len_mean for s in logged if s.response_len_mean is not None]))} | "
            f"{_pct(c.ending_rate(Ending.TURN_LIMIT))} | {_pct(c.sample_truncated_ratio)} | "
            f"{_pct(_mean([s.truncated_ratio for s in logged if s.truncated_ratio is not None]))} |"
        )
    lines += [
        "",
        "## By arm",
        "",
        "| Round | Arm | Episodes | Success | Reward | Turns / episode (median) | Gen. tokens / episode | "
        "Invalid calls / episode | Turn-limit endings | Top failure modes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for round_label in tally.rounds:
        for arm in tally.arms(round_label):
            c = tally.by_arm[(round_label, arm)]
            modes = ", ".join(
                f"{mode} {count / c.episodes:.0%}" for mode, count in c.failure_modes.most_common(_TOP_MODES)
            )
            lines.append(
                f"| {round_label} | {arm} | {c.episodes} | {_pct(c.success_rate)} | {_num(c.reward_mean)} | "
                f"{_num(c.turns_per_episode)} ({c.turns_median if c.turns_median is not None else '-'}) | "
                f"{_num(c.generated_tokens_per_episode)} | {_num(c.invalid_calls_per_episode)} | "
                f"{_pct(c.ending_rate(Ending.TURN_LIMIT))} | {modes or '-'} |"
            )
    lines += ["", "## Tool-call mix (all arms)", ""]
    for round_label in tally.rounds:
        c = tally.by_arm[(round_label, ALL_ARMS)]
        calls = (
            sum(c.tools.values())
            + c.invalid_kinds.get("malformed_tool_call", 0)
            + c.invalid_kinds.get("unknown_tool", 0)
        )
        mix = ", ".join(f"`{name}` {count}" for name, count in c.tools.most_common())
        invalid = ", ".join(f"`{kind}` {count}" for kind, count in c.invalid_kinds.most_common())
        lines.append(
            f"- {round_label}: {calls} executed calls; by tool: {mix or 'none'}; "
            f"policy failures: {invalid or 'none'}."
        )
    lines += [
        "",
        "Endings: `checkout`, `turn_limit` (the environment's limit), `length` (a turn hit max_new_tokens), "
        "`context_limit`, `technical` (unscorable, never reward 0). Failure modes come from the trace's "
        "outcome and its gold audit (first failing check: type, price, attributes, options).",
        "",
        "## Files",
        "",
        f"- [{EPISODES_CSV}]({EPISODES_CSV}) (one row per episode), [{BY_ARM_CSV}]({BY_ARM_CSV}), "
        f"[{BY_STEP_CSV}]({BY_STEP_CSV}) (per rollout step, with slime's logged columns), "
        f"[{FAILURE_MODES_CSV}]({FAILURE_MODES_CSV}), [{TOOL_CALLS_CSV}]({TOOL_CALLS_CSV})",
        "",
    ]
    for plot in plots:
        lines.append(f"![{plot.name}]({plot.name})")
    if problems.count:
        lines += ["", f"## Problems ({problems.count})", ""]
        lines += [f"- {p}" for p in problems.first]
        if problems.count > len(problems.first):
            lines.append(f"- ... and {problems.count - len(problems.first)} more")
    return "\n".join(lines) + "\n"

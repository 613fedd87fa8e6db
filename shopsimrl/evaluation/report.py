"""eval_report.json, the printed table, and the paired comparison of two evaluations.

The report holds no timestamp and no timing, and is built from the final records in plan order, so
the same episodes always give the same bytes: two runs of one checkpoint with one plan agree.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import Any

from shopsimrl.evaluation.runner import EvaluationStatus, PlannedEpisode
from shopsimrl.evaluation.stats import CONFIDENCE, cluster_bootstrap, paired_difference, wilson

REPORT_SCHEMA_VERSION = 1
COMPARISON_SCHEMA_VERSION = 1
OUTCOMES = ("success", "reward", "strict_reward")
# What must be equal for two evaluations to be paired episode by episode.
_PAIRED_PLAN_KEYS = ("split", "task_ids_sha256", "seeds", "seed", "episode", "catalog")


def scored_records(planned: Sequence[PlannedEpisode], final: Mapping[tuple[str, ...], dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        final[episode.key] for episode in planned
        if episode.key in final and final[episode.key]["status"] == EvaluationStatus.SCORED
    ]


def build_report(plan: dict[str, Any], planned: Sequence[PlannedEpisode],
                 final: Mapping[tuple[str, ...], dict[str, Any]], *, bootstrap_samples: int, seed: int) -> dict[str, Any]:
    scored = scored_records(planned, final)
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in scored:
        by_task[record["task_id"]].append(record)
    outcomes: dict[str, Any] = {}
    for offset, key in enumerate(OUTCOMES):
        values = {task: [float(r[key]) for r in records] for task, records in by_task.items()}
        flat = [v for vs in values.values() for v in vs]
        entry: dict[str, Any] = {
            "mean": fmean(flat) if flat else None,
            "bootstrap_ci": _pair(cluster_bootstrap(values, samples=bootstrap_samples, seed=seed + offset)),
        }
        if key == "success":
            successes = sum(1 for v in flat if v > 0.5)
            entry |= {"successes": successes, "episodes": len(flat), "wilson_ci": _pair(wilson(successes, len(flat)))}
        outcomes[key] = entry
    failed = [r for r in scored if not r["success"]]
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "kind": "eval_report",
        "plan": plan,
        "confidence": CONFIDENCE,
        "episodes": {
            "planned": len(planned),
            "final": sum(1 for e in planned if e.key in final),
            "scored": len(scored),
            "unscorable": sum(1 for e in planned if e.key in final and final[e.key]["status"] == EvaluationStatus.UNSCORABLE),
            "tasks_scored": len(by_task),
        },
        "outcomes": outcomes,
        "per_episode": {
            "turns_mean": fmean(r["num_turns"] for r in scored) if scored else None,
            "turns_max": max((r["num_turns"] for r in scored), default=None),
            "model_tokens_mean": fmean(r["model_tokens"] for r in scored) if scored else None,
            "truncated_ratio": fmean(r["stop_reason"] in ("length", "context_limit") for r in scored) if scored else None,
        },
        "failure_modes": dict(sorted(Counter(r["failure_mode"] or "unclassified" for r in failed).items())),
        "stop_reasons": dict(sorted(Counter(r["stop_reason"] for r in scored).items())),
    }


def _pair(interval: tuple[float, float] | None) -> list[float] | None:
    return None if interval is None else [interval[0], interval[1]]


def report_lines(report: dict[str, Any]) -> list[str]:
    plan, counts, outcomes = report["plan"], report["episodes"], report["outcomes"]
    level = f"{report['confidence']:.0%}"
    lines = [
        f"eval {plan['checkpoint']} on {plan['split']}: {plan['tasks']} tasks x {plan['seeds']} seeds, "
        f"skills {plan['mask']} ({len(plan['skills'])} chunks)",
        f"  episodes: {counts['scored']}/{counts['planned']} scored, {counts['unscorable']} unscorable",
        f"  {'outcome':<14}{'mean':>8}  {level + ' task bootstrap':<24}{level + ' Wilson':<20}",
    ]
    for key in OUTCOMES:
        entry = outcomes[key]
        mean = "n/a" if entry["mean"] is None else f"{entry['mean']:.3f}"
        boot = _interval(entry["bootstrap_ci"])
        wil = _interval(entry.get("wilson_ci")) if key == "success" else ""
        lines.append(f"  {key:<14}{mean:>8}  {boot:<24}{wil:<20}")
    per = report["per_episode"]
    if per["turns_mean"] is not None:
        lines.append(f"  turns/episode {per['turns_mean']:.2f} (max {per['turns_max']}), model tokens/episode "
                     f"{per['model_tokens_mean']:.1f}, truncated {per['truncated_ratio']:.1%}")
    if report["failure_modes"]:
        modes = ", ".join(f"{mode} {count}" for mode, count in
                          sorted(report["failure_modes"].items(), key=lambda item: (-item[1], item[0])))
        lines.append(f"  failure modes: {modes}")
    return lines


def _interval(interval: Sequence[float] | None) -> str:
    return "n/a" if interval is None else f"[{interval[0]:.3f}, {interval[1]:.3f}]"


def comparability_problems(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Why two reports' episodes cannot be paired one to one (empty when they can)."""
    return [
        f"plan.{key}: {before['plan'].get(key)!r} vs {after['plan'].get(key)!r}"
        for key in _PAIRED_PLAN_KEYS
        if before["plan"].get(key) != after["plan"].get(key)
    ]


def compare(before: dict[str, Any], before_records: Sequence[dict[str, Any]], after: dict[str, Any],
            after_records: Sequence[dict[str, Any]], *, bootstrap_samples: int, seed: int) -> dict[str, Any]:
    """after - before on the episodes both scored (same task, same seeds), per outcome."""
    first = {r["episode_id"]: r for r in before_records}
    second = {r["episode_id"]: r for r in after_records}
    shared = [episode for episode in first if episode in second]  # plan order of the first
    result: dict[str, Any] = {
        "schema_version": COMPARISON_SCHEMA_VERSION,
        "kind": "eval_comparison",
        "before": {"checkpoint": before["plan"]["checkpoint"], "checkpoint_sha256": before["plan"]["checkpoint_sha256"],
                   "mask": before["plan"]["mask"]},
        "after": {"checkpoint": after["plan"]["checkpoint"], "checkpoint_sha256": after["plan"]["checkpoint_sha256"],
                  "mask": after["plan"]["mask"]},
        "confidence": CONFIDENCE,
        "test": "two-sided sign-flip permutation test on per-task mean differences",
        "outcomes": {},
    }
    for offset, key in enumerate(OUTCOMES):
        pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for episode in shared:
            pairs[first[episode]["task_id"]].append((float(first[episode][key]), float(second[episode][key])))
        diff = paired_difference(pairs, samples=bootstrap_samples, seed=seed + offset)
        result["outcomes"][key] = {
            "before": diff.before, "after": diff.after, "difference": diff.difference,
            "bootstrap_ci": _pair(diff.ci), "p_value": diff.p_value, "exact": diff.exact,
            "episodes": diff.episodes, "tasks": diff.tasks,
        }
    won = sum(1 for e in shared if second[e]["success"] and not first[e]["success"])
    lost = sum(1 for e in shared if first[e]["success"] and not second[e]["success"])
    result["success_discordant"] = {"after_only": won, "before_only": lost}
    return result


def comparison_lines(comparison: dict[str, Any]) -> list[str]:
    level = f"{comparison['confidence']:.0%}"
    lines = [
        f"compare (after - before, same episodes): {comparison['before']['checkpoint']} -> "
        f"{comparison['after']['checkpoint']}",
        f"  {'outcome':<14}{'before':>8}{'after':>8}{'diff':>9}  {level + ' task bootstrap':<22}{'p (two-sided)':>13}",
    ]
    for key, entry in comparison["outcomes"].items():
        if not entry["episodes"]:
            lines.append(f"  {key:<14}  no episode scored in both")
            continue
        p = "n/a" if entry["p_value"] is None else f"{entry['p_value']:.4f}"
        lines.append(f"  {key:<14}{entry['before']:>8.3f}{entry['after']:>8.3f}{entry['difference']:>+9.3f}  "
                     f"{_interval(entry['bootstrap_ci']):<22}{p:>13}")
    d = comparison["success_discordant"]
    lines.append(f"  success changed on {d['after_only'] + d['before_only']} episodes: "
                 f"{d['after_only']} gained, {d['before_only']} lost")
    return lines

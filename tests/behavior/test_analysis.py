"""Behaviour analysis on hand-built traces: a split episode, a turn-limit ending, a length truncation,
a technical error and wrong purchases, beside slime's per-Sample numbers of the same steps."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from shopsimrl.behavior import Ending, FailureMode, Tally, analyze_runs, classify_failure, group_episodes
from shopsimrl.cli import main
from shopsimrl.records import (
    GroupTrace,
    OutcomeRecord,
    SegmentTrace,
    TrajectoryTrace,
    read_group_trace,
    write_group_trace,
)
from shopsimrl.shop import ToolCall, format_tool_call
from shopsimrl.shop.observations import PolicyFailureKind, error_observation
from shopsimrl.storage import append_jsonl
from shopsimrl.tracking.export.report import render_report as render_export_report

GOLD = {
    "category": "fitness", "product_type": "dumbbell set",
    "attributes": {"material": "neoprene"}, "options": {"colour": "blue"}, "price_ceiling": 100.0,
}  # fmt: skip


def _line(**changes: Any) -> dict[str, Any]:
    line = {"product_type": "dumbbell set", "attributes": {"material": "neoprene"},
            "selected_options": {"colour": "blue"}, "price": 80.0}  # fmt: skip
    return {**line, **changes}


def _audit(finish: str, purchased: list[dict[str, Any]]) -> dict[str, Any]:
    return {"privileged": True, "gold": GOLD, "finish": finish, "purchased": purchased}


def _call(name: str, fmt: str = "json", **arguments: Any) -> dict[str, str]:
    return {"role": "assistant", "content": format_tool_call(ToolCall(name, arguments), fmt)}


def _ok(text: str = '{"results": []}') -> dict[str, str]:
    return {"role": "tool", "content": text}


def _error(kind: PolicyFailureKind) -> dict[str, str]:
    return {"role": "tool", "content": error_observation(kind, "what went wrong")}


HEAD = [
    {"role": "system", "content": "You are a shopping assistant."},
    {"role": "user", "content": "I need..."},
]


def _segment(
    index: int, count: int, trained: int, messages: list[dict[str, Any]], status: str = "completed"
) -> SegmentTrace:
    return SegmentTrace(segment_index=index, segment_count=count, sample_index=None, status=status,
                        total_tokens=500 + trained, response_tokens=trained + 10 * index, trained_tokens=trained,
                        messages=messages)  # fmt: skip


def _trajectory(
    rollout_id: int, outcome: OutcomeRecord, audit: Any, segments: list[SegmentTrace]
) -> TrajectoryTrace:
    return TrajectoryTrace(rollout_id=rollout_id, outcome=outcome, gold_audit=audit, segments=segments)


def _scored(reward: float, success: bool) -> OutcomeRecord:
    return OutcomeRecord(reward=reward, strict_reward=float(success), success=success, scorable=True)


def _group(
    step: int, index: int, arm: str, trajectories: list[TrajectoryTrace], retry: Any = None
) -> GroupTrace:
    return GroupTrace(rollout_step=step, group_index=index, group_key=f"task-{index}#g{index}", task_id=f"task-{index}",
                      split="train", arm=arm, mask=[], q=0.5, rho={}, retry=retry, technical_error=False,
                      all_wrong=False, zero_std=False, trajectories=trajectories)  # fmt: skip


def build_round(round_dir: Path) -> Path:
    """Three groups over two steps, one retry group, and slime's metrics.jsonl rows for both steps."""
    stage = round_dir / "train"
    split = _trajectory(0, _scored(1.0, True), _audit("checkout", [_line()]), [
        # a new tool set (cart non-empty) opened a second segment: one episode, two slime Samples
        _segment(0, 2, 30, [*HEAD, _call("search", query="dumbbell"), _ok(), _call("view", fmt="xml", product_id="P1"), _ok()]),
        _segment(1, 2, 20, [_call("add_to_cart", product_id="P1"), _ok(), _call("checkout"), _ok('{"done": true}')]),
    ])  # fmt: skip
    turn_limit = _trajectory(1, _scored(0.0, False), _audit("turn_limit", []), [
        _segment(0, 1, 12, [*HEAD, {"role": "assistant", "content": "I will search now."},
                            _error(PolicyFailureKind.MALFORMED_TOOL_CALL), _call("fly_away"),
                            _error(PolicyFailureKind.UNKNOWN_TOOL), _call("checkout"),
                            _error(PolicyFailureKind.TOOL_NOT_OFFERED)]),
    ])  # fmt: skip
    length = _trajectory(2, _scored(0.0, False), _audit("in_progress", []), [
        _segment(0, 1, 64, [*HEAD, _call("search", query="x"), _ok(), {"role": "assistant", "content": "<tool_call> rambling"}],
                 status="truncated"),
    ])  # fmt: skip
    technical = _trajectory(3, OutcomeRecord(scorable=False, technical_error={"kind": "model_service", "message": "HTTP 503"}),
                            None, [_segment(0, 1, 0, list(HEAD), status="failed")])  # fmt: skip
    wrong_option = _trajectory(4, _scored(0.75, False), _audit("checkout", [_line(selected_options={"colour": "red"})]), [
        _segment(0, 1, 15, [*HEAD, _call("search", query="x"), _ok(), _call("checkout"), _ok()]),
    ])  # fmt: skip
    over_budget = _trajectory(5, _scored(0.75, False), _audit("checkout", [_line(price=120.0)]), [
        _segment(0, 1, 9, [*HEAD, _call("checkout"), _ok()]),
    ])  # fmt: skip
    write_group_trace(stage, _group(0, 0, "assisted", [split, turn_limit]))
    write_group_trace(stage, _group(1, 1, "skill_free", [length, technical]))
    write_group_trace(stage, _group(1, 2, "assisted_empty", [wrong_option, over_budget]))
    write_group_trace(
        stage, _group(1, 3, "assisted", [over_budget], retry={"kind": "full_skill", "source_group_key": "k"})
    )
    # slime's own numbers of the accepted Samples only (here: group 0 at step 0; group 1 at step 1)
    append_jsonl(stage / "metrics.jsonl", {"_step": 0, "rollout/response_len/mean": 62 / 3,
                                            "rollout/truncated_ratio": 0.0, "rollout/step": 0})  # fmt: skip
    append_jsonl(stage / "metrics.jsonl", {"_step": 1, "train/step": 0, "train/loss": 0.1})
    append_jsonl(stage / "metrics.jsonl", {"_step": 2, "rollout/response_len/mean": 32.0,
                                            "rollout/truncated_ratio": 0.5, "rollout/step": 1})  # fmt: skip
    return round_dir


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_episodes_agree_with_the_hand_built_traces(tmp_path: Path) -> None:
    build_round(tmp_path / "runs" / "r0")
    result = analyze_runs([tmp_path / "runs" / "r0"], tmp_path / "out")
    episodes = _csv(tmp_path / "out" / "episodes.csv")
    got = [(e["rollout_id"], e["arm"], e["segments"], e["model_turns"], e["generated_tokens"], e["tool_calls"],
            e["invalid_calls"], e["ending"], e["failure_mode"], e["scorable"], e["success"]) for e in episodes]  # fmt: skip
    assert got == [
        ("0", "assisted", "2", "4", "50", "add_to_cart:1;checkout:1;search:1;view:1", "0", "checkout", "success", "1", "1"),
        ("1", "assisted", "1", "3", "12", "checkout:1", "3", "turn_limit", "invalid_tool_use", "1", "0"),
        ("2", "skill_free", "1", "2", "64", "search:1", "0", "length", "truncated_turn", "1", "0"),
        ("3", "skill_free", "1", "0", "0", "", "0", "technical", "technical", "0", ""),
        ("4", "assisted_empty", "1", "2", "15", "checkout:1;search:1", "0", "checkout", "wrong_option", "1", "0"),
        ("5", "assisted_empty", "1", "1", "9", "checkout:1", "0", "checkout", "over_budget", "1", "0"),
    ]  # fmt: skip
    assert result.tally.groups == 3 and result.tally.retry_groups_skipped == 1

    steps = {row["rollout_step"]: row for row in _csv(tmp_path / "out" / "by_step.csv")}
    # step 0: 2 episodes in 3 Samples; 62 generated tokens: 31 per episode, 20.67 per Sample (slime's view)
    assert steps["0"]["episodes"] == "2" and steps["0"]["samples"] == "3"
    assert float(steps["0"]["generated_tokens_per_episode"]) == pytest.approx(31.0)
    assert float(steps["0"]["generated_tokens_per_sample_all"]) == pytest.approx(62 / 3, rel=1e-5)
    assert float(steps["0"]["slime_response_len_mean_accepted"]) == pytest.approx(62 / 3, rel=1e-5)
    assert float(steps["0"]["episode_turn_limit_rate"]) == pytest.approx(0.5)
    assert float(steps["0"]["sample_truncated_ratio_all"]) == 0.0
    # step 1: the truncated Sample is one of 4 completed Samples; slime saw 2 accepted Samples
    assert float(steps["1"]["sample_truncated_ratio_all"]) == pytest.approx(0.25)
    assert float(steps["1"]["slime_truncated_ratio_accepted"]) == pytest.approx(0.5)
    assert float(steps["1"]["success_rate"]) == 0.0  # 3 scorable, none succeeded (technical excluded)

    arms = {row["arm"]: row for row in _csv(tmp_path / "out" / "by_arm.csv")}
    assert set(arms) == {"assisted", "assisted_empty", "skill_free", "all"}
    assert arms["assisted"]["split_episodes"] == "1" and arms["assisted"]["samples_per_episode"] == "1.5"
    assert float(arms["assisted"]["model_turns_mean"]) == pytest.approx(3.5)
    assert float(arms["assisted"]["invalid_calls_per_episode"]) == pytest.approx(1.5)
    assert float(arms["all"]["success_rate"]) == pytest.approx(1 / 5)
    assert float(arms["all"]["reward_mean"]) == pytest.approx(2.5 / 5)
    modes = {
        (r["arm"], r["failure_mode"]): r["episodes"] for r in _csv(tmp_path / "out" / "failure_modes.csv")
    }
    assert modes[("all", "success")] == "1" and modes[("skill_free", "technical")] == "1"
    tools = {
        (r["arm"], r["name"], r["kind"]): int(r["calls"]) for r in _csv(tmp_path / "out" / "tool_calls.csv")
    }
    assert (
        tools[("assisted", "tool_not_offered", "invalid")] == 1
        and tools[("assisted", "checkout", "valid_name")] == 2
    )
    assert not any(name == "fly_away" for _, name, _ in tools)  # the model's free text never becomes a key

    report = (tmp_path / "out" / "behavior_analysis.md").read_text()
    assert "| r0 | 6 | 7 | 1.17 | 1 | 2 | 25 | 21.4 | 26.3 | 16.7% | 14.3% | 25.0% |" in report
    for name in ("episode_vs_sample.png", "turns_by_arm.png", "failure_modes.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_several_rounds_side_by_side_and_bad_input(tmp_path: Path) -> None:
    first = build_round(tmp_path / "runs" / "qwen35-4b-round-000")
    second = tmp_path / "runs" / "qwen35-4b-round-001"
    shutil.copytree(first, second)
    (second / "train" / "traces" / "step-1" / "group-2.json").write_text('{"schema_version": 1, "kind": "gro')
    result = CliRunner().invoke(
        main, ["behavior", "analyze", str(first), str(second / "train"), "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    assert (
        result.output.splitlines()[-1]
        == f"10 episodes in 5 groups of 2 round(s) -> {tmp_path / 'out' / 'behavior_analysis.md'}"
    )
    assert result.output.startswith(
        f"warning: {second / 'train' / 'traces' / 'step-1' / 'group-2.json'}: not valid JSON"
    )
    rounds = [
        (r["round"], r["arm"], r["episodes"])
        for r in _csv(tmp_path / "out" / "by_arm.csv")
        if r["arm"] == "all"
    ]
    assert rounds == [("qwen35-4b-round-000", "all", "6"), ("qwen35-4b-round-001", "all", "4")]

    twice = CliRunner().invoke(main, ["behavior", "analyze", str(first), str(first / "train")])
    assert (
        twice.output == "Error: round 'qwen35-4b-round-000' is given twice; give each round directory once\n"
    )
    missing = CliRunner().invoke(main, ["behavior", "analyze", str(tmp_path)])
    assert missing.output == f"Error: {tmp_path}: no traces/ directory here or in {tmp_path / 'train'}\n"


@pytest.mark.parametrize(
    ("purchased", "expected"),
    [
        ([_line(product_type="kettlebell")], FailureMode.WRONG_PRODUCT_TYPE),
        ([_line(price=100.5)], FailureMode.OVER_BUDGET),
        ([_line(attributes={"material": "iron"})], FailureMode.ATTRIBUTE_MISMATCH),
        ([_line(selected_options={})], FailureMode.OPTION_NOT_SELECTED),
        ([_line(selected_options={"colour": "red"})], FailureMode.WRONG_OPTION),
        ([_line(), _line()], FailureMode.MULTIPLE_ITEMS),
        ([], FailureMode.TURN_LIMIT),  # checked out with nothing bought, and no tool ever failed
        ([_line()], FailureMode.WRONG_PRODUCT_TYPE),  # every constraint holds on a product that is not gold
    ],
)
def test_the_behaviour_analysis_and_the_analyst_share_one_classifier(
    purchased: list[dict[str, Any]], expected: FailureMode
) -> None:
    from shopsimrl.shop.failure_modes import classify_trajectory

    audit = _audit("checkout", purchased)
    messages = [*HEAD, _call("checkout"), _ok()]
    assert classify_failure(Ending.CHECKOUT, False, audit, messages) == expected.value
    assert classify_trajectory(audit, messages).mode is expected  # the Failure Analyst's cards say the same
    assert classify_failure(Ending.CHECKOUT, True, audit, messages) == "success"
    assert classify_failure(Ending.TECHNICAL, None, None, None) == "technical"


def test_memory_of_the_tally_does_not_grow_with_episodes(tmp_path: Path) -> None:
    build_round(tmp_path / "r")
    trace = read_group_trace(tmp_path / "r" / "train" / "traces" / "step-0" / "group-0.json")
    small, large = Tally(), Tally()
    for tally, repeats in ((small, 2), (large, 500)):
        for _ in range(repeats):
            for episode in group_episodes(trace, "r"):
                tally.add(episode)

    def sizes(t: Tally) -> list[tuple[int, ...]]:
        return [
            (len(c.tools), len(c.turns_hist), len(c.tokens_hist), len(c.endings)) for c in t.by_arm.values()
        ]

    assert sizes(small) == sizes(large) and len(small.by_step) == len(large.by_step) == 1
    assert large.by_arm[("r", "all")].episodes == 1000


def test_the_history_export_report_links_the_behaviour_analysis() -> None:
    manifest = {
        "updates_per_rollout": 2,
        "source": {"kind": "offline", "location": "wandb"},
        "exported_at": "t",
        "runs": [],
    }
    summary = {"totals": {"rollout_steps": 0, "optimizer_updates": 0},
               "axis_check": {"updates_outside_run_rollout_steps": 0}, "rounds": [], "zero_gradient_updates": []}  # fmt: skip
    report = render_export_report(manifest, summary, [])
    assert "[behaviour analysis](../behavior/behavior_analysis.md)" in report
    assert json.dumps(report)  # plain text

"""One shopping episode's behaviour, read from its group trace (docs/behavior_analysis.md).

An episode is one trajectory of a `GroupTrace`: all of its segments (token-contiguous slime
Samples) together. Facts come from the trace alone, no server:

* model turns: the assistant messages over all segments (segment 0 also holds system and user);
* generated tokens: the loss-mask ones of every segment (model tokens, not tool observations) —
  the per-Sample version of the same count is slime's effective response length;
* tool calls: each assistant message parsed as the environment parses it; the tool observation that
  answers it says whether the call was a policy failure (`{"error": <kind>, ...}`);
* ending and failure mode: `shopsimrl.behavior.failure_mode`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from shopsimrl.behavior.failure_mode import Ending, classify_ending, classify_failure
from shopsimrl.records import GroupTrace, TrajectoryTrace
from shopsimrl.shop.observations import PolicyFailureKind
from shopsimrl.shop.tool_calls import ToolCall, parse_tool_call

ASSISTANT = "assistant"
TOOL = "tool"
TRUNCATED = "truncated"
_ERROR_PREFIX = '{"error"'
# Calls whose tool name is the model's free text: never used as a tool-mix key (unbounded names).
_NAMELESS = {PolicyFailureKind.MALFORMED_TOOL_CALL.value, PolicyFailureKind.UNKNOWN_TOOL.value}


@dataclass(slots=True)
class EpisodeFacts:
    round: str
    rollout_step: int
    group_index: int
    rollout_id: int | str
    task_id: str
    arm: str
    segments: int
    model_turns: int | None  # None when the trace carries no messages
    generated_tokens: int
    response_tokens: int
    truncated_samples: int  # segments whose Sample status is TRUNCATED (what slime's ratio counts)
    tool_calls: dict[str, int] = field(default_factory=dict)  # offered-or-not known tool -> calls
    invalid_calls: dict[str, int] = field(default_factory=dict)  # policy-failure kind -> calls
    ending: Ending = Ending.UNKNOWN
    failure_mode: str = ""  # behavior.failure_mode.EPISODE_MODES
    scorable: bool = False
    reward: float | None = None
    success: bool | None = None

    @property
    def invalid_call_count(self) -> int:
        return sum(self.invalid_calls.values())


def _messages(trajectory: TrajectoryTrace) -> list[Mapping[str, Any]] | None:
    if any(segment.messages is None for segment in trajectory.segments):
        return None
    # JSON objects are dicts; `type(...) is dict` is the cheap test (an ABC isinstance is not, per message)
    return [m for segment in trajectory.segments for m in segment.messages or () if type(m) is dict]


def _error_kind(observation: Any) -> str | None:
    """The policy-failure kind of a tool observation, or None for a normal tool result."""
    if not isinstance(observation, str) or not observation.startswith(_ERROR_PREFIX):
        return None
    try:
        payload = json.loads(observation)
    except json.JSONDecodeError:
        return None
    kind = payload.get("error") if isinstance(payload, dict) else None
    return kind if isinstance(kind, str) else None


def _tool_calls(messages: list[Mapping[str, Any]]) -> tuple[int, dict[str, int], dict[str, int]]:
    turns = 0
    calls: dict[str, int] = {}
    invalid: dict[str, int] = {}
    for position, message in enumerate(messages):
        if message.get("role") != ASSISTANT:
            continue
        turns += 1
        following = messages[position + 1] if position + 1 < len(messages) else None
        if following is None or following.get("role") != TOOL:
            continue  # the turn the episode ended on (length / context limit): never executed
        kind = _error_kind(following.get("content"))
        if kind is not None:
            invalid[kind] = invalid.get(kind, 0) + 1
            if kind in _NAMELESS:
                continue
        call = parse_tool_call(str(message.get("content", "")))
        if isinstance(call, ToolCall):
            calls[call.name] = calls.get(call.name, 0) + 1
    return turns, calls, invalid


def episode_facts(trace: GroupTrace, trajectory: TrajectoryTrace, round_label: str) -> EpisodeFacts:
    messages = _messages(trajectory)
    turns: int | None = None
    calls: dict[str, int] = {}
    invalid: dict[str, int] = {}
    if messages is not None:
        turns, calls, invalid = _tool_calls(messages)
    segments = trajectory.segments
    last_status = segments[-1].status if segments else None
    last_role = messages[-1].get("role") if messages else None
    outcome = trajectory.outcome
    ending = classify_ending(outcome.technical_error, last_status, last_role, trajectory.gold_audit)
    return EpisodeFacts(
        round=round_label,
        rollout_step=trace.rollout_step,
        group_index=trace.group_index,
        rollout_id=trajectory.rollout_id,
        task_id=trace.task_id,
        arm=trace.arm,
        segments=len(segments),
        model_turns=turns,
        generated_tokens=sum(s.trained_tokens for s in segments),
        response_tokens=sum(s.response_tokens for s in segments),
        truncated_samples=sum(1 for s in segments if s.status == TRUNCATED),
        tool_calls=calls,
        invalid_calls=invalid,
        ending=ending,
        failure_mode=classify_failure(ending, outcome.success, trajectory.gold_audit, messages),
        scorable=outcome.scorable,
        reward=outcome.reward,
        success=outcome.success,
    )


def group_episodes(trace: GroupTrace, round_label: str) -> Iterator[EpisodeFacts]:
    """The episodes of one group trace, sibling by sibling."""
    for trajectory in trace.trajectories:
        yield episode_facts(trace, trajectory, round_label)

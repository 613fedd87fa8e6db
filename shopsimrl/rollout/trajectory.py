"""`Trajectory` and `Segment`: one multi-turn episode and its token-contiguous pieces.

Field-by-field documentation: docs/rollout.md. A segment holds exactly the tokens the model saw
when it generated its last turn: `tokens == prompt_ids + response_ids`, where `response_ids`
interleaves model tokens (loss mask 1, their rollout log-probs) and tool-observation tokens (loss
mask 0, log-prob 0.0). A new segment starts when the offered tool schema changes, because the tool
list is part of the prompt: its prompt re-renders the whole conversation with the new tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shopsimrl.contract import Outcome


class TrajectoryStatus(StrEnum):
    """The values of slime's `Sample.Status` a finished trajectory can take."""

    COMPLETED = "completed"  # the episode ended (checkout or the environment's turn limit)
    TRUNCATED = "truncated"  # a turn hit max_new_tokens, or the context limit was reached
    ABORTED = "aborted"  # the model server aborted a request (slime's end-of-rollout abort)
    FAILED = "failed"  # a technical error other than an abort


class StopReason(StrEnum):
    DONE = "done"  # the environment terminated the episode (checkout)
    TURN_LIMIT = "turn_limit"  # the environment's turn limit truncated the episode
    LENGTH = "length"  # the model's turn reached max_new_tokens without finishing
    CONTEXT_LIMIT = "context_limit"  # no room left in max_context_tokens for another turn
    TECHNICAL_ERROR = "technical_error"


@dataclass
class PhaseTimings:
    """Wall-clock seconds per phase (the canary's setup / agent / reward split)."""

    setup_s: float = 0.0  # environment reset, prompt rendering and tokenisation
    agent_s: float = 0.0  # the turn loop: generation, parsing, environment steps
    reward_s: float = 0.0  # final outcome and gold audit
    generation_s: float = 0.0  # the part of agent_s spent waiting for the generator
    environment_s: float = 0.0  # the part of agent_s spent outside generation (slime's non_generation_time)

    def to_dict(self) -> dict[str, float]:
        return {
            "setup_s": self.setup_s,
            "agent_s": self.agent_s,
            "reward_s": self.reward_s,
            "generation_s": self.generation_s,
            "environment_s": self.environment_s,
        }


@dataclass
class Segment:
    index: int
    prompt_ids: list[int]
    prompt_text: str
    tool_schema_hash: str
    tool_names: list[str]
    message_start: int  # first message of Trajectory.messages generated inside this segment
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    rollout_log_probs: list[float] = field(default_factory=list)
    response_text: str = ""
    message_end: int = 0  # one past the last message generated inside this segment
    weight_versions: list[str] = field(default_factory=list)
    model_turns: int = 0

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def response_length(self) -> int:
        return len(self.response_ids)

    def append_model(self, token_ids: list[int], log_probs: list[float], text: str) -> None:
        self.response_ids.extend(token_ids)
        self.loss_mask.extend([1] * len(token_ids))
        self.rollout_log_probs.extend(log_probs)
        self.response_text += text
        self.model_turns += 1

    def append_observation(self, token_ids: list[int], text: str) -> None:
        self.response_ids.extend(token_ids)
        self.loss_mask.extend([0] * len(token_ids))
        self.rollout_log_probs.extend([0.0] * len(token_ids))
        self.response_text += text


@dataclass
class Trajectory:
    task_id: str
    split: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    outcome: Outcome = field(default_factory=Outcome)
    status: TrajectoryStatus = TrajectoryStatus.COMPLETED
    stop_reason: StopReason = StopReason.DONE
    num_turns: int = 0  # assistant turns generated
    timings: PhaseTimings = field(default_factory=PhaseTimings)
    gold_audit: dict[str, Any] | None = None  # privileged: traces and triage only, never prompts
    state_hash: str | None = None
    reward_breakdown: dict[str, Any] | None = None

    @property
    def scorable(self) -> bool:
        return self.outcome.scorable

    def summary(self) -> dict[str, Any]:
        """Small JSON-able facts about the episode, copied into every segment's metadata."""
        return {
            "num_turns": self.num_turns,
            "num_segments": len(self.segments),
            "status": self.status.value,
            "stop_reason": self.stop_reason.value,
            "state_hash": self.state_hash,
            "timings": self.timings.to_dict(),
            "reward_breakdown": self.reward_breakdown,
        }

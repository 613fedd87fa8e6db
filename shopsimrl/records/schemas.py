"""Versioned schemas of the rollout audit record under the stage directory (`runs/<group>/train/`).

    traces/step-<n>/group-<group_index>.json   GroupTrace, one atomically written file per group
    triage.jsonl                               TriageRecord, one line per all-wrong or technical group
    retry_queue.jsonl                          RetryRequest, one line per queued full-skill retry
    retry_results.jsonl                        RetryResult, one line per finished retry

Every record carries `schema_version`; readers reject a version they do not know. Gold audits are
privileged: they live here and in failure cards, never in prompts.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = SCHEMA_VERSION


class OutcomeRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reward: float | None = None
    strict_reward: float | None = None
    success: bool | None = None
    scorable: bool = False
    technical_error: dict[str, str] | None = None


class SegmentTrace(BaseModel):
    model_config = ConfigDict(extra="forbid")
    segment_index: int
    segment_count: int
    sample_index: int | None
    status: str
    total_tokens: int
    response_tokens: int
    trained_tokens: int  # loss-mask ones: model tokens, not tool observations
    messages: list[Any] | None = None
    transcript: Any = None


class TrajectoryTrace(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rollout_id: int | str
    outcome: OutcomeRecord
    gold_audit: dict[str, Any] | None = None
    segments: list[SegmentTrace]


class GroupTrace(_Record):
    kind: Literal["group_trace"] = "group_trace"
    rollout_step: int
    group_index: int
    group_key: str
    task_id: str
    split: str
    arm: str
    mask: list[str]
    q: float
    rho: dict[str, float]
    retry: dict[str, Any] | None = None
    technical_error: bool
    all_wrong: bool
    zero_std: bool
    trajectories: list[TrajectoryTrace]


class TriageReason(StrEnum):
    ALL_WRONG = "all_wrong"
    TECHNICAL = "technical"


class TriageRecord(_Record):
    kind: Literal["triage"] = "triage"
    triage_id: str  # "<rollout_step>-<group_index>"
    rollout_step: int
    group_index: int
    group_key: str
    task_id: str
    split: Literal["train"]  # validation tasks feed the gate and must never reach the Analyst
    arm: str
    mask: list[str]
    reasons: list[TriageReason]
    outcomes: list[OutcomeRecord]
    rollout_ids: list[int | str]
    technical_errors: list[dict[str, str]]
    gold_audit: dict[str, Any] | None = None
    trace_path: str


class RetryRequest(_Record):
    kind: Literal["retry_request"] = "retry_request"
    request_id: str  # "<rollout_step>-<group_index>-full_skill"
    task_id: str
    group_key: str
    source_group_index: int
    rollout_step: int
    chunk_ids: list[str] = Field(description="every active chunk, in skillbank order")


class RetryResult(_Record):
    kind: Literal["retry_result"] = "retry_result"
    request_id: str
    source_group_index: int | None = None
    outcome: OutcomeRecord
    technical_error: dict[str, str] | None = None

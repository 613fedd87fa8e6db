"""Failure cards: one per triaged all-wrong group, in `runs/<group>/analysis/failure_cards.jsonl`.

A card is keyed by `triage_id` (card id `card-<triage_id>`). The sidecar appends a card with status
`pending` as soon as the group's triage record appears; the analysis stage adds the lesson and the
counterfactual trial and rewrites the file atomically, one line per card, with the final status.
Cards hold the privileged gold audit (`audit`): never put it into prompts, skills or public uploads.
Cards carry no wall-clock time, so the same inputs give byte-identical cards.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shopsimrl.analyst.evidence import EvidenceTurn, evidence_turns
from shopsimrl.records import GroupTrace, RetryResult, TriageRecord
from shopsimrl.shop.failure_modes import FailureMode, classify_trajectory, group_mode
from shopsimrl.storage import append_jsonl, atomic_write_bytes, read_jsonl
from shopsimrl.storage.jsonl import dumps_record
from shopsimrl.storage.layout import FAILURE_CARDS_FILE as CARDS_FILE

CARD_SCHEMA_VERSION = 1


class CardStatus(StrEnum):
    PENDING = "pending"  # written by the sidecar; no lesson yet
    ANALYSIS_ERROR = "analysis_error"  # the lesson backend failed (timeout, HTTP error, unparseable answer)
    ANALYZED = "analyzed"  # has a lesson; no trial (trials disabled or over trial.max_cards)
    TRIAL_ERROR = "trial_error"  # every trial episode was lost to technical failures
    ELIGIBLE = "eligible"  # the lesson's counterfactual trial succeeded: the card may yield a proposal
    EVIDENCE_ONLY = "evidence_only"  # the trial ran and did not succeed: kept as evidence


class LineCounts(BaseModel):
    """One purchased line, counts only (the reward breakdown of docs/reward.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type_ok: bool
    attributes_matched: int
    attributes_total: int
    options_matched: int
    options_total: int
    price_ok: bool
    reward: float | None


class SiblingRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    rollout_id: int | str
    reward: float | None
    strict_reward: float | None
    success: bool | None
    scorable: bool
    failure_mode: FailureMode
    finish: str | None
    turns: int
    policy_failures: dict[str, int] = Field(default_factory=dict)
    lines: list[LineCounts] = Field(default_factory=list)


class RetryOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    request_id: str
    scorable: bool
    success: bool | None
    reward: float | None
    technical_error: dict[str, str] | None = None


class Lesson(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    text: str
    backend: str
    failure_mode: FailureMode


class TrialRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    lesson_sha256: str
    attempts: int  # scorable episodes run
    successes: int
    technical_failures: int  # episodes lost to technical failures (retried, never counted as failed)
    rewards: list[float] = Field(default_factory=list)
    last_technical_error: dict[str, str] | None = None


class FailureCard(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = CARD_SCHEMA_VERSION
    kind: Literal["failure_card"] = "failure_card"
    card_id: str
    triage_id: str
    group_key: str
    task_id: str
    split: Literal["train"]
    rollout_step: int
    group_index: int
    arm: str
    mask: list[str]
    failure_mode: FailureMode
    siblings: list[SiblingRecord]
    evidence_turns: list[EvidenceTurn]
    audit: dict[str, Any]  # privileged: gold, purchases, failed constraints per sibling
    full_skill_retry: RetryOutcome | None = None
    status: CardStatus = CardStatus.PENDING
    lesson: Lesson | None = None
    analysis_error: str | None = None
    trial: TrialRecord | None = None


def card_id_for(triage_id: str) -> str:
    return f"card-{triage_id}"


def retry_request_id(triage_id: str) -> str:
    """The full-skill retry of a triaged group (shopsimrl.slime_metrics names it so)."""
    return f"{triage_id}-full_skill"


def build_card(triage: TriageRecord, trace: GroupTrace, retry: RetryResult | None) -> FailureCard:
    """The pending card of one all-wrong group from its triage record and its group trace."""
    siblings: list[SiblingRecord] = []
    evidence: list[EvidenceTurn] = []
    audits: list[dict[str, Any]] = []
    gold: Any = None
    instruction: Any = None
    for trajectory in trace.trajectories:
        messages = [m for segment in trajectory.segments for m in (segment.messages or []) if isinstance(m, dict)]
        audit = trajectory.gold_audit or {}
        gold = gold or audit.get("gold")
        instruction = instruction or audit.get("instruction")
        diagnosis = classify_trajectory(trajectory.gold_audit, messages)
        outcome = trajectory.outcome
        siblings.append(
            SiblingRecord(
                rollout_id=trajectory.rollout_id,
                reward=outcome.reward,
                strict_reward=outcome.strict_reward,
                success=outcome.success,
                scorable=outcome.scorable,
                failure_mode=diagnosis.mode,
                finish=diagnosis.finish,
                turns=diagnosis.turns,
                policy_failures=diagnosis.policy_failures,
                lines=[_line_counts(audit.get("gold") or {}, line) for line in audit.get("purchased") or []],
            )
        )
        evidence.extend(evidence_turns(trajectory.rollout_id, messages, trajectory.gold_audit))
        audits.append(
            {
                "rollout_id": trajectory.rollout_id,
                "purchased": audit.get("purchased", []),
                "failed_constraints": audit.get("failed_constraints", []),
            }
        )
    scorable_modes = [s.failure_mode for s in siblings if s.scorable]
    return FailureCard(
        card_id=card_id_for(triage.triage_id),
        triage_id=triage.triage_id,
        group_key=triage.group_key,
        task_id=triage.task_id,
        split=triage.split,
        rollout_step=triage.rollout_step,
        group_index=triage.group_index,
        arm=triage.arm,
        mask=list(triage.mask),
        failure_mode=group_mode(scorable_modes),
        siblings=siblings,
        evidence_turns=evidence,
        audit={
            "privileged": True,
            "instruction": instruction,
            "gold": gold if gold is not None else (triage.gold_audit or {}).get("gold"),
            "siblings": audits,
        },
        full_skill_retry=retry_outcome(retry),
    )


def retry_outcome(retry: RetryResult | None) -> RetryOutcome | None:
    if retry is None:
        return None
    return RetryOutcome(
        request_id=retry.request_id,
        scorable=retry.outcome.scorable,
        success=retry.outcome.success,
        reward=retry.outcome.reward,
        technical_error=retry.technical_error,
    )


def _line_counts(gold: Mapping[str, Any], line: Mapping[str, Any]) -> LineCounts:
    attributes = line.get("attributes") or {}
    selected = line.get("selected_options") or {}
    wanted_attributes = gold.get("attributes") or {}
    wanted_options = gold.get("options") or {}
    ceiling = gold.get("price_ceiling")
    price = line.get("price")
    return LineCounts(
        type_ok=line.get("product_type") == gold.get("product_type"),
        attributes_matched=sum(attributes.get(k) == v for k, v in wanted_attributes.items()),
        attributes_total=len(wanted_attributes),
        options_matched=sum(selected.get(k) == v for k, v in wanted_options.items()),
        options_total=len(wanted_options),
        price_ok=not (isinstance(price, (int, float)) and isinstance(ceiling, (int, float)) and price > ceiling),
        reward=line.get("reward"),
    )


# ---------------------------------------------------------------- the file
def cards_path(analysis_dir: str | os.PathLike[str]) -> Path:
    return Path(analysis_dir) / CARDS_FILE


def card_line(card: FailureCard) -> str:
    return dumps_record(card.model_dump(mode="json"))


def append_card(analysis_dir: str | os.PathLike[str], card: FailureCard) -> None:
    """One line, one write (O_APPEND): a crash leaves whole lines or a torn last line.

    Not fsynced here: a killed process loses nothing that was written, and the sidecar syncs the
    file once per pass (`sync_cards`); a card lost to a host crash is written again on restart.
    """
    append_jsonl(cards_path(analysis_dir), card.model_dump(mode="json"))


def sync_cards(analysis_dir: str | os.PathLike[str]) -> None:
    fd = os.open(cards_path(analysis_dir), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_cards(analysis_dir: str | os.PathLike[str]) -> tuple[list[FailureCard], list[str]]:
    """Every valid card, the last line per triage_id winning, in first-seen order; and the problems."""
    path = cards_path(analysis_dir)
    if not path.exists():
        return [], []
    raw = read_jsonl(path, strict_middle=False)
    problems = [str(problem) for problem in raw.problems]
    by_id: dict[str, FailureCard] = {}
    for number, record in enumerate(raw.records, start=1):
        try:
            card = FailureCard.model_validate(record)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            problems.append(f"{path}: record {number}: invalid failure card ({where}: {first['msg']})")
            continue
        by_id[card.triage_id] = card
    return list(by_id.values()), problems


def write_cards(analysis_dir: str | os.PathLike[str], cards: Iterable[FailureCard]) -> Path:
    """Replace the file atomically with one line per card (the analysis stage's final statuses)."""
    body = "".join(card_line(card) + "\n" for card in cards)
    return atomic_write_bytes(cards_path(analysis_dir), body.encode("utf-8"))


def count_by_status(cards: Sequence[FailureCard]) -> dict[str, int]:
    counts = {status.value: 0 for status in CardStatus}
    for card in cards:
        counts[card.status.value] += 1
    return counts

"""The compiler: eligible lessons -> conflict-free candidate interventions on logical chunks.

1. Cluster: lessons of the same failure mode whose word sets overlap by at least
   `compiler.text_similarity` (Jaccard) form one cluster; its text is the cluster's most frequent
   lesson (ties: the first seen). The rules backend gives one text per mode, so one cluster per mode.
2. Target: a mode's chunk is `<prefix>-<mode>` (underscores become dashes). When an active chunk of
   that family exists (`<prefix>-<mode>` or `<prefix>-<mode>-<n>`) the cluster revises it (unless the
   text is already the same); otherwise it adds a new chunk under the first id of the family that
   the skillbank has never used, active or not (ids are never reused: docs/curriculum.md).
3. Conflict-free: at most one intervention per chunk id; bigger clusters go first; at most
   `compiler.max_candidates` interventions.
4. Every text passes the firewall (against the gold of its own cluster's cards, the held-out
   tasks and the banned terms; each lesson passed it once already, before its trial:
   `screen_lessons`), and the ledger refuses an edit the gate rejected before
   without new evidence: one rejected alone in any pool, one rejected beside others only when
   the pool would be that same pool again. Active chunks that carry privileged facts get a
   `remove` proposal.
Each decision is a ledger entry; only `proposed` ones reach the pool.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shopsimrl.analyst.cards import CardStatus, FailureCard
from shopsimrl.analyst.config import CompilerSettings
from shopsimrl.analyst.firewall import Firewall, words
from shopsimrl.analyst.ledger import LedgerHistory
from shopsimrl.shop.failure_modes import FailureMode
from shopsimrl.skills.candidates import (
    CandidatePool,
    Intervention,
    LedgerEntry,
    LedgerEvent,
    Operation,
    proposal_id,
    text_sha256,
)
from shopsimrl.skills.skillbank import CHUNK_ID_PATTERN, Skillbank

_ORDER = {mode: rank for rank, mode in enumerate(FailureMode)}


@dataclass
class Cluster:
    failure_mode: FailureMode
    texts: list[str] = field(default_factory=list)
    card_ids: list[str] = field(default_factory=list)
    _words: set[str] = field(default_factory=set)

    @property
    def text(self) -> str:
        counts = Counter(self.texts)
        return max(counts, key=lambda t: (counts[t], -self.texts.index(t)))


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def cluster_lessons(cards: Sequence[FailureCard], similarity: float) -> list[Cluster]:
    """Clusters of the cards' lessons, biggest first (then by mode and text, for a stable order)."""
    clusters: list[Cluster] = []
    for card in cards:
        if card.lesson is None:
            continue
        text = card.lesson.text
        bag = set(words(text))
        home = next(
            (c for c in clusters if c.failure_mode is card.failure_mode and jaccard(c._words, bag) >= similarity),
            None,
        )
        if home is None:
            home = Cluster(card.failure_mode, _words=bag)
            clusters.append(home)
        home.texts.append(text)
        home.card_ids.append(card.card_id)
    return sorted(clusters, key=lambda c: (-len(c.card_ids), _ORDER[c.failure_mode], c.text))


def mode_family(prefix: str, mode: FailureMode) -> str:
    return f"{prefix}-{mode.value.replace('_', '-')}"


def target_chunk(skillbank: Skillbank, prefix: str, mode: FailureMode) -> tuple[Operation, str]:
    """Revise the mode's active chunk, or add one under the family's first never-used id."""
    family = mode_family(prefix, mode)
    member = re.compile(rf"^{re.escape(family)}(-\d+)?$")
    for chunk in skillbank.active_chunks:
        if member.match(chunk.logical_chunk_id):
            return Operation.REVISE, chunk.logical_chunk_id
    used = {chunk.logical_chunk_id for chunk in skillbank.chunks}
    candidate, n = family, 1
    while candidate in used:
        n += 1
        candidate = f"{family}-{n}"
    if not CHUNK_ID_PATTERN.match(candidate):
        raise ValueError(f"chunk id {candidate!r} is not valid; shorten compiler.chunk_id_prefix")
    return Operation.ADD, candidate


def screen_lessons(
    cards: Sequence[FailureCard],
    *,
    firewall: Firewall,
    skillbank: Skillbank,
    round_name: str,
    settings: CompilerSettings,
    now: str,
) -> tuple[list[FailureCard], list[LedgerEntry]]:
    """The firewall before the trial: a lesson that carries privileged facts is never tried (a
    lesson naming the gold product would help its own trial succeed). Its card goes back to
    `analysis_error` (a new lesson is asked for on the next run) and the rejection is a ledger
    entry; the reasons name the kind of leak and a hash, never the value."""
    out: list[FailureCard] = []
    entries: list[LedgerEntry] = []
    for card in cards:
        # Every lesson, tried or not: a lesson an older firewall let through is caught now.
        verdict = firewall.check(card.lesson.text, (card.card_id,)) if card.lesson is not None else None
        if verdict is None or verdict.ok:
            out.append(card)
            continue
        op, chunk = target_chunk(skillbank, settings.chunk_id_prefix, card.failure_mode)
        text = card.lesson.text
        entries.append(
            LedgerEntry(event=LedgerEvent.FIREWALL_REJECTED, round=round_name, proposal_id=proposal_id(op, chunk, text),
                        logical_chunk_id=chunk, operation=op, text_sha256=text_sha256(text), at=now,
                        evidence_card_ids=(card.card_id,), reason="; ".join(verdict.reasons),
                        details={"failure_mode": card.failure_mode.value, "stage": "before_trial",
                                 "leak_kinds": list(verdict.kinds)})  # fmt: skip
        )
        error = f"lesson rejected by the firewall before its trial ({', '.join(verdict.kinds)})"
        out.append(card.model_copy(update={"lesson": None, "analysis_error": error, "status": CardStatus.ANALYSIS_ERROR}))
    return out, entries


@dataclass(frozen=True)
class _Proposal:
    """An edit that passed every check on its own; whether it joins the pool depends on the others."""

    op: Operation
    chunk: str
    text: str | None
    pid: str
    evidence: tuple[str, ...] = ()
    details: dict[str, Any] | None = None
    failure_mode: str | None = None
    reason: str | None = None


@dataclass
class CompileResult:
    pool: CandidatePool
    entries: list[LedgerEntry]
    clusters: int


def compile_candidates(
    cards: Sequence[FailureCard],
    *,
    skillbank: Skillbank,
    skillbank_sha256: str,
    round_name: str,
    firewall: Firewall,
    skillbank_firewall: Firewall,
    history: LedgerHistory,
    settings: CompilerSettings,
    now: str,
) -> CompileResult:
    """The candidate pool and the ledger entries of this compile (to be appended by the caller)."""
    entries: list[LedgerEntry | _Proposal] = []  # proposals stay placeholders until the pool is known
    proposals: list[_Proposal] = []
    taken: set[str] = set()
    texts = {c.logical_chunk_id: c.text for c in skillbank.active_chunks}

    def entry(event: LedgerEvent, op: Operation, chunk: str, text: str | None, pid: str, **extra: Any) -> None:
        entries.append(
            LedgerEntry(event=event, round=round_name, proposal_id=pid, logical_chunk_id=chunk, operation=op,
                        text_sha256=text_sha256(text), at=now, **extra)  # fmt: skip
        )

    eligible = [c for c in cards if c.status is CardStatus.ELIGIBLE]
    clusters = cluster_lessons(eligible, settings.text_similarity)
    for cluster in clusters:
        op, chunk = target_chunk(skillbank, settings.chunk_id_prefix, cluster.failure_mode)
        text = cluster.text
        if chunk in taken or (op is Operation.REVISE and texts.get(chunk) == text):
            continue  # one edit per chunk; a revision to the same text is no edit
        pid = proposal_id(op, chunk, text)
        evidence = tuple(sorted(cluster.card_ids))
        details = {"failure_mode": cluster.failure_mode.value, "evidence_count": len(evidence)}
        if len(evidence) < settings.min_evidence_cards:
            continue
        verdict = firewall.check(text, evidence)  # the gold of this cluster's cards, no other card's
        if not verdict.ok:
            entry(LedgerEvent.FIREWALL_REJECTED, op, chunk, text, pid, evidence_card_ids=evidence,
                  reason="; ".join(verdict.reasons), details=details | {"leak_kinds": list(verdict.kinds)})  # fmt: skip
            continue
        duplicate = history.duplicate_reason(pid, round_name, evidence)
        if duplicate is not None:
            entry(LedgerEvent.DUPLICATE_REJECTED, op, chunk, text, pid, evidence_card_ids=evidence,
                  reason=duplicate, details=details)  # fmt: skip
            continue
        if len(proposals) >= settings.max_candidates:
            break
        taken.add(chunk)
        proposals.append(_Proposal(op, chunk, text, pid, evidence, details, cluster.failure_mode.value))
        entries.append(proposals[-1])

    for chunk in skillbank.active_chunks:
        verdict = skillbank_firewall.check(chunk.text)
        if verdict.ok or chunk.logical_chunk_id in taken or len(proposals) >= settings.max_candidates:
            continue
        pid = proposal_id(Operation.REMOVE, chunk.logical_chunk_id, None)
        reason = "active chunk carries privileged facts: " + "; ".join(verdict.reasons)
        duplicate = history.duplicate_reason(pid, round_name, ())
        if duplicate is not None:
            entry(LedgerEvent.DUPLICATE_REJECTED, Operation.REMOVE, chunk.logical_chunk_id, None, pid, reason=duplicate)
            continue
        taken.add(chunk.logical_chunk_id)
        proposals.append(_Proposal(Operation.REMOVE, chunk.logical_chunk_id, None, pid, reason=reason))
        entries.append(proposals[-1])

    # Lessons whose trial did not succeed: recorded as history, never proposed.
    for cluster in cluster_lessons([c for c in cards if c.status is CardStatus.EVIDENCE_ONLY], settings.text_similarity):
        op, chunk = target_chunk(skillbank, settings.chunk_id_prefix, cluster.failure_mode)
        entry(LedgerEvent.TRIAL_FAILED, op, chunk, cluster.text, proposal_id(op, chunk, cluster.text),
              evidence_card_ids=tuple(sorted(cluster.card_ids)),
              details={"failure_mode": cluster.failure_mode.value})  # fmt: skip

    barred = same_pool_bars(proposals, history, round_name)
    interventions: list[Intervention] = []
    resolved: list[LedgerEntry] = []
    for item in entries:
        if not isinstance(item, _Proposal):
            resolved.append(item)
            continue
        common = {"event": LedgerEvent.PROPOSED, "round": round_name, "proposal_id": item.pid,
                  "logical_chunk_id": item.chunk, "operation": item.op, "text_sha256": text_sha256(item.text),
                  "at": now, "evidence_card_ids": item.evidence, "details": item.details or {}}  # fmt: skip
        if item.pid in barred:
            resolved.append(LedgerEntry(**common | {"event": LedgerEvent.DUPLICATE_REJECTED, "reason": barred[item.pid]}))
            continue
        intervention_id = f"iv-{len(interventions) + 1:02d}-{item.chunk}"
        interventions.append(
            Intervention(intervention_id=intervention_id, logical_chunk_id=item.chunk, operation=item.op,
                         text=item.text, failure_mode=item.failure_mode, evidence_card_ids=item.evidence,
                         proposal_id=item.pid)  # fmt: skip
        )
        resolved.append(LedgerEntry(**common | {"intervention_id": intervention_id, "reason": item.reason}))
    pool = CandidatePool(round=round_name, skillbank_sha256=skillbank_sha256, interventions=tuple(interventions))
    return CompileResult(pool=pool, entries=resolved, clusters=len(clusters))


def same_pool_bars(proposals: Sequence[_Proposal], history: LedgerHistory, round_name: str) -> dict[str, str]:
    """The proposals to leave out because the gate rejected them in exactly the pool they would form.

    One at a time, from the end (the smallest clusters first): leaving one out changes the pool, so
    the others may no longer repeat a measured pool. Two edits rejected together in round r come
    back as the first of them alone (a different pool, a different measurement); the second waits.
    """
    kept = list(proposals)
    barred: dict[str, str] = {}
    while True:
        pool = [item.pid for item in kept]
        for item in reversed(kept):
            reason = history.duplicate_reason(item.pid, round_name, item.evidence, pool=pool)
            if reason is not None:
                barred[item.pid] = reason
                kept.remove(item)
                break
        else:
            return barred

"""The seam between the Failure Analyst and the validation gate: candidate skill edits.

    analysis/candidate_pool.json     CandidatePool, written atomically by the Analyst's compiler
    analysis/proposal_ledger.jsonl   LedgerEntry lines: every proposal and what became of it
    gate/proposal_ledger.jsonl       the Analyst's ledger with the gate's verdicts appended

A pool is conflict-free: at most one intervention per `logical_chunk_id`, so the gate can switch
each intervention on or off independently and `apply_interventions` never has to choose between two
edits of one chunk. The gate applies only the interventions it selected.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shopsimrl.skills.skillbank import CHUNK_ID_PATTERN, Skillbank, SkillChunk, validate_skillbank

CANDIDATE_POOL_SCHEMA_VERSION = 1
LEDGER_SCHEMA_VERSION = 2  # 2: gate verdicts carry the pool they were measured in (`GatePool`)


class Operation(StrEnum):
    ADD = "add"  # a new chunk, appended at the end of the skillbank
    REVISE = "revise"  # new text for an active chunk; its id (and metric names) stay
    REMOVE = "remove"  # deactivate an active chunk; the id stays in the file, never reused


class Intervention(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    intervention_id: str
    logical_chunk_id: str
    operation: Operation
    text: str | None = Field(default=None, description="required for add and revise; None for remove")
    failure_mode: str | None = None
    evidence_card_ids: tuple[str, ...] = ()
    proposal_id: str | None = None

    @model_validator(mode="after")
    def _text_matches_operation(self) -> Intervention:
        if not CHUNK_ID_PATTERN.match(self.logical_chunk_id):
            raise ValueError(f"logical_chunk_id {self.logical_chunk_id!r} is not a valid chunk id")
        needs_text = self.operation in (Operation.ADD, Operation.REVISE)
        if needs_text and not (self.text and self.text.strip()):
            raise ValueError(f"{self.intervention_id}: operation {self.operation} needs a non-empty text")
        if not needs_text and self.text is not None:
            raise ValueError(f"{self.intervention_id}: operation remove takes no text")
        return self


class CandidatePool(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = CANDIDATE_POOL_SCHEMA_VERSION
    round: str  # the round's W&B group, e.g. qwen35-4b-round-000
    skillbank_sha256: str  # the skillbank the interventions were written against
    interventions: tuple[Intervention, ...] = ()

    @model_validator(mode="after")
    def _conflict_free(self) -> CandidatePool:
        seen_ids: set[str] = set()
        seen_chunks: dict[str, str] = {}
        for item in self.interventions:
            if item.intervention_id in seen_ids:
                raise ValueError(f"duplicate intervention_id {item.intervention_id!r}")
            seen_ids.add(item.intervention_id)
            if item.logical_chunk_id in seen_chunks:
                raise ValueError(
                    f"two interventions edit chunk {item.logical_chunk_id!r}: "
                    f"{seen_chunks[item.logical_chunk_id]} and {item.intervention_id}"
                )
            seen_chunks[item.logical_chunk_id] = item.intervention_id
        return self


class LedgerEvent(StrEnum):
    PROPOSED = "proposed"  # compiled into the candidate pool
    FIREWALL_REJECTED = "firewall_rejected"  # carried privileged facts; never proposed
    TRIAL_FAILED = "trial_failed"  # counterfactual trial did not succeed; evidence only
    DUPLICATE_REJECTED = "duplicate_rejected"  # rejected by the gate before, no new evidence
    GATE_SELECTED = "gate_selected"
    GATE_REJECTED = "gate_rejected"
    GATE_INSUFFICIENT = "gate_insufficient"


class GatePool(BaseModel):
    """The pool a gate verdict was measured in. A verdict is conditional on it: the gate estimates an
    edit's effect averaged over random backgrounds of the other candidates, so an edit rejected beside
    others says little about the edit alone (docs/gate.md, "Ledger verdicts")."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    proposal_ids: tuple[str, ...]  # every candidate of the gate, in pool order (stable across rounds)
    intervention_ids: tuple[str, ...]  # the same candidates' ids in that round's pool
    size: int
    design_seed: int | None = None  # the gate's design seed, when known

    @model_validator(mode="after")
    def _consistent(self) -> GatePool:
        if not (self.size == len(self.proposal_ids) == len(self.intervention_ids)):
            raise ValueError(
                f"pool size {self.size} but {len(self.proposal_ids)} proposal ids and "
                f"{len(self.intervention_ids)} intervention ids"
            )
        return self


class LedgerEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1, 2] = LEDGER_SCHEMA_VERSION  # 1: written before pools were recorded
    kind: Literal["proposal_ledger"] = "proposal_ledger"
    event: LedgerEvent
    round: str
    proposal_id: str  # stable for the same (operation, chunk id, text)
    logical_chunk_id: str
    operation: Operation
    text_sha256: str | None = None
    intervention_id: str | None = None
    evidence_card_ids: tuple[str, ...] = ()
    reason: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    pool: GatePool | None = None  # gate verdicts only; None on the Analyst's events and on version 1 lines
    at: str  # UTC ISO-8601


def text_sha256(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def proposal_id(operation: Operation | str, logical_chunk_id: str, text: str | None) -> str:
    """Stable id of an edit: the same operation, chunk and text always get the same id."""
    digest = hashlib.blake2b(
        f"{Operation(operation).value}\x1f{logical_chunk_id}\x1f{text or ''}".encode(), digest_size=8
    ).hexdigest()
    return f"prop-{digest}"


def apply_interventions(
    skillbank: Skillbank, interventions: list[Intervention] | tuple[Intervention, ...], round_name: str
) -> Skillbank:
    """The skillbank with `interventions` applied, validated as `load_skillbank` would.

    `add` appends a chunk (an id that exists, active or not, is an error: ids are never reused);
    `revise` replaces an active chunk's text; `remove` deactivates an active chunk. Provenance
    records the round and the intervention.
    """
    by_id = {chunk.logical_chunk_id: chunk for chunk in skillbank.chunks}
    active = set(skillbank.active_ids)
    edits = {item.logical_chunk_id: item for item in interventions}
    if len(edits) != len(interventions):
        raise ValueError("two interventions edit the same chunk")
    chunks: list[dict[str, Any]] = []
    for chunk in skillbank.chunks:
        item = edits.get(chunk.logical_chunk_id)
        raw = chunk.model_dump()
        if item is not None and item.operation is not Operation.ADD:
            if chunk.logical_chunk_id not in active:
                raise ValueError(f"{item.intervention_id}: chunk {chunk.logical_chunk_id!r} is not active")
            raw["provenance"] = _provenance(item, round_name, previous=chunk)
            if item.operation is Operation.REVISE:
                raw["text"] = item.text
            else:
                raw["active"] = False
        chunks.append(raw)
    for item in interventions:
        if item.operation is Operation.ADD:
            if item.logical_chunk_id in by_id:
                raise ValueError(f"{item.intervention_id}: chunk id {item.logical_chunk_id!r} already exists")
            chunks.append(
                {
                    "logical_chunk_id": item.logical_chunk_id,
                    "text": item.text,
                    "provenance": _provenance(item, round_name, previous=None),
                    "active": True,
                }
            )
        elif item.logical_chunk_id not in by_id:
            raise ValueError(f"{item.intervention_id}: chunk {item.logical_chunk_id!r} is not in the skillbank")
    raw_bank = {
        "schema_version": skillbank.schema_version,
        "name": skillbank.name,
        "description": skillbank.description,
        "chunks": chunks,
    }
    return validate_skillbank(raw_bank, f"skillbank after {round_name} interventions")


def _provenance(item: Intervention, round_name: str, previous: SkillChunk | None) -> dict[str, Any]:
    provenance: dict[str, Any] = {
        "source": "analyst",
        "round": round_name,
        "intervention_id": item.intervention_id,
        "operation": item.operation.value,
    }
    if item.proposal_id:
        provenance["proposal_id"] = item.proposal_id
    if previous is not None:
        provenance["previous"] = previous.provenance
    return provenance

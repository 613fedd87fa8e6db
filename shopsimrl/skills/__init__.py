"""Skills: the skillbank file and the candidate edits to it, the seam between the Analyst and the gate.

    skillbank.py    the skillbank JSON: ordered skill chunks with stable `logical_chunk_id`s
    candidates.py   candidate edits (`CandidatePool`), the proposal ledger, `apply_interventions`

The rollout draws prompts from a skillbank, the Analyst proposes edits to it, the gate selects
among them and the round runner writes the next one; all of them import it from here. It sits
just above `config` (it reads files through `config.files`) and below every stage.
"""

from __future__ import annotations

from shopsimrl.skills.candidates import (
    CandidatePool,
    GatePool,
    Intervention,
    LedgerEntry,
    LedgerEvent,
    Operation,
    apply_interventions,
    proposal_id,
)
from shopsimrl.skills.skillbank import (
    Skillbank,
    SkillChunk,
    empty_skillbank,
    load_skillbank,
    validate_skillbank,
)

__all__ = [
    "CandidatePool",
    "GatePool",
    "Intervention",
    "LedgerEntry",
    "LedgerEvent",
    "Operation",
    "SkillChunk",
    "Skillbank",
    "apply_interventions",
    "empty_skillbank",
    "load_skillbank",
    "proposal_id",
    "validate_skillbank",
]

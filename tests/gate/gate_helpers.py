"""Helpers of the gate tests: the example skillbank and a three-candidate pool built with the contract classes."""

from __future__ import annotations

from pathlib import Path

from shopsimrl.skills.candidates import CandidatePool, Intervention, Operation
from shopsimrl.storage import file_sha256

REPO = Path(__file__).resolve().parents[2]
SKILLBANK_EXAMPLE = REPO / "configs" / "skillbank.example.json"


def candidate_pool(skillbank: Path, round_name: str = "round-000") -> CandidatePool:
    """Three interventions, one of each operation, against the example skillbank."""
    return CandidatePool(
        round=round_name,
        skillbank_sha256=file_sha256(skillbank),
        interventions=(
            Intervention(
                intervention_id="int-add-compare",
                logical_chunk_id="compare-prices",
                operation=Operation.ADD,
                text="Compare the price of every candidate with the ceiling before adding it to the cart.",
                proposal_id="prop-add",
            ),
            Intervention(
                intervention_id="int-revise-search",
                logical_chunk_id="search-with-filters",
                operation=Operation.REVISE,
                text="Search with the product type and one distinctive attribute; filter by the price ceiling.",
            ),
            Intervention(
                intervention_id="int-remove-verify",
                logical_chunk_id="verify-before-cart",
                operation=Operation.REMOVE,
            ),
        ),
    )

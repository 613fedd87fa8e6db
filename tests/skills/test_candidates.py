"""The Analyst -> gate seam: candidate pools are conflict-free and apply to a skillbank validly."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shopsimrl.skills.candidates import (
    CandidatePool,
    Intervention,
    Operation,
    apply_interventions,
    proposal_id,
)
from shopsimrl.skills.skillbank import load_skillbank, validate_skillbank

EXAMPLE = "configs/skillbank.example.json"


def _iv(iid: str, chunk: str, op: str, text: str | None = "Some general procedure.") -> Intervention:
    return Intervention(intervention_id=iid, logical_chunk_id=chunk, operation=op, text=text)


def test_apply_add_revise_remove_gives_a_valid_skillbank():
    bank = load_skillbank(EXAMPLE)
    edits = [
        _iv("iv-a", "compare-prices", "add", "Compare the price with the ceiling before buying."),
        _iv("iv-r", "search-with-filters", "revise", "Search with the type and one attribute."),
        _iv("iv-x", "verify-before-cart", "remove", None),
    ]
    new = apply_interventions(bank, edits, "round-000")
    assert new.active_ids == [
        "read-the-constraints", "search-with-filters", "select-every-option",
        "check-cart-then-checkout", "compare-prices",
    ]
    by_id = {c.logical_chunk_id: c for c in new.chunks}
    assert by_id["search-with-filters"].text == "Search with the type and one attribute."
    assert by_id["verify-before-cart"].active is False
    assert by_id["compare-prices"].provenance["intervention_id"] == "iv-a"
    assert by_id["search-with-filters"].provenance["previous"]["source"] == "seed"
    # the result round-trips through the file validator
    assert validate_skillbank(new.model_dump(mode="json")).active_ids == new.active_ids


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_iv("iv-1", "one-call-per-turn", "add"), "already exists"),  # inactive ids are never reused
        (_iv("iv-2", "one-call-per-turn", "revise"), "is not active"),
        (_iv("iv-3", "no-such-chunk", "remove", None), "is not in the skillbank"),
    ],
)
def test_apply_refuses_edits_that_break_the_id_rules(edit, message):
    with pytest.raises(ValueError, match=message):
        apply_interventions(load_skillbank(EXAMPLE), [edit], "round-000")


def test_pool_refuses_two_edits_of_one_chunk():
    with pytest.raises(ValidationError, match="two interventions edit chunk 'c1'"):
        CandidatePool(round="r", skillbank_sha256="0" * 64,
                      interventions=[_iv("iv-1", "c1", "add"), _iv("iv-2", "c1", "add")])


def test_text_must_match_the_operation():
    with pytest.raises(ValidationError, match="needs a non-empty text"):
        _iv("iv-1", "c1", "revise", "  ")
    with pytest.raises(ValidationError, match="remove takes no text"):
        _iv("iv-1", "c1", "remove", "text")


def test_proposal_id_is_stable_and_distinguishes_edits():
    assert proposal_id("add", "c1", "t") == proposal_id(Operation.ADD, "c1", "t")
    assert len({proposal_id("add", "c1", "t"), proposal_id("add", "c1", "u"),
                proposal_id("revise", "c1", "t"), proposal_id("add", "c2", "t")}) == 4

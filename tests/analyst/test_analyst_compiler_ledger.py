"""Compiler (clusters, chunk ids, conflict-free pool) and ledger (no re-proposal without new evidence)."""

from __future__ import annotations

import pytest
from analyst_helpers import SKILLBANK, catalog
from test_analyst_firewall import CARD

from shopsimrl.analyst.cards import CardStatus, FailureCard, Lesson
from shopsimrl.analyst.compiler import cluster_lessons, compile_candidates, target_chunk
from shopsimrl.analyst.config import CompilerSettings
from shopsimrl.analyst.firewall import Firewall, value_digest
from shopsimrl.analyst.ledger import LedgerHistory, append_entries, ledger_path, read_ledger
from shopsimrl.analyst.lessons import RULE_LESSONS
from shopsimrl.shop.failure_modes import FailureMode
from shopsimrl.skills.candidates import LedgerEntry, LedgerEvent, Operation, apply_interventions
from shopsimrl.skills.skillbank import load_skillbank, validate_skillbank

M = FailureMode
NOW = "2026-01-01T00:00:00+00:00"


def card(n: int, mode: FailureMode, text: str | None = None, status=CardStatus.ELIGIBLE) -> FailureCard:
    return CARD.model_copy(update={
        "card_id": f"card-0-{n}", "triage_id": f"0-{n}", "failure_mode": mode, "status": status,
        "lesson": Lesson(text=text or RULE_LESSONS[mode], backend="rules", failure_mode=mode),
    })  # fmt: skip


def bank(*chunks):
    raw = {"schema_version": 1, "name": "t", "chunks": [
        {"logical_chunk_id": cid, "text": text, "provenance": {"source": "seed"}, "active": active}
        for cid, text, active in chunks]}  # fmt: skip
    return validate_skillbank(raw)


def compile_(cards, skillbank, history=None, round_name="round-001", **settings):
    wall = Firewall.for_evidence(cards, catalog=catalog())
    return compile_candidates(
        cards, skillbank=skillbank, skillbank_sha256="0" * 64, round_name=round_name, firewall=wall,
        skillbank_firewall=Firewall.for_evidence([], catalog=catalog()), history=history or LedgerHistory([]),
        settings=CompilerSettings(**settings), now=NOW,
    )  # fmt: skip


def test_clusters_join_similar_texts_of_one_mode_only():
    cards = [
        card(1, M.OVER_BUDGET, "Check the price against the limit before adding to the cart."),
        card(2, M.OVER_BUDGET, "Check the price against the limit before adding it to the cart."),
        card(3, M.OVER_BUDGET, "Always open the product page first."),
        card(4, M.WRONG_OPTION, "Check the price against the limit before adding to the cart."),
    ]
    clusters = cluster_lessons(cards, similarity=0.6)
    assert [(c.failure_mode, c.card_ids) for c in clusters] == [
        (M.OVER_BUDGET, ["card-0-1", "card-0-2"]),
        (M.OVER_BUDGET, ["card-0-3"]),
        (M.WRONG_OPTION, ["card-0-4"]),
    ]


def test_new_chunk_ids_never_reuse_an_inactive_id_and_active_ones_are_revised():
    assert target_chunk(bank(), "analyst", M.OVER_BUDGET) == (Operation.ADD, "analyst-over-budget")
    retired = bank(("analyst-over-budget", "old", False), ("analyst-over-budget-2", "old", False))
    assert target_chunk(retired, "analyst", M.OVER_BUDGET) == (Operation.ADD, "analyst-over-budget-3")
    live = bank(("analyst-over-budget", "old", False), ("analyst-over-budget-2", "current", True))
    assert target_chunk(live, "analyst", M.OVER_BUDGET) == (Operation.REVISE, "analyst-over-budget-2")


def test_pool_is_conflict_free_and_applies_to_the_skillbank():
    skillbank = load_skillbank(SKILLBANK)
    cards = [
        card(1, M.OVER_BUDGET), card(2, M.OVER_BUDGET), card(3, M.WRONG_OPTION),
        card(4, M.OVER_BUDGET, "Before buying, compare the price with the limit and search with max_price."),
        card(5, M.TURN_LIMIT, status=CardStatus.EVIDENCE_ONLY),
    ]  # fmt: skip
    result = compile_(cards, skillbank)
    chunks = [i.logical_chunk_id for i in result.pool.interventions]
    # Two over-budget clusters want the same chunk: only the bigger one gets it.
    assert chunks == ["analyst-over-budget", "analyst-wrong-option"]
    first = result.pool.interventions[0]
    assert first.operation is Operation.ADD and first.evidence_card_ids == ("card-0-1", "card-0-2")
    assert first.text == RULE_LESSONS[M.OVER_BUDGET]
    events = [(e.event, e.logical_chunk_id) for e in result.entries]
    assert events == [
        (LedgerEvent.PROPOSED, "analyst-over-budget"),
        (LedgerEvent.PROPOSED, "analyst-wrong-option"),
        (LedgerEvent.TRIAL_FAILED, "analyst-turn-limit"),
    ]
    applied = apply_interventions(skillbank, result.pool.interventions, "round-001")
    assert applied.active_ids[-2:] == chunks


def test_a_revision_to_the_same_text_is_no_candidate_and_a_new_text_is_a_revise():
    same = bank(("analyst-over-budget", RULE_LESSONS[M.OVER_BUDGET], True))
    assert compile_([card(1, M.OVER_BUDGET)], same).pool.interventions == ()
    other = bank(("analyst-over-budget", "Mind the price.", True))
    [item] = compile_([card(1, M.OVER_BUDGET)], other).pool.interventions
    assert (item.operation, item.logical_chunk_id) == (Operation.REVISE, "analyst-over-budget")


def test_leaky_lessons_are_firewalled_and_leaky_chunks_get_a_remove():
    leaky_lesson = card(1, M.OVER_BUDGET, "Never buy P000123.")
    leaky_chunk = bank(("seed-hint", "Product P000007 is usually right.", True), ("clean", "Check options.", True))
    result = compile_([leaky_lesson], leaky_chunk)
    [item] = result.pool.interventions
    assert (item.operation, item.logical_chunk_id, item.text) == (Operation.REMOVE, "seed-hint", None)
    rejected = [e for e in result.entries if e.event is LedgerEvent.FIREWALL_REJECTED]
    # The reason names the kind and a hash of the id, never the id itself.
    assert [e.reason for e in rejected] == [f"product id of any product [sha256:{value_digest('P000123')}]"]
    assert [e.details["leak_kinds"] for e in rejected] == [["product id"]]


def test_max_candidates_and_min_evidence():
    cards = [card(1, M.OVER_BUDGET), card(2, M.OVER_BUDGET), card(3, M.WRONG_OPTION), card(4, M.TURN_LIMIT)]
    assert len(compile_(cards, bank(), max_candidates=2).pool.interventions) == 2
    [only] = compile_(cards, bank(), min_evidence_cards=2).pool.interventions
    assert only.logical_chunk_id == "analyst-over-budget"


def _gate_rejects(tmp_path, proposed):
    # The gate appends its verdict to the same history (gate/proposal_ledger.jsonl); one file here.
    verdicts = [e.model_copy(update={"event": LedgerEvent.GATE_REJECTED, "reason": "lower bound < 0"})
                for e in proposed if e.event is LedgerEvent.PROPOSED]  # fmt: skip
    append_entries(tmp_path, [*proposed, *verdicts])
    entries, problems = read_ledger(ledger_path(tmp_path))
    assert problems == []
    return LedgerHistory(entries)


def test_ledger_refuses_a_gate_rejected_edit_without_new_evidence(tmp_path):
    cards = [card(1, M.OVER_BUDGET), card(2, M.OVER_BUDGET)]
    first = compile_(cards, bank(), round_name="round-000")
    history = _gate_rejects(tmp_path, first.entries)

    again = compile_(cards, bank(), history=history, round_name="round-000")
    assert again.pool.interventions == ()
    [refused] = again.entries
    assert refused.event is LedgerEvent.DUPLICATE_REJECTED
    assert refused.proposal_id == first.entries[0].proposal_id
    assert refused.reason == "rejected by the gate in round(s) round-000; no new evidence card since"


@pytest.mark.parametrize("new_evidence", ["a new card this round", "the same card ids in a later round"])
def test_ledger_allows_it_again_with_new_evidence(tmp_path, new_evidence):
    cards = [card(1, M.OVER_BUDGET)]
    history = _gate_rejects(tmp_path, compile_(cards, bank(), round_name="round-000").entries)
    if new_evidence == "a new card this round":
        result = compile_([*cards, card(9, M.OVER_BUDGET)], bank(), history=history, round_name="round-000")
    else:  # card ids restart every round; (round, card id) is what identifies evidence
        result = compile_(cards, bank(), history=history, round_name="round-001")
    assert [e.event for e in result.entries] == [LedgerEvent.PROPOSED]


def test_ledger_reader_reports_a_torn_last_line(tmp_path):
    entry = LedgerEntry(event=LedgerEvent.PROPOSED, round="r", proposal_id="prop-1", logical_chunk_id="a",
                        operation=Operation.ADD, text_sha256=None, at=NOW)  # fmt: skip
    append_entries(tmp_path, [entry])
    with open(ledger_path(tmp_path), "a", encoding="utf-8") as handle:
        handle.write('{"schema_version": 1, "kind": "propo')
    entries, problems = read_ledger(ledger_path(tmp_path))
    assert entries == [entry]
    assert problems == [f"{ledger_path(tmp_path)}:2: unreadable JSONL record (no newline at end (torn write))"]


def test_an_analysis_that_proposed_nothing_still_leaves_an_empty_ledger(tmp_path):
    """The gate reads the round's ledger: a round whose Analyst had no card must not stop the gate."""
    from shopsimrl.analyst.ledger import append_entries, ledger_path

    assert append_entries(tmp_path / "analysis", []) == 0
    assert ledger_path(tmp_path / "analysis").read_bytes() == b""

"""Decision files: the selected skillbank loads, the ledger gets one verdict per candidate, the Table's columns."""

from __future__ import annotations

import shutil

from gate_helpers import SKILLBANK_EXAMPLE, candidate_pool

from shopsimrl.gate.design import build_design
from shopsimrl.gate.estimate import Effect, Estimate, Status
from shopsimrl.gate.outputs import (
    TABLE_COLUMNS,
    contributions_document,
    descriptive,
    selected_ids,
    table_rows,
    write_ledger,
    write_selected_skillbank,
)
from shopsimrl.skills.candidates import LedgerEntry
from shopsimrl.skills.skillbank import load_skillbank
from shopsimrl.storage import read_jsonl

STATUSES = {"int-add-compare": Status.SELECTED, "int-revise-search": Status.REJECTED,
            "int-remove-verify": Status.SELECTED}


def _document(pool):
    effects = tuple(
        Effect(item.intervention_id, coef, 0.01, coef - 0.03, coef + 0.03, coef - 0.02, coef + 0.02, 0.001, 0.003,
               0.9, 0.9, STATUSES[item.intervention_id], "test", rank)
        for item, coef, rank in zip(pool.interventions, (0.2, -0.1, 0.05), (1, 3, 2), strict=True)
    )
    design = build_design(["t1"], candidates=[i.intervention_id for i in pool.interventions], replicates=1,
                          pairing="complement", seed=5)
    estimate = Estimate(effects, 400, 200, 0.0, 199, 0.025, 0.1)
    return contributions_document(round_name="round-000", pool=pool, design=design, decided_on="success",
                                  estimates={"success": estimate, "reward": estimate}, summary={})


def test_selected_skillbank_applies_exactly_the_selected_edits_and_loads(tmp_path):
    skillbank = tmp_path / "skillbank.json"
    shutil.copyfile(SKILLBANK_EXAMPLE, skillbank)
    pool = candidate_pool(skillbank)
    document = _document(pool)
    assert selected_ids(document) == ["int-add-compare", "int-remove-verify"]
    write_selected_skillbank(tmp_path, load_skillbank(skillbank), pool, selected_ids(document), "round-000")
    bank = load_skillbank(tmp_path / "selected_skillbank.json")
    chunks = {c.logical_chunk_id: c for c in bank.chunks}
    assert chunks["compare-prices"].active and chunks["compare-prices"].provenance["intervention_id"] == "int-add-compare"
    assert not chunks["verify-before-cart"].active
    original = {c.logical_chunk_id: c for c in load_skillbank(skillbank).chunks}
    assert chunks["search-with-filters"] == original["search-with-filters"]  # rejected: untouched
    markdown = (tmp_path / "selected_skill.md").read_text()
    assert "## compare-prices (from int-add-compare)" in markdown
    assert "verify-before-cart" not in markdown


def test_ledger_copies_the_analysts_and_appends_one_verdict_per_candidate(tmp_path):
    skillbank = tmp_path / "skillbank.json"
    shutil.copyfile(SKILLBANK_EXAMPLE, skillbank)
    pool = candidate_pool(skillbank)
    analyst = tmp_path / "analyst.jsonl"
    analyst.write_text('{"torn": tr')  # a torn last line stays a line of its own
    path = write_ledger(tmp_path, analyst, pool, _document(pool))
    result = read_jsonl(path, strict_middle=False)
    entries = [LedgerEntry.model_validate(r) for r in result.records]
    assert [(e.intervention_id, e.event.value) for e in entries] == [
        ("int-add-compare", "gate_selected"), ("int-revise-search", "gate_rejected"),
        ("int-remove-verify", "gate_selected")]
    assert entries[0].proposal_id == "prop-add" and entries[1].proposal_id.startswith("prop-")
    assert entries[0].details["coefficient"] == 0.2
    # The interval that decided, and the unadjusted one under its own name.
    assert (entries[0].details["ci_low"], entries[0].details["unadjusted_ci_low"]) == (0.2 - 0.03, 0.2 - 0.02)
    assert len(result.problems) == 1


def test_every_verdict_carries_the_pool_it_was_measured_in(tmp_path):
    """A verdict is conditional on its pool; the ledger says which (fails without `pool`)."""
    pool = candidate_pool(SKILLBANK_EXAMPLE)
    path = write_ledger(tmp_path, None, pool, _document(pool))
    entries = [LedgerEntry.model_validate(r) for r in read_jsonl(path).records]
    proposal_ids = tuple(e.proposal_id for e in entries)
    assert proposal_ids[0] == "prop-add" and len(set(proposal_ids)) == 3
    for entry in entries:
        assert entry.pool.model_dump() == {
            "proposal_ids": proposal_ids,
            "intervention_ids": ("int-add-compare", "int-revise-search", "int-remove-verify"),
            "size": 3,
            "design_seed": 5,
        }
        assert entry.schema_version == 2


def test_table_rows_have_the_six_spec_columns_then_the_deciding_and_the_unadjusted_interval(tmp_path):
    pool = candidate_pool(SKILLBANK_EXAMPLE)
    assert TABLE_COLUMNS[6:] == ("ci_low", "ci_high", "unadjusted_ci_low", "unadjusted_ci_high")
    assert table_rows(_document(pool)) == [
        ["int-add-compare", "compare-prices", "add", 0.2, 1, "selected", 0.2 - 0.03, 0.2 + 0.03, 0.2 - 0.02, 0.2 + 0.02],
        ["int-revise-search", "search-with-filters", "revise", -0.1, 3, "rejected", -0.1 - 0.03, -0.1 + 0.03,
         -0.1 - 0.02, -0.1 + 0.02],
        ["int-remove-verify", "verify-before-cart", "remove", 0.05, 2, "selected", 0.05 - 0.03, 0.05 + 0.03,
         0.05 - 0.02, 0.05 + 0.02],
    ]  # fmt: skip


def test_descriptive_means_use_empty_mask_episodes_as_bare_and_are_absent_without_them():
    design = build_design(["t1", "t2"], candidates=["c1"], replicates=1, pairing="complement", seed=0)
    final = {}
    for pair in design.pairs:
        for arm in ("a", "b"):
            on = bool(pair.mask(arm))
            final[(pair.pair_id, arm)] = {"status": "scored", "reward": 0.75 if on else 0.25, "success": on}
    stats = descriptive(design, final)
    assert (stats["bare_reward"], stats["masked_reward"], stats["delta_reward"]) == (0.25, 0.75, 0.5)
    assert (stats["bare_success"], stats["delta_success"]) == (0.0, 1.0)
    many = build_design(["t1"], candidates=["c1", "c2"], replicates=1, pairing="bare", seed=0)
    pair = many.pairs[0]
    only_masked = {(pair.pair_id, "a"): {"status": "scored", "reward": 1.0, "success": True},
                   (pair.pair_id, "b"): {"status": "unscorable", "reward": None, "success": None}}
    stats = descriptive(many, only_masked)
    assert "bare_reward" not in stats and "delta_reward" not in stats and stats["bare_reward_episodes"] == 0

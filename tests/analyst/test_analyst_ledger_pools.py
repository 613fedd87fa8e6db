"""Conditional verdicts: the gate's verdict holds for the pool it was measured in.

The interaction case, through the real compiler, estimator and ledger writer: two edits worth
+0.14 each alone and -0.07 together average -0.035 over the fold-over's random background, so a
gate on the pair rejects both. Neither is barred from coming back alone; the same pair again is;
an edit rejected alone stays barred.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from test_analyst_compiler_ledger import M, bank, card, compile_

from shopsimrl.analyst.ledger import LedgerHistory, append_entries, ledger_path
from shopsimrl.gate.design import build_design
from shopsimrl.gate.estimate import PairObservation, Status, estimate_effects
from shopsimrl.gate.outputs import contributions_document, write_ledger
from shopsimrl.skills.candidates import CandidatePool, LedgerEvent

ROUND = "round-000"  # every compile in the same round with the same cards: no new evidence anywhere
A = [card(1, M.OVER_BUDGET), card(2, M.OVER_BUDGET)]
B = [card(3, M.WRONG_OPTION)]


def _gate(tmp_path, pool: CandidatePool, outcome, name: str) -> Path:
    """A gate of 200 tasks x 3 replicates on `pool` whose true success is `outcome(mask)`, written as
    the real gate writes its ledger; returns the history the next compile reads."""
    ids = [item.intervention_id for item in pool.interventions]
    design = build_design([f"t{i:03d}" for i in range(200)], candidates=ids, replicates=3, pairing="complement",
                          seed=0)  # fmt: skip
    rng = np.random.default_rng(0)
    observations = [
        PairObservation(pair.task_id, tuple(design.indicators(pair)),
                        outcome(set(pair.mask_a)) + float(rng.normal(scale=0.3)), outcome(set(pair.mask_b)))
        for pair in design.pairs
    ]  # fmt: skip
    estimate = estimate_effects(observations, ids, alpha=0.025, min_effect=0.10)
    document = contributions_document(round_name=ROUND, pool=pool, design=design, decided_on="success",
                                      estimates={"success": estimate}, summary={})  # fmt: skip
    analysis = tmp_path / name / "analysis"
    append_entries(analysis, [])
    gate_dir = tmp_path / name / "gate"
    gate_dir.mkdir()
    path = write_ledger(gate_dir, ledger_path(analysis), pool, document)
    assert {e.status for e in estimate.effects} == {Status.REJECTED}
    return path


def _proposed(result):
    return [item.logical_chunk_id for item in result.pool.interventions]


def test_edits_rejected_together_may_each_come_back_alone_but_not_as_the_same_pair(tmp_path):
    both = compile_([*A, *B], bank(), round_name=ROUND)
    [a, b] = both.pool.interventions
    interaction = {a.intervention_id: 0.14, b.intervention_id: 0.14}

    def success(mask):  # +0.14 each alone, -0.07 together
        return -0.07 if len(mask) == 2 else sum(interaction[i] for i in mask)

    together = _gate(tmp_path, both.pool, success, "round-000-pair")
    history, problems = LedgerHistory.load([together])
    assert problems == []
    assert _proposed(compile_(A, bank(), history, ROUND)) == [a.logical_chunk_id]
    assert _proposed(compile_(B, bank(), history, ROUND)) == [b.logical_chunk_id]
    # Both again would repeat the measured pool: the first (the bigger cluster) comes back alone.
    again = compile_([*A, *B], bank(), history, ROUND)
    assert _proposed(again) == [a.logical_chunk_id]
    refused = [e for e in again.entries if e.event is LedgerEvent.DUPLICATE_REJECTED]
    assert [(e.proposal_id, e.reason) for e in refused] == [
        (b.proposal_id, "rejected by the gate in round(s) round-000 in this same pool of 2; no new evidence card since")]

    # Then A, alone, is rejected: that verdict is about A itself and bars it from every pool.
    alone = compile_(A, bank(), history, ROUND).pool
    rejected_alone = _gate(tmp_path, alone, lambda mask: -0.10 * len(mask), "round-000-alone")
    history, _ = LedgerHistory.load([together, rejected_alone])
    assert _proposed(compile_(A, bank(), history, ROUND)) == []
    after = compile_([*A, *B], bank(), history, ROUND)
    assert _proposed(after) == [b.logical_chunk_id]  # B never was measured alone
    assert [(e.proposal_id, e.reason) for e in after.entries if e.event is LedgerEvent.DUPLICATE_REJECTED] == [
        (a.proposal_id, "rejected by the gate in round(s) round-000; no new evidence card since")]


def test_a_verdict_written_before_pools_were_recorded_still_bars(tmp_path):
    """Ledger schema 1 lines carry no pool: what they were measured beside is unknown, so they bar as before."""
    both = compile_([*A, *B], bank(), round_name=ROUND)
    path = _gate(tmp_path, both.pool, lambda mask: -0.07 if len(mask) == 2 else 0.14 * len(mask), "pair")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    older = tmp_path / "older.jsonl"
    older.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "pool"} | {"schema_version": 1}) + "\n"
                             for line in lines), encoding="utf-8")  # fmt: skip
    history, problems = LedgerHistory.load([older])
    assert problems == []
    assert _proposed(compile_(A, bank(), history, ROUND)) == []

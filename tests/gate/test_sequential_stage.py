"""The sequential gate in the stage: it stops at the first look that decides every candidate, reads only
that look's prefix of the design, and a re-run (a resume) takes the same decision with the same bytes.

The first look's outcomes are written as evaluation records (a tiny random model never succeeds, so
it could not produce an early decision): the gate is registered on a model service that is down, the
records of look 1 are appended as a finished run would have, and the gate is run again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from shopsimrl.evaluation.runner import RunnerAborted
from shopsimrl.gate.config import load_gate_config
from shopsimrl.gate.design import Design
from shopsimrl.gate.sequential import look_plan
from shopsimrl.gate.stage import run_gate
from shopsimrl.storage import append_jsonl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))
from sglang_fake_server import fake_sglang  # noqa: E402

HELPS, HURT_1, HURT_2 = "int-add-compare", "int-revise-search", "int-remove-verify"  # gate_helpers' pool


def _success(mask: list[str], flip: bool) -> bool:
    """Success when at least two of: the helpful edit on, the two harmful ones off; 10% of outcomes flipped."""
    votes = (HELPS in mask) + (HURT_1 not in mask) + (HURT_2 not in mask)
    return (votes >= 2) != flip


def _records(design: Design, pairs: slice, seed: int, *, reverse: bool = False) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for pair in design.pairs[pairs]:
        for arm in ("a", "b"):
            mask = list(pair.mask(arm))
            success = _success(mask, bool(rng.random() < 0.10)) != reverse
            out.append({
                "schema_version": 1, "kind": "gate_evaluation", "pair_id": pair.pair_id, "arm": arm,
                "replicate": pair.replicate, "task_id": pair.task_id, "mask": mask,
                "sampling_seed": pair.sampling_seed, "attempt": 1, "status": "scored", "reward": float(success),
                "strict_reward": float(success), "success": success, "failure_mode": None, "technical_error": None,
                "num_turns": 1, "model_tokens": 1, "stop_reason": "done", "state_hash": "0" * 64,
                "response_sha256": "0" * 64, "elapsed_s": 0.0,
            })
    return out


def test_a_sequential_gate_stops_at_the_first_deciding_look_and_a_rerun_decides_the_same(gate_files):
    down = lambda request: (500, {"error": "engine down"})  # noqa: E731
    with fake_sglang([down]) as server:
        config = load_gate_config(gate_files(design={"tasks": 40, "replicates": 4, "looks": 4}), {
            "generator": {"backend": "sglang", "url": server.url, "concurrency": 1, "max_attempts": 3,
                          "abort_after_consecutive_failures": 1},
        })
        with pytest.raises(RunnerAborted):  # registers the design, then finds the service down
            run_gate(config, echo=lambda line: None)
        requests = len(server.requests)
        gate_dir = config.gate_dir
        design = Design.from_json(json.loads((gate_dir / "mask_assignments.json").read_text()))
        plan = look_plan(pairs=160, looks=4, alpha=0.025, rho=2.0, candidates=3)
        assert [look.pairs for look in plan] == [40, 80, 120, 160] and len(design.pairs) == 160
        assert len({pair.task_id for pair in design.pairs[:40]}) == 40  # replicate order: look 1 sees every task
        for record in _records(design, slice(0, 40), seed=3):
            append_jsonl(gate_dir / "evaluations.jsonl", record)

        lines: list[str] = []
        result = run_gate(config, echo=lines.append)
        assert len(server.requests) == requests  # look 1 was complete: no episode ran
        first = (gate_dir / "contributions.json").read_bytes()

        # A record reaching past the stopping look (with the opposite effects) changes nothing:
        # a look reads only its own prefix of the design.
        for record in _records(design, slice(40, 80), seed=4, reverse=True):
            append_jsonl(gate_dir / "evaluations.jsonl", record)
        again = run_gate(config, echo=lambda line: None)
        assert len(server.requests) == requests

    assert result.complete and again.complete
    assert (gate_dir / "contributions.json").read_bytes() == first
    document = json.loads(first)
    effects = document["estimates"]["success"]["effects"]
    # Look 1 selects the helpful edit and rejects one harmful edit; the other harmful one is not yet
    # credibly below min_effect but futile (it could no longer be selected), so it no longer holds the gate open.
    assert [(e["intervention_id"], e["status"]) for e in effects] == [
        (HELPS, "selected"), (HURT_1, "insufficient"), (HURT_2, "rejected")]
    assert effects[1]["reason"].endswith("; the gate stopped at look 1 of 4: conditional power 0.01 < futility 0.4")
    assert document["estimates"]["success"]["alpha"] == plan[0].alpha  # decided at look 1's alpha
    sequential = document["summary"]["sequential"]
    assert {k: sequential[k] for k in ("looks", "stopped_at_look", "pairs_analysed", "pairs_planned")} == {
        "looks": 4, "stopped_at_look": 1, "pairs_analysed": 40, "pairs_planned": 160}
    assert document["summary"]["finished"] == 80 and result.coverage == 80 / 320
    assert f"gate: {plan[0].describe(4)}: stop" in lines
    assert f"  sequential: stopped at look 1 of 4 (40 of 160 pairs, alpha {plan[0].alpha:g})" in result.lines
    assert result.lines[-1].startswith(f"  selected: {HELPS} -> ")

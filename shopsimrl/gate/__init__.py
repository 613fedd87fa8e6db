"""The online validation gate: randomized paired-delta validation of candidate skill edits (docs/gate.md).

    config.py     GateConfig (the YAML), load_gate_config
    design.py     the pre-registered pairs and masks (mask_assignments.json)
    power.py      the budget from K: the fewest pairs with power 0.8 under a conservative outcome model
    sequential.py interim looks: alpha spending, the stopping rule (every candidate decided or futile)
    plan.py       budget + design + looks of one gate (what the stage runs)
    manifest.py   input hashes; a resume refuses any difference
    (episodes)    shopsimrl/evaluation/runner.py, shared with `shopsimrl eval`; evaluations.jsonl
    estimate.py   OLS of paired deltas on the mask indicators, clustered by task; Holm; selection rule
    guards.py     one gate per directory (a lock), one outcome per evaluation
    outputs.py    contributions.json, selected skillbank, ledger verdicts, the W&B Table rows
    stage.py      run_gate: all of the above, and one W&B record
    commands.py   `shopsimrl training online-gate CONFIG`
    positive_control.py  GEPA's acceptance rule replayed on paired episodes; bench/gate_positive_control.py's report

Only the light modules are imported here; `run_gate` (which pulls in the agent loop) is lazy.
"""

from __future__ import annotations

from typing import Any

from shopsimrl.gate.config import GateConfig, Pairing, load_gate_config
from shopsimrl.gate.design import Design, Pair, build_design
from shopsimrl.gate.estimate import Effect, Estimate, PairObservation, Status, estimate_effects

__all__ = [
    "Design",
    "Effect",
    "Estimate",
    "GateConfig",
    "Pair",
    "PairObservation",
    "Pairing",
    "Status",
    "build_design",
    "estimate_effects",
    "load_gate_config",
    "run_gate",
]


def __getattr__(name: str) -> Any:
    if name == "run_gate":
        from shopsimrl.gate.stage import run_gate

        return run_gate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

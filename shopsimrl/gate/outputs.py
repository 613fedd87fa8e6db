"""The gate's files under runs/<round>/gate/ and the rows of its W&B Table.

    online_gate_manifest.json   inputs' hashes and the design (manifest.py)
    mask_assignments.json       the pre-registered design (design.py)
    evaluations.jsonl           one line per finished attempt (shopsimrl/evaluation/runner.py; the audit record)
    contributions.json          per candidate: coefficient, SE, the deciding (Holm-adjusted) interval and the
                                unadjusted one, p-values, rank, status (both outcomes)
    selected_skillbank.json     the current skillbank with the selected interventions applied
    selected_skill.md           the same, for people
    proposal_ledger.jsonl       the Analyst's ledger with one gate verdict per candidate appended, each with
                                the pool it was measured in

contributions.json holds no timestamp and is built from the evaluations in design order, so the
same evaluations always give the same bytes (a resumed gate equals an uninterrupted one).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from statistics import fmean
from typing import Any

from shopsimrl.evaluation.runner import EvaluationStatus
from shopsimrl.gate.design import Design
from shopsimrl.gate.estimate import Estimate, Status
from shopsimrl.skills.candidates import (
    CandidatePool,
    GatePool,
    LedgerEntry,
    LedgerEvent,
    apply_interventions,
    proposal_id,
    text_sha256,
)
from shopsimrl.skills.skillbank import Skillbank
from shopsimrl.storage import atomic_write_json, atomic_write_text
from shopsimrl.storage.jsonl import dumps_record
from shopsimrl.storage.layout import (
    CONTRIBUTIONS_FILE,
    MASK_ASSIGNMENTS_FILE,
    SELECTED_SKILL_FILE,
    SELECTED_SKILLBANK_FILE,
)
from shopsimrl.storage.layout import GATE_MANIFEST_FILE as MANIFEST_FILE
from shopsimrl.storage.layout import PROPOSAL_LEDGER_FILE as LEDGER_FILE

# The six files of the gate artifact (docs/gate.md, "Files").
ARTIFACT_FILES = (
    MANIFEST_FILE,
    CONTRIBUTIONS_FILE,
    SELECTED_SKILLBANK_FILE,
    SELECTED_SKILL_FILE,
    LEDGER_FILE,
    MASK_ASSIGNMENTS_FILE,
)
# 2: ci_low/ci_high are the Holm-adjusted interval that decides, unadjusted_ci_low/unadjusted_ci_high
# the unadjusted one; each outcome's estimate names its alpha and min_effect; design_seed. Version 1
# files hold the unadjusted interval under ci_low/ci_high (readers of either get the key they read).
CONTRIBUTIONS_SCHEMA_VERSION = 2
# The spec's six columns (section 5), then the deciding interval and the unadjusted one beside it.
TABLE_COLUMNS = ("intervention_id", "logical_chunk_id", "operation", "coefficient", "rank", "status",
                 "ci_low", "ci_high", "unadjusted_ci_low", "unadjusted_ci_high")  # fmt: skip
# ci_low/ci_high: the Holm-adjusted interval that decided; the unadjusted one beside it.
_LEDGER_DETAILS = ("coefficient", "se", "ci_low", "ci_high", "unadjusted_ci_low", "unadjusted_ci_high",
                   "p_benefit_adjusted", "rank")  # fmt: skip
_LEDGER_EVENT = {
    Status.SELECTED: LedgerEvent.GATE_SELECTED,
    Status.REJECTED: LedgerEvent.GATE_REJECTED,
    Status.INSUFFICIENT: LedgerEvent.GATE_INSUFFICIENT,
}


def descriptive(design: Design, final: dict[tuple[str, str], dict[str, Any]]) -> dict[str, float | int]:
    """Bare / masked / delta means (descriptive only; the estimate is in `effects`).

    bare = scored episodes whose arm has no candidate; masked = scored episodes with at least one;
    delta = mean over pairs with exactly one bare arm, both scored, of (masked - bare). A mean
    without episodes is absent, never a made-up 0.
    """
    out: dict[str, float | int] = {}
    for outcome, key in (("reward", "reward"), ("success", "success")):
        bare, masked, deltas = [], [], []
        for pair in design.pairs:
            records = {arm: final.get((pair.pair_id, arm)) for arm in ("a", "b")}
            values = {}
            for arm, record in records.items():
                if record is None or record["status"] != EvaluationStatus.SCORED:
                    continue
                values[arm] = float(record[key])
                (bare if not pair.mask(arm) else masked).append(values[arm])
            if len(values) == 2 and bool(pair.mask_a) != bool(pair.mask_b):
                on, off = ("a", "b") if pair.mask_a else ("b", "a")
                deltas.append(values[on] - values[off])
        for name, values in (("bare", bare), ("masked", masked), ("delta", deltas)):
            if values:
                out[f"{name}_{outcome}"] = fmean(values)
        out[f"bare_{outcome}_episodes"] = len(bare)
        out[f"masked_{outcome}_episodes"] = len(masked)
    return out


def contributions_document(
    *,
    round_name: str,
    pool: CandidatePool,
    design: Design,
    decided_on: str,
    estimates: dict[str, Estimate],
    summary: dict[str, Any],
) -> dict[str, Any]:
    by_id = {item.intervention_id: item for item in pool.interventions}
    decided = estimates[decided_on]
    rows = []
    for effect in decided.effects:
        item = by_id[effect.intervention_id]
        rows.append(
            {
                "intervention_id": effect.intervention_id,
                "logical_chunk_id": item.logical_chunk_id,
                "operation": item.operation.value,
                "coefficient": effect.coefficient,
                "rank": effect.rank,
                "status": effect.status.value,
                "ci_low": effect.ci_low,
                "ci_high": effect.ci_high,
                "unadjusted_ci_low": effect.unadjusted_ci_low,
                "unadjusted_ci_high": effect.unadjusted_ci_high,
            }
        )
    return {
        "schema_version": CONTRIBUTIONS_SCHEMA_VERSION,
        "kind": "gate_contributions",
        "round": round_name,
        "pairing": design.pairing.value,
        "design_seed": design.seed,
        "decided_on": decided_on,
        "summary": summary,
        "contributions": rows,
        "estimates": {outcome: estimate.to_json() for outcome, estimate in sorted(estimates.items())},
    }


def table_rows(document: dict[str, Any]) -> list[list[Any]]:
    return [[row[column] for column in TABLE_COLUMNS] for row in document["contributions"]]


def selected_ids(document: dict[str, Any]) -> list[str]:
    return [row["intervention_id"] for row in document["contributions"] if row["status"] == Status.SELECTED]


def write_selected_skillbank(gate_dir: Path, skillbank: Skillbank, pool: CandidatePool, selected: list[str],
                             round_name: str) -> Skillbank:
    chosen = [item for item in pool.interventions if item.intervention_id in set(selected)]
    bank = apply_interventions(skillbank, chosen, round_name)
    atomic_write_json(gate_dir / SELECTED_SKILLBANK_FILE, bank.model_dump(mode="json"))
    atomic_write_text(gate_dir / SELECTED_SKILL_FILE, render_skill_markdown(bank, round_name, selected))
    return bank


def render_skill_markdown(bank: Skillbank, round_name: str, selected: list[str]) -> str:
    lines = [f"# Skills for the round after {round_name}", ""]
    lines.append(f"Selected by the validation gate: {', '.join(selected) if selected else 'none'}.")
    lines.append("Active chunks, in prompt order:")
    lines.append("")
    for chunk in bank.active_chunks:
        origin = chunk.provenance.get("intervention_id")
        suffix = f" (from {origin})" if origin in selected else ""
        lines.append(f"## {chunk.logical_chunk_id}{suffix}")
        lines.append("")
        lines.append(chunk.text)
        lines.append("")
    return "\n".join(lines)


def write_ledger(gate_dir: Path, analyst_ledger: Path | None, pool: CandidatePool, document: dict[str, Any]) -> Path:
    """Copy the Analyst's ledger (if any), then append one gate verdict per candidate.

    Every verdict carries the whole pool (`GatePool`): it was measured beside those candidates, and
    the Analyst reads it that way (shopsimrl/analyst/ledger.py).
    """
    target = gate_dir / LEDGER_FILE
    copied = analyst_ledger.read_bytes() if analyst_ledger is not None and analyst_ledger.exists() else b""
    if copied and not copied.endswith(b"\n"):
        copied += b"\n"  # a torn last line stays visible to the reader as its own (bad) line
    by_id = {item.intervention_id: item for item in pool.interventions}
    effects = {e["intervention_id"]: e for e in document["estimates"][document["decided_on"]]["effects"]}
    now = datetime.now(UTC).isoformat(timespec="seconds")
    ids = {item.intervention_id: item.proposal_id or proposal_id(item.operation, item.logical_chunk_id, item.text)
           for item in pool.interventions}  # fmt: skip
    measured_in = GatePool(proposal_ids=tuple(ids.values()), intervention_ids=tuple(ids), size=len(ids),
                           design_seed=document["design_seed"])  # fmt: skip
    lines = []
    for row in document["contributions"]:
        item = by_id[row["intervention_id"]]
        effect = effects[row["intervention_id"]]
        entry = LedgerEntry(
            event=_LEDGER_EVENT[Status(row["status"])],
            round=document["round"],
            proposal_id=ids[item.intervention_id],
            logical_chunk_id=item.logical_chunk_id,
            operation=item.operation,
            text_sha256=text_sha256(item.text),
            intervention_id=item.intervention_id,
            evidence_card_ids=item.evidence_card_ids,
            reason=effect["reason"],
            details={k: effect[k] for k in _LEDGER_DETAILS},
            pool=measured_in,
            at=now,
        )
        lines.append(dumps_record(entry.model_dump(mode="json")) + "\n")
    atomic_write_text(target, copied.decode("utf-8", errors="replace") + "".join(lines))
    return target


def existing_artifact_files(gate_dir: Path) -> list[Path]:
    return [gate_dir / name for name in ARTIFACT_FILES if (gate_dir / name).exists()]


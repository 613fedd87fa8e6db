"""The gate stage end to end on a tiny real checkpoint: files, resume refusal, technical failures, W&B."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from shopsimrl.errors import ConfigError, StageIncomplete
from shopsimrl.evaluation.runner import RunnerAborted
from shopsimrl.gate.config import load_gate_config
from shopsimrl.gate.design import Design
from shopsimrl.gate.manifest import ManifestMismatchError
from shopsimrl.gate.outputs import ARTIFACT_FILES, TABLE_COLUMNS
from shopsimrl.gate.stage import run_gate
from shopsimrl.skills.candidates import LedgerEntry, LedgerEvent, Operation
from shopsimrl.skills.skillbank import load_skillbank
from shopsimrl.storage import read_jsonl
from shopsimrl.tracking import WandbSettings
from shopsimrl.tracking.offline_reader import read_offline_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))
from sglang_fake_server import fake_sglang, ok_reply  # noqa: E402

IM_END_ID = 258  # tiny tokenizer: <|im_end|>


def _quiet(_line: str) -> None:
    return None


def _analyst_ledger(path: Path) -> Path:
    entry = LedgerEntry(event=LedgerEvent.PROPOSED, round="round-000", proposal_id="prop-add",
                        logical_chunk_id="compare-prices", operation=Operation.ADD, intervention_id="int-add-compare",
                        at="2026-01-01T00:00:00+00:00")
    path.write_text(entry.model_dump_json() + "\n", encoding="utf-8")
    return path


def test_complete_gate_writes_every_file_and_a_rerun_changes_nothing(gate_files, tmp_path):
    ledger = _analyst_ledger(tmp_path / "analyst_ledger.jsonl")
    config = load_gate_config(gate_files(design={"min_effect_reward": 0.05}), {"inputs.proposal_ledger": str(ledger)})
    result = run_gate(config, echo=_quiet)
    gate_dir = config.gate_dir
    assert result.complete and result.coverage == 1.0
    assert sorted(p.name for p in gate_dir.iterdir() if p.name in ARTIFACT_FILES) == sorted(ARTIFACT_FILES)

    design = Design.from_json(json.loads((gate_dir / "mask_assignments.json").read_text()))
    evaluations = read_jsonl(gate_dir / "evaluations.jsonl").records
    assert sorted((r["pair_id"], r["arm"]) for r in evaluations) == sorted(design.evaluation_keys())
    by_key = {(r["pair_id"], r["arm"]): r for r in evaluations}
    for pair in design.pairs:  # common random numbers: one sampling seed per pair, both arms
        assert by_key[(pair.pair_id, "a")]["sampling_seed"] == by_key[(pair.pair_id, "b")]["sampling_seed"]
        assert by_key[(pair.pair_id, "a")]["mask"] == list(pair.mask_a)

    contributions = json.loads((gate_dir / "contributions.json").read_text())
    assert [list(row) for row in contributions["contributions"]] == [list(TABLE_COLUMNS)] * 3
    assert contributions["summary"]["validated_design"] is False
    # Each outcome is decided against its own bound.
    assert {o: e["min_effect"] for o, e in contributions["estimates"].items()} == {"reward": 0.05, "success": 0.1}
    bank = load_skillbank(gate_dir / "selected_skillbank.json")
    assert bank == load_skillbank(config.inputs.skillbank)  # nothing selected on 3 tasks: the bank is unchanged
    lines = read_jsonl(gate_dir / "proposal_ledger.jsonl").records
    assert lines[0]["event"] == "proposed"  # the Analyst's ledger, copied
    assert [(line["intervention_id"], line["event"]) for line in lines[1:]] == [
        ("int-add-compare", "gate_insufficient"),
        ("int-revise-search", "gate_insufficient"),
        ("int-remove-verify", "gate_insufficient"),
    ]
    assert "clustered standard errors need at least 20 tasks" in lines[1]["reason"]
    assert {tuple(line["pool"]["intervention_ids"]) for line in lines[1:]} == {
        ("int-add-compare", "int-revise-search", "int-remove-verify")}
    assert lines[0]["pool"] is None  # the Analyst's own event: not a verdict

    before = (gate_dir / "contributions.json").read_bytes()
    again = run_gate(config, echo=_quiet)
    assert again.complete
    assert len(read_jsonl(gate_dir / "evaluations.jsonl").records) == len(evaluations)  # nothing re-run
    assert (gate_dir / "contributions.json").read_bytes() == before


def test_a_damaged_middle_line_of_evaluations_is_refused_naming_the_file(gate_files):
    config = load_gate_config(gate_files())
    run_gate(config, echo=_quiet)
    evaluations = config.gate_dir / "evaluations.jsonl"
    lines = evaluations.read_text(encoding="utf-8").splitlines(keepends=True)
    evaluations.write_text(lines[0] + "{not json\n" + "".join(lines[1:]), encoding="utf-8")
    before = evaluations.read_bytes()
    with pytest.raises(ConfigError) as refused:
        run_gate(config, echo=_quiet)
    assert f"{evaluations}:2: unreadable JSONL record" in str(refused.value)
    assert evaluations.read_bytes() == before


def test_two_scored_records_of_one_evaluation_with_different_outcomes_refuse_the_estimate(gate_files):
    """The first record no longer wins silently (fails before: the gate decided on it)."""
    config = load_gate_config(gate_files())
    run_gate(config, echo=_quiet)
    evaluations = config.gate_dir / "evaluations.jsonl"
    contributions = (config.gate_dir / "contributions.json").read_bytes()
    first = read_jsonl(evaluations).records[0]
    assert first["status"] == "scored" and (first["success"], first["reward"], first["strict_reward"]) == (False, 0.0, 0.0)
    with evaluations.open("a", encoding="utf-8") as handle:  # the same episode appended twice: harmless
        handle.write(json.dumps(first) + "\n")
    assert run_gate(config, echo=_quiet).complete
    assert (config.gate_dir / "contributions.json").read_bytes() == contributions
    with evaluations.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(first | {"success": True, "reward": 1.0, "attempt": 2}) + "\n")
    with pytest.raises(ConfigError) as refused:
        run_gate(config, echo=_quiet)
    assert refused.value.source == str(evaluations)
    assert refused.value.problems == [
        f"evaluation (pair_id {first['pair_id']}, arm {first['arm']}) has two scored records with different outcomes: "
        "success False, reward 0.0, strict_reward 0.0 (attempt 1) vs success True, reward 1.0, strict_reward 0.0 "
        "(attempt 2)",
        "no estimate from a record that contradicts itself: keep the right record, remove the other",
    ]


def test_resume_refuses_a_changed_checkpoint_or_design(gate_files, tmp_path, tiny_checkpoint):
    path = gate_files()
    config = load_gate_config(path)
    run_gate(config, echo=_quiet)
    changed = tmp_path / "checkpoint-changed"
    shutil.copytree(tiny_checkpoint, changed)
    (changed / "generation_config.json").write_text('{"do_sample": true}\n')
    with pytest.raises(ManifestMismatchError) as info:
        run_gate(load_gate_config(path, {"inputs.checkpoint": str(changed)}), echo=_quiet)
    assert info.value.problems[0].startswith("hashes.checkpoint: stored '")
    assert info.value.problems[-1] == "refusing to resume: use a new round (runs directory) or restore the inputs"
    with pytest.raises(ManifestMismatchError) as info:
        run_gate(load_gate_config(path, {"design.seed": 8}), echo=_quiet)
    assert [p.split(":")[0] for p in info.value.problems[:-1]] == ["hashes.mask_assignments", "design.seed"]


def test_technical_failures_are_rerun_never_scored_and_exhausted_ones_are_unscorable(gate_files, tiny_checkpoint):
    fail = lambda request: (500, {"error": "engine overloaded"})  # noqa: E731
    with fake_sglang([fail, fail, fail, ok_reply([IM_END_ID], [-0.5])]) as server:
        config = load_gate_config(gate_files(), {
            "generator": {"backend": "sglang", "url": server.url, "concurrency": 1, "max_attempts": 2,
                          "abort_after_consecutive_failures": 5},
        })
        result = run_gate(config, echo=_quiet)
    records = read_jsonl(config.gate_dir / "evaluations.jsonl").records
    first, second = records[0], records[1]
    assert (first["status"], first["attempt"], second["status"], second["attempt"]) == (
        "technical_failure", 1, "unscorable", 2)
    assert first["reward"] is None and first["technical_error"]["kind"] == "model_service"
    assert [(r["status"], r["attempt"]) for r in records[2:4]] == [("technical_failure", 1), ("scored", 2)]
    assert all(r["status"] == "scored" and r["reward"] == 0.0 for r in records[4:])
    assert result.complete
    summary = result.document["summary"]
    assert (summary["unscorable"], summary["pairs_in_estimate"]) == (1, 5)  # the pair with an unscorable arm drops
    seeds = {request["sampling_params"]["sampling_seed"] for request in server.requests}
    design = Design.from_json(json.loads((config.gate_dir / "mask_assignments.json").read_text()))
    assert seeds == {pair.sampling_seed for pair in design.pairs}


def _wandb_settings(group: str) -> WandbSettings:
    return WandbSettings.from_env(overrides={"enabled": True, "group": group, "project": "shopsimrl-test"})


def test_complete_gate_logs_scalars_the_table_and_the_artifact_once(gate_files, wandb_offline):
    config = load_gate_config(gate_files())
    result = run_gate(config, settings=_wandb_settings("round-000"), echo=_quiet)
    status = json.loads((config.gate_dir / "wandb_status.json").read_text())
    run = read_offline_run(status["run_file"])
    assert (run.info.group, run.info.job_type, run.exit_code) == ("round-000", "gate", 0)
    scalars = run.history[0]
    assert scalars["gate/coverage"] == 1.0 and scalars["gate/complete"] == 1
    assert (scalars["gate/selected_count"], scalars["gate/candidates"]) == (0, 3)
    assert scalars["gate/masked_reward"] == pytest.approx(0.0)
    assert [ref.key for ref in run.tables] == ["gate/chunk_contributions"]
    table = run.load_table(run.tables[0])
    assert table["columns"] == list(TABLE_COLUMNS)
    assert [row[0] for row in table["data"]] == ["int-add-compare", "int-revise-search", "int-remove-verify"]
    assert [row[5] for row in table["data"]] == ["insufficient"] * 3
    gate_artifacts = [a for a in run.artifacts if a.type == "gate"]  # W&B stores the Table as a run_table one
    assert [a.name for a in gate_artifacts] == ["shopsimrl-gate"]
    assert sorted(gate_artifacts[0].files) == sorted(ARTIFACT_FILES)
    assert result.complete and len(run.history) == 2  # one row of scalars, one of the Table: logged once


def test_incomplete_gate_logs_only_coverage_complete_zero_and_the_files_it_has(gate_files, wandb_offline):
    fail = lambda request: (503, {"error": "no engine"})  # noqa: E731
    with fake_sglang([fail]) as server:
        config = load_gate_config(gate_files(), {
            "generator": {"backend": "sglang", "url": server.url, "concurrency": 1,
                          "abort_after_consecutive_failures": 2},
        })
        with pytest.raises(RunnerAborted, match="2 technical failures in a row"):
            run_gate(config, settings=_wandb_settings("round-000"), echo=_quiet)
    gate_dir = config.gate_dir
    for name in ("contributions.json", "selected_skillbank.json", "selected_skill.md", "proposal_ledger.jsonl"):
        assert not (gate_dir / name).exists(), name
    metrics = read_jsonl(gate_dir / "metrics.jsonl").records
    assert [{k: v for k, v in m.items() if not k.startswith("_")} for m in metrics] == [
        {"gate/coverage": 0.0, "gate/complete": 0}]
    run = read_offline_run(json.loads((gate_dir / "wandb_status.json").read_text())["run_file"])
    logged = {key for row in run.history for key in row if not key.startswith("_")}
    assert logged == {"gate/coverage", "gate/complete"}
    assert run.tables == []
    assert [(a.name, sorted(a.files)) for a in run.artifacts] == [
        ("shopsimrl-gate", ["mask_assignments.json", "online_gate_manifest.json"])]
    assert run.exit_code == 1


def test_an_empty_pool_runs_no_episode_and_keeps_the_skillbank(gate_files, tmp_path):
    path = gate_files()
    pool = tmp_path / "candidate_pool.json"
    raw = json.loads(pool.read_text())
    raw["interventions"] = []
    pool.write_text(json.dumps(raw))
    config = load_gate_config(path)
    result = run_gate(config, echo=_quiet)
    assert (result.planned, result.complete, result.coverage) == (0, True, 1.0)
    assert not (config.gate_dir / "evaluations.jsonl").exists()
    assert result.document["contributions"] == []
    assert load_skillbank(config.gate_dir / "selected_skillbank.json") == load_skillbank(config.inputs.skillbank)


def test_a_corrupt_training_checkpoint_is_refused_naming_the_path(gate_files, tmp_path):
    from shopsimrl.errors import ConfigError
    from shopsimrl.models import tiny_model, tiny_tokenizer
    from shopsimrl.models.checkpoint import save_checkpoint

    tokenizer = tiny_tokenizer()
    info = save_checkpoint(tiny_model(tokenizer, seed=0), tokenizer, tmp_path / "ckpt" / "rollout-0001")
    weights = info.path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as error:
        run_gate(load_gate_config(gate_files(), {"inputs.checkpoint": str(info.path)}), echo=_quiet)
    [problem] = error.value.problems
    assert problem.startswith(f"inputs.checkpoint: {info.path}: content hash ")
    assert problem.endswith(f"does not match the recorded {info.sha256[:12]}")


def test_unscorable_evaluations_beyond_the_threshold_leave_the_gate_undecided_until_a_rerun_scores_them(
        gate_files, tiny_checkpoint):  # fmt: skip
    fail = lambda request: (500, {"error": "engine overloaded"})  # noqa: E731
    generator = {"backend": "sglang", "concurrency": 1, "max_attempts": 1, "abort_after_consecutive_failures": 5}
    with fake_sglang([fail] * 4 + [ok_reply([IM_END_ID], [-0.5])]) as server:
        config = load_gate_config(gate_files(), {"generator": {**generator, "url": server.url}})
        with pytest.raises(StageIncomplete) as excinfo:
            run_gate(config, echo=_quiet)
    assert str(excinfo.value) == (
        "gate incomplete: 4 of 12 evaluations unscorable, more than generator.max_unscorable_fraction 0.10 (first: "
        "{'kind': 'model_service', 'message': " + repr(read_jsonl(config.gate_dir / "evaluations.jsonl").records[0]
                                                       ["technical_error"]["message"]) + "}); no decision written")
    assert not (config.gate_dir / "contributions.json").exists()

    lines: list[str] = []
    with fake_sglang([ok_reply([IM_END_ID], [-0.5])]) as server:  # the service is back: the same gate retries them
        config = load_gate_config(gate_files(), {"generator": {**generator, "url": server.url}})
        result = run_gate(config, echo=lines.append)
    assert "gate: 4 unscorable evaluations run again (more than generator.max_unscorable_fraction 0.10)" in lines
    assert "8 already final, 4 to run" in lines[1]
    assert len(read_jsonl(config.gate_dir / "evaluations.jsonl").records) == 12 + 4
    assert result.complete and result.document["summary"]["unscorable"] == 0


def test_a_pool_that_carries_held_out_text_is_refused_before_any_episode(gate_files, tmp_path):
    # Defence in depth: the gate checks the pool it receives with the firewall; the
    # problem names the intervention and the kind of leak, never the leaked text.
    from shopsimrl.shop import generate_catalog, load_split

    path = gate_files()
    config = load_gate_config(path)
    catalog = generate_catalog(seed=config.catalog.seed, num_products=config.catalog.num_products,
                               level=config.catalog.level)  # fmt: skip
    held_out = load_split(catalog, "validation")[0]
    pool = tmp_path / "candidate_pool.json"
    raw = json.loads(pool.read_text())
    raw["interventions"][0]["text"] = f"For example: {held_out.instruction}"
    pool.write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as refused:
        run_gate(load_gate_config(path), echo=_quiet)
    [problem] = refused.value.problems
    assert problem.startswith("inputs.candidate_pool: intervention int-add-compare carries privileged facts: ")
    assert held_out.gold.product_type not in problem
    assert not (config.gate_dir / "evaluations.jsonl").exists()

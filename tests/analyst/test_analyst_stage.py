"""The analysis stage end to end: a tiny-model training run, the seed's command line, the offline W&B run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from analyst_helpers import (
    ROOT,
    SKILLBANK,
    ExpertPolicyGenerator,
    Scripts,
    catalog,
    play,
    read_lines,
    train_tasks,
    write_configs,
    write_group,
)

from shopsimrl.analyst.cards import CardStatus, read_cards
from shopsimrl.analyst.commands import upload_notice
from shopsimrl.analyst.config import LlmSettings, load_analysis_config
from shopsimrl.analyst.lessons import LlmBackend
from shopsimrl.analyst.stage import artifact_files, run_analysis
from shopsimrl.errors import StageIncomplete
from shopsimrl.local.config import run_config_from_mapping
from shopsimrl.local.run import run_training
from shopsimrl.metrics import names as m
from shopsimrl.models import tiny_tokenizer
from shopsimrl.skills.candidates import CandidatePool, LedgerEvent, apply_interventions
from shopsimrl.skills.skillbank import load_skillbank
from shopsimrl.tracking import WandbSettings
from shopsimrl.tracking.offline_reader import find_run_files, read_offline_run
from shopsimrl.tracking.settings import WandbMode

SIX = [
    m.ANALYSIS_TRIAGE_GROUPS.name,
    m.ANALYSIS_ANALYZED_CARDS.name,
    m.ANALYSIS_ELIGIBLE_CARDS.name,
    m.ANALYSIS_CANDIDATES.name,
    m.ANALYSIS_PROPOSAL_HISTORY_RECORDS.name,
    m.ANALYSIS_EVIDENCE_ONLY_CARDS.name,
]
FOUR = ["analysis_summary.json", "candidate_pool.json", "failure_cards.jsonl", "proposal_ledger.jsonl"]


def test_seed_command_line_on_a_tiny_model_run_writes_the_four_files_and_an_offline_run(tmp_path, wandb_offline):
    group = "tiny-round-000"
    train_config = {
        "run": {"group": group, "runs_root": str(tmp_path / "runs"), "mode": "train"},
        "model": {"name": "tiny", "seed": 0},
        "driver": {"num_rollout": 2, "rollout_batch_size": 1, "n_samples_per_prompt": 4, "over_sampling_batch_size": 1,
                   "global_batch_size": 4, "rollout_max_response_len": 8, "lr": 1e-3, "rollout_seed": 7},
        "shopsim": {"skillbank": str(SKILLBANK), "q": {"start": 0.0}, "max_turns": 2, "max_new_tokens_per_turn": 8,
                    "catalog": {"num_products": 200}, "full_skill_retry": True},
    }  # fmt: skip
    run_training(run_config_from_mapping(train_config, "test"), settings=WandbSettings(enabled=False), echo=lambda _: None)
    local = tmp_path / "train.yaml"
    local.write_text(yaml.safe_dump(train_config))
    config = tmp_path / "analysis.yaml"
    config.write_text(yaml.safe_dump({"schema_version": 1, "run": {"group": group, "runs_root": str(tmp_path / "runs")},
                                      "shopsim_config": str(local), "trial": {"model": "tiny", "attempts": 1}}))  # fmt: skip

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WANDB_PROJECT": "shopsimrl-test",
           "WANDB_GROUP": group}  # fmt: skip
    command = (f'{sys.executable} scripts/run_shopsimrl.py training analyze {config} '
               '--wandb --wandb-project "$WANDB_PROJECT" --wandb-group "$WANDB_GROUP"')  # fmt: skip
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "failure_cards.jsonl (privileged, gold-aware) is staged in the offline run" in done.stderr

    analysis = tmp_path / "runs" / group / "analysis"
    assert all((analysis / name).is_file() for name in FOUR)
    triage = read_lines(tmp_path / "runs" / group / "train" / "triage.jsonl")
    cards, problems = read_cards(analysis)
    assert problems == [] and len(cards) == len(triage) > 0
    assert all(c.status is CardStatus.EVIDENCE_ONLY and c.trial.attempts == 1 for c in cards)
    assert all(c.full_skill_retry is not None for c in cards)

    [run_file] = find_run_files(wandb_offline.wandb_dir)
    run = read_offline_run(run_file)
    assert (run.info.project, run.info.group, run.info.job_type) == ("shopsimrl-test", group, "analysis")
    [row] = [r for r in run.history if SIX[0] in r]
    expected = {SIX[0]: len(triage), SIX[1]: len(cards), SIX[2]: 0, SIX[3]: 0,
                SIX[4]: len(read_lines(analysis / "proposal_ledger.jsonl")), SIX[5]: len(cards)}  # fmt: skip
    assert {k: row[k] for k in SIX} == expected
    [artifact] = run.artifacts
    assert (artifact.name, artifact.type) == ("shopsimrl-analysis", "analysis")
    assert sorted(artifact.files) == FOUR
    assert run.exit_code == 0
    summary = json.loads((analysis / "analysis_summary.json").read_text())
    assert summary["metrics"] == expected and summary["cards_by_status"]["evidence_only"] == len(cards)


@pytest.fixture
def hand_built_round(tmp_path):
    cat = catalog()
    tasks = train_tasks(cat)[:3]
    train = tmp_path / "runs" / "round-000" / "train"
    modes = ["over_budget", "option_not_selected", "over_budget"]
    for n, (task, mode) in enumerate(zip(tasks, modes, strict=True)):
        episode = play(cat, task, getattr(Scripts(cat, task), mode)())
        write_group(train, step=0, group_index=n, task=task, episodes=[episode, episode])
    return cat, tasks, write_configs(tmp_path, trial={"attempts": 1})


def test_a_policy_that_succeeds_with_the_lessons_gives_a_pool_the_gate_can_apply(hand_built_round, tmp_path):
    cat, tasks, config_path = hand_built_round
    config = load_analysis_config(config_path)
    tokenizer = tiny_tokenizer()
    result = run_analysis(config, settings=WandbSettings(enabled=False), echo=lambda _: None,
                          policy=(tokenizer, ExpertPolicyGenerator(cat, tasks, tokenizer)))  # fmt: skip
    assert result.metrics == {SIX[0]: 3, SIX[1]: 3, SIX[2]: 3, SIX[3]: 2, SIX[4]: 2, SIX[5]: 0}
    pool = CandidatePool.model_validate_json((config.analysis_dir / "candidate_pool.json").read_text())
    assert [(i.logical_chunk_id, i.evidence_card_ids) for i in pool.interventions] == [
        ("analyst-over-budget", ("card-0-0", "card-0-2")),
        ("analyst-option-not-selected", ("card-0-1",)),
    ]
    skillbank = load_skillbank(SKILLBANK)
    assert apply_interventions(skillbank, pool.interventions, "round-000").active_ids[-2:] == [
        "analyst-over-budget", "analyst-option-not-selected"]  # fmt: skip
    assert [f.name for f in result.artifact_files] == FOUR
    assert (config.analysis_dir / "metrics.jsonl").is_file()  # the StageLogger's local copy, W&B off

    # A second run re-uses the trials, the ledger refuses nothing (the gate has not spoken yet), and it
    # appends nothing: the same (event, proposal, evidence) is one entry however often it is compiled.
    ledger = (config.analysis_dir / "proposal_ledger.jsonl").read_bytes()
    again = run_analysis(config, settings=WandbSettings(enabled=False), echo=lambda _: None,
                         policy=(tokenizer, ExpertPolicyGenerator(cat, [], tokenizer)))  # fmt: skip
    assert again.metrics[SIX[3]] == 2 and again.metrics[SIX[4]] == 2
    assert (config.analysis_dir / "proposal_ledger.jsonl").read_bytes() == ledger
    events = [line["event"] for line in read_lines(config.analysis_dir / "proposal_ledger.jsonl")]
    assert events == [LedgerEvent.PROPOSED.value] * 2


def test_lesson_backend_failures_are_counted_as_analysis_errors(hand_built_round):
    _, _, config_path = hand_built_round
    config = load_analysis_config(config_path)
    with socket.socket() as sock:  # a port nobody listens on: connection refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = LlmBackend(LlmSettings(base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout_s=5))
    with pytest.raises(StageIncomplete) as excinfo:
        run_analysis(config, settings=WandbSettings(enabled=False), echo=lambda _: None, lesson_backend=llm)
    assert str(excinfo.value).startswith("analysis incomplete: 3 of 3 card(s) without a lesson, 0 without a trial "
                                         f"(first, card-0-0: connection error to http://127.0.0.1:{port}/v1")  # fmt: skip
    result = excinfo.value.result
    assert result.metrics[SIX[1]] == 0 and result.metrics[SIX[3]] == 0
    errors = result.summary["analysis_errors"]
    assert sorted(errors) == ["card-0-0", "card-0-1", "card-0-2"]
    assert all(e.startswith(f"connection error to http://127.0.0.1:{port}/v1") for e in errors.values())
    assert result.summary["cards_by_status"]["analysis_error"] == 3


def test_keep_cards_local_leaves_the_cards_out_of_the_artifact(tmp_path):
    for name in FOUR:
        (tmp_path / name).write_text("{}\n")
    assert [p.name for p in artifact_files(tmp_path, keep_cards_local=True)] == [
        "analysis_summary.json", "candidate_pool.json", "proposal_ledger.jsonl"]  # fmt: skip
    (tmp_path / "proposal_ledger.jsonl").unlink()
    assert [p.name for p in artifact_files(tmp_path, keep_cards_local=False)] == FOUR[:3]


def test_the_user_is_told_before_cards_go_to_a_public_host():
    online = WandbSettings(enabled=True, mode=WandbMode.ONLINE)
    assert upload_notice(online, {}).startswith("WARNING: failure_cards.jsonl holds privileged, gold-aware audits")
    from shopsimrl.tracking.sync import default_base_url

    # wandb's default server, whatever its version calls it (0.31: CoreWeave Forge's proxy of W&B).
    assert f"public W&B cloud ({urlparse(default_base_url()).hostname})" in upload_notice(online, {})
    assert "public W&B cloud (api.wandb.ai)" in upload_notice(online, {"WANDB_BASE_URL": "https://api.wandb.ai"})
    assert upload_notice(online, {"WANDB_BASE_URL": "https://wandb.internal.example:8080"}) is None
    assert "wandb sync" in upload_notice(WandbSettings(enabled=True, mode=WandbMode.OFFLINE), {})
    assert upload_notice(WandbSettings(enabled=False, mode=WandbMode.ONLINE), {}) is None


def test_missing_training_directory_is_one_clear_line(tmp_path):
    config_path = write_configs(tmp_path)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_shopsimrl.py"), "training", "analyze",
                           str(config_path), "--no-wandb"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert done.returncode == 1
    train = Path(tmp_path / "runs" / "round-000" / "train")
    assert done.stderr.strip() == f"Error: {train}: no training stage directory; run the round's training first"

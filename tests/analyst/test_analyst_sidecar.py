"""The sidecar: cards keyed by triage_id, restartable after a real SIGKILL, validation tasks refused."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from analyst_helpers import ROOT, Scripts, catalog, play, read_lines, train_tasks, write_configs, write_group

from shopsimrl import slime_metrics
from shopsimrl.analyst.cards import CardStatus, read_cards
from shopsimrl.analyst.sidecar import (
    CardsLockedError,
    Sidecar,
    ValidationTaskRefused,
    cards_lock,
    refuse_held_out,
)
from shopsimrl.metrics.groups import flatten_group
from shopsimrl.metrics.synthetic import Traj, make_group
from shopsimrl.records import RetryResult, append_retry_result, read_triage
from shopsimrl.records.schemas import OutcomeRecord
from shopsimrl.shop.failure_modes import FailureMode
from shopsimrl.storage import append_jsonl

CAT = catalog()
TASKS = train_tasks(CAT)[:4]
MODES = ["over_budget", "wrong_option", "turn_limit", "malformed_tool_call"]
EPISODES = {
    (t.task_id, mode): play(CAT, t, getattr(Scripts(CAT, t), mode)()) for t in TASKS for mode in MODES
}  # fmt: skip


def add_groups(train_dir: Path, first: int, count: int) -> None:
    for n in range(first, first + count):
        task = TASKS[n % len(TASKS)]
        mode = MODES[n % len(MODES)]
        other = MODES[(n + 1) % len(MODES)]
        episodes = [EPISODES[(task.task_id, mode)], EPISODES[(task.task_id, mode)], EPISODES[(task.task_id, other)]]
        write_group(train_dir, step=n // 8, group_index=n, task=task, episodes=episodes)


def sidecar_once(train_dir: Path, analysis_dir: Path):
    with cards_lock(analysis_dir):
        sidecar = Sidecar(train_dir, analysis_dir)
        sidecar.process_new()
    return sidecar


def test_one_card_per_all_wrong_group_with_the_group_mode(tmp_path):
    train, analysis = tmp_path / "train", tmp_path / "analysis"
    add_groups(train, 0, 4)
    append_retry_result(train, RetryResult(request_id="0-1-full_skill", source_group_index=1,
                                           outcome=OutcomeRecord(reward=1.0, strict_reward=1.0, success=True, scorable=True)))  # fmt: skip
    sidecar_once(train, analysis)
    cards, problems = read_cards(analysis)
    assert problems == []
    assert [(c.card_id, c.failure_mode, c.status) for c in cards] == [
        ("card-0-0", FailureMode.OVER_BUDGET, CardStatus.PENDING),
        ("card-0-1", FailureMode.WRONG_OPTION, CardStatus.PENDING),
        ("card-0-2", FailureMode.TURN_LIMIT, CardStatus.PENDING),
        ("card-0-3", FailureMode.MALFORMED_TOOL_CALL, CardStatus.PENDING),
    ]
    first = cards[0]
    assert [s.failure_mode for s in first.siblings] == [FailureMode.OVER_BUDGET] * 2 + [FailureMode.WRONG_OPTION]
    assert first.siblings[0].lines[0].price_ok is False and first.siblings[0].lines[0].type_ok is True
    assert first.audit["privileged"] is True and first.audit["gold"] == TASKS[0].gold.model_dump(mode="json")
    assert first.full_skill_retry is None and cards[1].full_skill_retry.success is True
    assert first.evidence_turns and first.mask == ["read-the-constraints"]


def test_restart_writes_no_duplicate_and_a_torn_tail_is_cut(tmp_path):
    train, analysis = tmp_path / "train", tmp_path / "analysis"
    add_groups(train, 0, 3)
    sidecar_once(train, analysis)
    whole = (analysis / "failure_cards.jsonl").read_bytes()
    # A kill in the middle of an append: half a line at the end.
    with open(analysis / "failure_cards.jsonl", "ab") as handle:
        handle.write(whole.splitlines()[0][:50])
    add_groups(train, 3, 2)
    second = sidecar_once(train, analysis)
    assert second.stats.cards_written == 2
    lines = read_lines(analysis / "failure_cards.jsonl")
    assert [line["triage_id"] for line in lines] == ["0-0", "0-1", "0-2", "0-3", "0-4"]


def test_a_second_writer_is_refused(tmp_path):
    with cards_lock(tmp_path):
        with pytest.raises(CardsLockedError, match="another sidecar or analysis stage is writing"):
            with cards_lock(tmp_path):
                pass


def test_validation_and_test_tasks_are_refused(tmp_path):
    train, analysis = tmp_path / "train", tmp_path / "analysis"
    add_groups(train, 0, 1)
    leaked = read_lines(train / "triage.jsonl")[0] | {"triage_id": "0-7", "task_id": "validation-0-00001",
                                                      "split": "validation"}  # fmt: skip
    append_jsonl(train / "triage.jsonl", leaked)
    disguised = leaked | {"triage_id": "0-8", "task_id": "test-0-00002", "split": "train"}
    append_jsonl(train / "triage.jsonl", disguised)
    sidecar = sidecar_once(train, analysis)
    assert [c.triage_id for c in read_cards(analysis)[0]] == ["0-0"]
    triage = train / "triage.jsonl"
    assert sidecar.stats.refused == [
        f"{triage}:2: task 'validation-0-00001' is in split 'validation'; only train tasks may reach "
        "the Failure Analyst (refused)",
        f"{triage}:3: task 'test-0-00002' is in split 'test'; only train tasks may reach the Failure Analyst (refused)",
    ]
    with pytest.raises(ValidationTaskRefused):
        refuse_held_out("validation-0-00001", "validation", "here")


def _cli(config: Path, *args: str) -> list[str]:
    return [sys.executable, str(ROOT / "scripts" / "run_shopsimrl.py"), "training", "analyze-sidecar", str(config), *args]


def _count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _wait_for(predicate, what: str, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s  # a bound on a wait, not a timed assertion
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


def test_sigkill_and_restart_give_the_same_cards_as_an_uninterrupted_run(tmp_path):
    config = write_configs(tmp_path)
    train = tmp_path / "runs" / "round-000" / "train"
    cards_file = train.parent / "analysis" / "failure_cards.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    add_groups(train, 0, 10)
    follower = subprocess.Popen(_cli(config, "--poll-interval", "0.05"), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)  # fmt: skip
    try:
        _wait_for(lambda: _count_lines(cards_file) >= 10, "the first ten cards")
        add_groups(train, 10, 300)  # training goes on while the sidecar follows
        _wait_for(lambda: _count_lines(cards_file) > 10, "the sidecar to pick up new triage")
        follower.send_signal(signal.SIGKILL)
        follower.wait(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == -signal.SIGKILL
    killed_at = _count_lines(cards_file)

    reference = tmp_path / "reference"
    shutil.copytree(train, reference / "runs" / "round-000" / "train")
    ref_config = write_configs(reference)
    subprocess.run(_cli(ref_config, "--once"), env=env, check=True, capture_output=True, timeout=300)

    restart = subprocess.run(_cli(config, "--once"), env=env, check=True, capture_output=True, text=True, timeout=300)
    assert "card(s) written" in restart.stdout
    resumed = read_lines(cards_file)
    expected = read_lines(reference / "runs" / "round-000" / "analysis" / "failure_cards.jsonl")
    assert len(expected) == 310
    assert [c["triage_id"] for c in resumed] == [c["triage_id"] for c in expected], f"killed at {killed_at} cards"
    assert resumed == expected
    print(f"sidecar killed after {killed_at} of {len(expected)} cards")


def test_pending_analysis_rate_falls_as_the_sidecar_writes_cards(tmp_path):
    """The training metric reads the sidecar's cards (run_dir/../analysis/failure_cards.jsonl)."""
    train = tmp_path / "train"
    args = SimpleNamespace(shopsim={"run_dir": str(train), "q": {"start": 1.0}, "full_skill_retry": False},
                           use_wandb=False, start_rollout_id=None)  # fmt: skip
    slime_metrics.reset_process_state()
    rates = []
    try:
        for step in range(3):
            groups = [make_group(10 * step + g, [Traj(0.0)] * 2, task_id=f"train-0-{g:05d}") for g in range(2)]
            slime_metrics.record_generated_rollout_groups(args, groups, None)
            if step:  # the sidecar catches up with the triage of the earlier steps
                sidecar_once(train, tmp_path / "analysis")
            extra: dict = {}
            samples = [s for group in groups for s in flatten_group(group)]
            slime_metrics.enrich_rollout_metrics(step, args, samples, extra, 1.0)
            rates.append(extra["rollout/shopsim/pending_analysis_rate"])
    finally:
        slime_metrics.reset_process_state()
    assert len(read_triage(train).records) == 6
    assert rates == [pytest.approx(1.0), pytest.approx(0.0), pytest.approx(0.0)]
    assert json.loads((tmp_path / "analysis" / "failure_cards.jsonl").read_text().splitlines()[0])["status"] == "pending"

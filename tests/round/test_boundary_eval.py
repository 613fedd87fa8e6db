"""Held-out evaluation at every round boundary (round config `boundary_eval:`), on the tiny model for real:
one plan for the chain, the start and each round's final checkpoint evaluated, paired differences in the
report, the `rounds` W&B run and boundary_eval.json; a killed chain resumes without redoing finished
evaluations; a changed plan is refused before anything trains."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest
from round_helpers import ROOT, tiny_round, write_round

from shopsimrl.errors import ConfigError
from shopsimrl.evaluation.stats import paired_difference
from shopsimrl.round import round_config_from_mapping
from shopsimrl.round.backends import LocalBackend
from shopsimrl.round.chain import run_rounds
from shopsimrl.tracking import WandbSettings
from shopsimrl.tracking.offline_reader import find_run_files, read_offline_run

# Means of 0/1 outcomes over a handful of episodes are exact fractions; the tolerance only absorbs
# float summation order (the report averages in another order than this test does).
EXACT = 1e-12


def _boundary_round(tmp_path: Path) -> dict:
    """The tiny round with a saved warm start (the chain's start policy) and a 3-task x 2-seed plan."""
    raw = tiny_round(tmp_path)
    raw["train"]["warm_start"] = {"enabled": True, "max_steps": 1, "batch_size": 1, "check_every": 1,
                                  "probe_tasks": 1, "probe_samples": 2, "save": True}  # fmt: skip
    raw["train"]["shopsim"]["max_turns"] = 8  # the noiseless expert's longest task (the start-up check)
    raw["boundary_eval"] = {"tasks": 3, "seeds": 2, "generator": {"concurrency": 6}, "bootstrap_samples": 200}
    return raw


def _quiet(_: str) -> None:
    pass


def _final(directory: Path) -> dict[str, dict]:
    """episode id -> its final record, read straight from episodes.jsonl (the slow obvious way)."""
    final: dict[str, dict] = {}
    for line in (directory / "episodes.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["status"] in ("scored", "unscorable") and record["episode_id"] not in final:
            final[record["episode_id"]] = record
    return final


def _difference(before: dict[str, dict], after: dict[str, dict]) -> float:
    shared = [e for e in before if e in after and before[e]["status"] == after[e]["status"] == "scored"]
    return sum(float(after[e]["success"]) - float(before[e]["success"]) for e in shared) / len(shared)


def test_a_two_round_chain_evaluates_every_boundary_and_reports_paired_differences(tmp_path, wandb_offline):
    settings = WandbSettings.from_env(overrides={"enabled": True, "project": "shopsimrl-test"})
    first = round_config_from_mapping(_boundary_round(tmp_path), "test")
    lines: list[str] = []
    _, report = run_rounds(first, count=2, settings_for=lambda c: replace(settings, group=c.group),
                           backend=LocalBackend(), echo=lines.append)  # fmt: skip
    runs = tmp_path / "runs"
    chain = runs / "tiny-rounds"
    start_dir = runs / "tiny-round-000" / "eval" / "boundary-start"
    finals = [runs / g / "eval" / "boundary-final" for g in ("tiny-round-000", "tiny-round-001")]

    # One plan, written once at the chain's root; every evaluation ran it (3 tasks x 2 seeds).
    plan = json.loads((chain / "boundary_eval_plan.json").read_text())
    assert plan["start_round"] == "tiny-round-000" and plan["boundary_eval"]["tasks"] == 3
    assert plan["catalog"] == first.shopsim().catalog.model_dump(mode="json")
    eval_plans = [json.loads((d / "eval_plan.json").read_text()) for d in (start_dir, *finals)]
    assert {p["task_ids_sha256"] for p in eval_plans} == {eval_plans[0]["task_ids_sha256"]}
    assert [len(_final(d)) for d in (start_dir, *finals)] == [6, 6, 6]

    # What was evaluated: the saved warm start with round 000's skillbank, then each final checkpoint
    # with the skillbank its gate handed on.
    assert eval_plans[0]["checkpoint"] == str(tmp_path / "checkpoints" / "tiny-round-000" / "warm-start")
    assert eval_plans[0]["skillbank"] == first.train_config().shopsim.skillbank
    for group, eval_plan in zip(("tiny-round-000", "tiny-round-001"), eval_plans[1:], strict=True):
        state = json.loads((runs / group / "round_state.json").read_text())["stages"]
        assert eval_plan["checkpoint"] == state["train"]["outputs"]["checkpoint"]
        assert eval_plan["checkpoint_sha256"] == state["train"]["checkpoint_sha256"]
        assert eval_plan["skillbank"] == state["gate"]["outputs"]["selected_skillbank"] and eval_plan["mask"] == "full"

    # The paired differences, against the records themselves.
    results = json.loads((chain / "boundary_eval.json").read_text())
    start, final0, final1 = (_final(d) for d in (start_dir, *finals))
    row0, row1 = results["rounds"]
    assert row0["vs_previous"]["against"] == row0["vs_start"]["against"] == "tiny-round-000 start"
    assert row1["vs_previous"]["against"] == "tiny-round-000"
    assert row1["vs_start"]["against"] == "tiny-round-000 start"
    expected = {("0", "previous"): _difference(start, final0), ("0", "start"): _difference(start, final0),
                ("1", "previous"): _difference(final0, final1), ("1", "start"): _difference(start, final1)}  # fmt: skip
    measured = {(r, label): row[f"vs_{label}"]["difference"] for r, row in (("0", row0), ("1", row1))
                for label in ("previous", "start")}  # fmt: skip
    assert measured == pytest.approx(expected, abs=EXACT)
    assert row1["vs_start"]["episodes"] == 6 and row1["vs_start"]["tasks"] == 3
    # The interval and p are evaluation/stats.py's on the same pairs (seeded, so equal to the last digit).
    pairs = defaultdict(list)
    for episode, record in start.items():
        pairs[record["task_id"]].append((float(record["success"]), float(final1[episode]["success"])))
    direct = paired_difference(pairs, samples=200, seed=0)
    assert row1["vs_start"]["p_value"] == direct.p_value
    assert row1["vs_start"]["bootstrap_ci"] == (None if direct.ci is None else list(direct.ci))
    successes = sum(r["success"] for r in final1.values())
    assert row1["final"]["successes"] == successes and row1["final"]["success_rate"] == pytest.approx(successes / 6, abs=EXACT)

    # The report: the held-out table and its plot.
    text = report.read_text()
    assert "## Held-out evaluation at every round boundary" in text
    assert "| tiny-round-000 start |" in text and "| tiny-round-001 final |" in text
    assert f"({successes}/6)" in text and "(tiny-round-000, 6 episodes)" in text
    assert (chain / "rounds_heldout.png").stat().st_size > 1000

    # W&B: an eval run per evaluation in its round's group, and the rounds/heldout_* columns.
    runs_read = [read_offline_run(path) for path in find_run_files(wandb_offline.wandb_dir)]
    evals = sorted(r.info.group for r in runs_read if r.info.job_type == "eval")
    assert evals == ["tiny-round-000", "tiny-round-000", "tiny-round-001"]
    chain_run = next(r for r in runs_read if r.info.job_type == "rounds")
    rows = [row for row in chain_run.history if "rounds/heldout_success_rate" in row]
    assert [row["rounds/index"] for row in rows] == [0, 1]
    assert [row["rounds/heldout_success_rate"] for row in rows] == [row0["final"]["success_rate"], successes / 6]
    assert rows[1]["rounds/heldout_success_delta_start"] == pytest.approx(expected[("1", "start")], abs=EXACT)
    assert rows[1]["rounds/heldout_success_delta_previous_p"] == row1["vs_previous"]["p_value"]
    assert rows[0]["rounds/heldout_start_success_rate"] == results["start"]["success_rate"]
    assert "rounds/heldout_start_success_rate" not in rows[1]

    # The chain's plan cannot change under it: refused before anything trains.
    changed = _boundary_round(tmp_path)
    changed["boundary_eval"]["tasks"] = 2
    with pytest.raises(ConfigError) as refused:
        run_rounds(round_config_from_mapping(changed, "test"), count=1, settings_for=lambda c: replace(settings, group=c.group),
                   backend=LocalBackend(), echo=_quiet)  # fmt: skip
    assert "tiny-round-000's boundary_eval plan differs from the chain's" in str(refused.value)
    assert "boundary_eval: stored" in str(refused.value) and "'tasks': 3" in str(refused.value)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "shopsimrl.cli", "training", *args]


def test_a_chain_killed_during_a_boundary_eval_resumes_without_redoing_finished_work(tmp_path):
    raw = _boundary_round(tmp_path)
    raw["boundary_eval"] |= {"tasks": 6, "generator": {"concurrency": 1}}  # 12 episodes one by one: time to kill
    config = write_round(tmp_path, raw)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "USE_WANDB"}
    env |= {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "USE_WANDB": "0"}
    runs = tmp_path / "runs"
    target = runs / "tiny-round-001" / "eval" / "boundary-final" / "eval_plan.json"
    process = subprocess.Popen(_cli("rounds", str(config), "--count", "2"), cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not target.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.02)
        assert target.exists(), "round 001's boundary eval never started"
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL
    finally:
        process.kill()
    finished = [runs / "tiny-round-000" / "eval" / name / "episodes.jsonl" for name in ("boundary-start", "boundary-final")]
    before = {str(p): (p.stat().st_mtime_ns, p.read_bytes()) for p in finished}
    checkpoints = {str(p): p.stat().st_mtime_ns for p in (tmp_path / "checkpoints").rglob("*") if p.is_file()}
    assert not (target.parent / "eval_report.json").exists()  # killed before its report

    done = subprocess.run(_cli("rounds", str(config), "--count", "2"), cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stage 1/3" not in done.stdout  # no round trains again
    assert "boundary eval boundary-start finished" in done.stdout and "boundary eval boundary-final finished" in done.stdout
    assert {str(p): (p.stat().st_mtime_ns, p.read_bytes()) for p in finished} == before
    assert {str(p): p.stat().st_mtime_ns for p in (tmp_path / "checkpoints").rglob("*") if p.is_file()} == checkpoints
    episodes = [json.loads(line) for line in (target.parent / "episodes.jsonl").read_text().splitlines()]
    assert len({e["episode_id"] for e in episodes if e["status"] == "scored"}) == 12
    results = json.loads((runs / "tiny-rounds" / "boundary_eval.json").read_text())
    assert [row["final"]["episodes"] for row in results["rounds"]] == [12, 12]


def test_boundary_eval_refuses_at_load_what_it_could_not_evaluate_after_training(tmp_path):
    raw = tiny_round(tmp_path)  # no warm start: the tiny model's random start is not saved anywhere
    raw["boundary_eval"] = {"tasks": 2}
    with pytest.raises(ConfigError) as no_start:
        round_config_from_mapping(raw, "test")
    assert no_start.value.problems == [
        "boundary_eval: the round starts from the untrained tiny model, which has no checkpoint to evaluate; "
        "enable train.warm_start with save: true, or give round.start_checkpoint"]  # fmt: skip
    raw = _boundary_round(tmp_path)
    raw["train"]["warm_start"]["save"] = False
    with pytest.raises(ConfigError) as unsaved:
        round_config_from_mapping(raw, "test")
    assert unsaved.value.problems == [
        "train.warm_start.save: boundary_eval evaluates the round's start, the warm-started policy; set save: true"]
    raw = _boundary_round(tmp_path)
    raw["boundary_eval"]["tasks"] = 150
    with pytest.raises(ConfigError) as too_many:
        round_config_from_mapping(raw, "test")
    assert len(too_many.value.problems) == 1
    assert too_many.value.problems[0].startswith("boundary_eval.tasks: 150, but the validation split of the round's "
                                                 "catalog (train.shopsim.catalog: seed 0, 200 products) has only ")


def _write_eval(directory: Path, plan: dict, successes: dict[str, list[int]]) -> None:
    """An evaluation's files as `shopsimrl eval` writes them: episodes.jsonl (with a duplicate record
    after a kill, which must count once) and eval_report.json built by evaluation/report.py itself."""
    from shopsimrl.evaluation.plan import plan_episodes
    from shopsimrl.evaluation.report import build_report

    planned = plan_episodes(list(successes), seeds=2, seed=0, mask=())
    records = {}
    for episode in planned:
        won = successes[episode.task_id][episode.labels["replicate"]]
        records[episode.key] = {"episode_id": episode.labels["episode_id"], "task_id": episode.task_id,
                                "status": "scored", "success": bool(won), "reward": 0.25 + 0.75 * won,
                                "strict_reward": float(won), "failure_mode": None if won else "attribute_mismatch",
                                "num_turns": 4, "model_tokens": 100, "stop_reason": "checkout"}  # fmt: skip
    directory.mkdir(parents=True)
    lines = [json.dumps(r) for r in records.values()]
    (directory / "episodes.jsonl").write_text("\n".join([*lines, lines[0]]) + "\n")
    report = build_report(plan, planned, records, bootstrap_samples=200, seed=0)
    (directory / "eval_report.json").write_text(json.dumps(report))


def test_the_paired_differences_are_evaluation_stats_on_the_evaluations_episodes(tmp_path):
    """boundary_results on evaluations with known outcomes (the tiny model never succeeds, so the chain
    test above pairs zeros): each round against the one before and against the start."""
    from shopsimrl.round.boundary import boundary_results

    runs = tmp_path / "runs"
    chain = runs / "x-rounds"
    chain.mkdir(parents=True)
    section = {"split": "test", "tasks": 4, "seeds": 2, "seed": 0, "bootstrap_samples": 200}
    (chain / "boundary_eval_plan.json").write_text(json.dumps({"start_round": "x-round-000", "boundary_eval": section}))
    plan = {"split": "test", "task_ids_sha256": "abc", "seeds": 2, "seed": 0, "episode": {}, "catalog": {},
            "checkpoint": "c", "checkpoint_sha256": "0", "mask": "full", "skillbank": "s", "tasks": 4, "skills": []}  # fmt: skip
    outcomes = {"start": {"t1": [0, 0], "t2": [0, 1], "t3": [1, 1], "t4": [0, 0]},
                "x-round-000": {"t1": [1, 0], "t2": [0, 1], "t3": [1, 1], "t4": [0, 0]},
                "x-round-001": {"t1": [1, 1], "t2": [1, 1], "t3": [1, 0], "t4": [0, 1]}}  # fmt: skip
    _write_eval(runs / "x-round-000" / "eval" / "boundary-start", plan, outcomes["start"])
    for group in ("x-round-000", "x-round-001"):
        _write_eval(runs / group / "eval" / "boundary-final", plan, outcomes[group])
    results = boundary_results(chain, [runs / "x-round-000", runs / "x-round-001"])

    def direct(before: str, after: str):
        pairs = {t: list(zip(outcomes[before][t], outcomes[after][t], strict=True)) for t in outcomes[before]}
        return paired_difference({t: [(float(b), float(a)) for b, a in p] for t, p in pairs.items()}, samples=200, seed=0)

    assert results["start"]["successes"] == 3 and results["start"]["episodes"] == 8  # the duplicate counted once
    row0, row1 = results["rounds"]
    for row, label, before, after in ((row0, "previous", "start", "x-round-000"), (row0, "start", "start", "x-round-000"),
                                      (row1, "previous", "x-round-000", "x-round-001"),
                                      (row1, "start", "start", "x-round-001")):  # fmt: skip
        expected = direct(before, after)
        paired = row[f"vs_{label}"]
        assert paired["difference"] == pytest.approx(expected.difference, abs=EXACT)
        assert paired["p_value"] == expected.p_value and paired["bootstrap_ci"] == list(expected.ci)
        assert (paired["episodes"], paired["tasks"]) == (8, 4)
    assert row1["vs_start"]["difference"] == pytest.approx(6 / 8 - 3 / 8, abs=EXACT)
    assert row1["vs_previous"]["against"] == "x-round-000" and row0["vs_previous"]["against"] == "x-round-000 start"
    assert row1["vs_start"]["success_discordant"] == {"after_only": 4, "before_only": 1}
    assert row1["final"]["success_rate"] == pytest.approx(6 / 8, abs=EXACT)

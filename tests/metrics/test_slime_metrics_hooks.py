"""The two monitoring hooks end to end, called the way slime calls them, on real files under tmp_path."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
from scenario_groups import ACCEPTED, DROP_METRICS, RHO, scenario_groups

from shopsimrl import slime_metrics
from shopsimrl.contract import Arm
from shopsimrl.metrics.groups import flatten_group
from shopsimrl.metrics.synthetic import Traj, make_group
from shopsimrl.records import (
    RetryResult,
    append_retry_result,
    read_group_trace,
    read_retry_requests,
    read_triage,
)
from shopsimrl.records.schemas import OutcomeRecord
from shopsimrl.storage import append_jsonl

P = "rollout/shopsim/"


@pytest.fixture(autouse=True)
def _fresh_process_state():
    slime_metrics.reset_process_state()
    yield
    slime_metrics.reset_process_state()


def _args(run_dir, **options):
    shopsim = {"run_dir": str(run_dir), "q": {"start": 0.5}, "rho": RHO, "full_skill_retry": False, **options}
    return SimpleNamespace(shopsim=shopsim, use_wandb=False, start_rollout_id=None)


def _accepted_samples(groups):
    # slime flattens the kept groups (fan-out included) into one list of Samples, in any order.
    kept = [g for g in groups if flatten_group(g)[0].group_index in ACCEPTED]
    return list(reversed([s for g in kept for s in flatten_group(g)]))


def _data_source():
    class _DataSource:
        def get_samples(self, n):
            raise AssertionError("the hook must not draw samples")

    return _DataSource().get_samples  # slime passes the bound method


@pytest.mark.parametrize("fan_out", [False, True])
def test_record_then_enrich_matches_the_hand_computed_step(tmp_path, fan_out):
    args = _args(tmp_path / "train")
    groups = scenario_groups(fan_out=fan_out)
    assert slime_metrics.record_generated_rollout_groups(args, groups, _data_source()) is None
    extra = dict(DROP_METRICS)
    result = slime_metrics.enrich_rollout_metrics(0, args, _accepted_samples(groups), extra, 12.5)
    assert result is False
    # slime's own keys are untouched; ours are merged in place (values as in test_metric_compute).
    assert extra["rollout/dynamic_filter/drop_zero_std_0.2"] == 1
    assert extra[P + "source_all_samples"] == 1.0
    assert extra[P + "completed_group_count"] == 6
    assert extra[P + "reward_mean"] == pytest.approx(9.7 / 23)
    assert extra[P + "scored_rate"] == pytest.approx(23 / 24)
    assert extra[P + "zero_std_group_rate"] == pytest.approx(2 / 6)
    assert extra[P + "zero_std_group_drop_rate"] == pytest.approx(1 / 3)
    assert extra[P + "technical_group_drop_count"] == 1
    assert extra[P + "technical_group_drop_rate"] == pytest.approx(1 / 3)
    assert extra[P + "chunk/c1/inclusion_rate"] == pytest.approx(3 / 4)
    assert extra[P + "train_reward_mean"] == pytest.approx(6.5 / 12)
    # one triaged all-wrong group (g2), no failure card yet -> 1/1 pending.
    assert extra[P + "pending_analysis_rate"] == 1.0
    assert P + "full_skill_retry_success_rate" not in extra  # no retry finished: undefined, not 0


def test_traces_and_triage_are_written_for_every_completed_group(tmp_path):
    run_dir = tmp_path / "train"
    slime_metrics.record_generated_rollout_groups(_args(run_dir), scenario_groups(), _data_source())
    traces = sorted(p.name for p in (run_dir / "traces" / "step-0").iterdir())
    assert traces == [f"group-{i}.json" for i in range(1, 7)]
    g1 = read_group_trace(run_dir / "traces" / "step-0" / "group-1.json")
    assert [len(t.segments) for t in g1.trajectories] == [3, 1, 1, 1]
    assert [s.segment_index for s in g1.trajectories[0].segments] == [0, 1, 2]
    assert g1.trajectories[0].segments[0].trained_tokens == 4  # loss mask: 4 ones of 8 response tokens
    triage = read_triage(run_dir)
    assert triage.problems == []
    assert [(r.group_index, [x.value for x in r.reasons]) for r in triage.records] == [
        (2, ["all_wrong"]),
        (4, ["technical"]),
    ]
    technical = triage.records[1]
    assert technical.technical_errors == [{"kind": "environment", "message": "environment failed"}]
    assert technical.trace_path == "traces/step-0/group-4.json"
    assert [o.scorable for o in technical.outcomes] == [False, True, True, True]


def test_gold_audit_and_messages_reach_trace_and_triage(tmp_path):
    run_dir = tmp_path / "train"
    gold = {"gold_product_ids": ["p-7"], "failed_constraints": ["colour"]}
    group = make_group(3, [Traj(0.0)] * 2, extra={"gold_audit": gold, "messages": [{"role": "user", "content": "hi"}]})
    slime_metrics.record_generated_rollout_groups(_args(run_dir), [group], _data_source())
    trace = read_group_trace(run_dir / "traces" / "step-0" / "group-3.json")
    assert trace.trajectories[0].gold_audit == gold
    assert trace.trajectories[0].segments[0].messages == [{"role": "user", "content": "hi"}]
    assert read_triage(run_dir).records[0].gold_audit == gold


def test_validation_tasks_never_reach_triage(tmp_path):
    run_dir = tmp_path / "train"
    group = make_group(3, [Traj(0.0)] * 2, split="validation")
    slime_metrics.record_generated_rollout_groups(_args(run_dir), [group], _data_source())
    assert (run_dir / "traces" / "step-0" / "group-3.json").is_file()
    assert not (run_dir / "triage.jsonl").exists()


def test_fallback_without_the_all_samples_hook(tmp_path):
    args = _args(tmp_path / "train")
    groups = scenario_groups()
    extra = dict(DROP_METRICS)
    slime_metrics.enrich_rollout_metrics(0, args, _accepted_samples(groups), extra, 1.0)
    assert extra[P + "source_all_samples"] == 0.0
    # only the accepted g1, g3, g5 are visible: 12 trajectories, rewards 6.5
    assert extra[P + "completed_group_count"] == 3
    assert extra[P + "reward_mean"] == pytest.approx(6.5 / 12)
    assert extra[P + "reward_mean"] == extra[P + "train_reward_mean"]
    assert extra[P + "zero_std_group_rate"] == pytest.approx(1 / 3)  # g3
    # drop counters still come from slime's own dict
    assert extra[P + "zero_std_group_drop_rate"] == pytest.approx(1 / 3)
    assert extra[P + "skill_free_group_rate"] == pytest.approx(1 / 3)  # g1


def test_stale_stash_falls_back(tmp_path):
    args = _args(tmp_path / "train")
    slime_metrics.record_generated_rollout_groups(args, [make_group(90, [Traj(1.0), Traj(0.0)])], _data_source())
    extra: dict = {}
    slime_metrics.enrich_rollout_metrics(0, args, _accepted_samples(scenario_groups()), extra, 1.0)
    assert extra[P + "source_all_samples"] == 0.0


def test_use_wandb_0_still_merges_and_never_touches_wandb(tmp_path, monkeypatch):
    monkeypatch.setenv("USE_WANDB", "0")
    monkeypatch.delitem(sys.modules, "wandb", raising=False)
    args = _args(tmp_path / "train")
    args.use_wandb = False
    groups = scenario_groups()
    slime_metrics.record_generated_rollout_groups(args, groups, _data_source())
    extra = dict(DROP_METRICS)
    assert slime_metrics.enrich_rollout_metrics(0, args, _accepted_samples(groups), extra, 1.0) is False
    assert extra[P + "q"] == 0.5
    assert "wandb" not in sys.modules  # the hooks cannot have called wandb.log


def test_none_extra_metrics_go_to_a_side_file(tmp_path):
    args = _args(tmp_path / "train")
    groups = scenario_groups()
    assert slime_metrics.enrich_rollout_metrics(4, args, _accepted_samples(groups), None, 1.0) is False
    lines = (tmp_path / "train" / "unmerged_rollout_metrics.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    assert record["rollout_id"] == 4 and record["schema_version"] == 1
    assert record["metrics"][P + "train_group_count"] == 3


def test_step_numbering_follows_the_real_rollout_id(tmp_path):
    run_dir = tmp_path / "train"
    args = _args(run_dir)
    group = make_group(1, [Traj(1.0), Traj(0.0)])
    slime_metrics.record_generated_rollout_groups(args, [group], _data_source())  # numbered step 0
    slime_metrics.enrich_rollout_metrics(7, args, flatten_group(group), {}, 1.0)  # really rollout 7
    assert (run_dir / "traces" / "step-7" / "group-1.json").is_file()
    assert not (run_dir / "traces" / "step-0").exists()
    group2 = make_group(2, [Traj(1.0), Traj(0.0)])
    slime_metrics.record_generated_rollout_groups(args, [group2], _data_source())
    assert (run_dir / "traces" / "step-8" / "group-2.json").is_file()
    assert args.shopsim_rollout_step == 9  # the curriculum's counter moved on for the next groups


def test_a_step_directory_another_process_wrote_is_never_renamed(tmp_path):
    """A resumed RolloutManager that still numbered its first rollout 0 must not move rollout 0's
    original traces (the triage lines of rollout 0 name them, and the Analyst reads them)."""
    run_dir = tmp_path / "train"
    first = make_group(1, [Traj(1.0), Traj(0.0)])
    slime_metrics.record_generated_rollout_groups(_args(run_dir), [first], _data_source())  # the crashed process
    original = (run_dir / "traces" / "step-0" / "group-1.json").read_bytes()
    slime_metrics.reset_process_state()  # the relaunch: a new RolloutManager process
    resumed = make_group(2, [Traj(1.0), Traj(0.0)])
    args = _args(run_dir)
    slime_metrics.record_generated_rollout_groups(args, [resumed], _data_source())
    slime_metrics.enrich_rollout_metrics(40, args, flatten_group(resumed), {}, 1.0)
    assert (run_dir / "traces" / "step-0" / "group-1.json").read_bytes() == original
    assert not (run_dir / "traces" / "step-40" / "group-1.json").exists()


def test_the_local_driver_numbers_the_step(tmp_path):
    args = _args(tmp_path / "train")
    args.shopsim_rollout_step = 5  # what the local driver sets before generating step 5
    slime_metrics.record_generated_rollout_groups(args, [make_group(1, [Traj(1.0), Traj(0.0)])], _data_source())
    assert (tmp_path / "train" / "traces" / "step-5" / "group-1.json").is_file()


def test_retry_requests_are_queued_before_scheduling(tmp_path, monkeypatch):
    run_dir = tmp_path / "train"
    args = _args(run_dir, full_skill_retry=True)
    # Simulate a package without the retry runner: the import must fail loudly, after the queue is written.
    monkeypatch.setitem(sys.modules, "shopsimrl.rollout.retries", None)
    with pytest.raises(RuntimeError, match=r"^full_skill_retry is on but shopsimrl.rollout.retries cannot be imported"):
        slime_metrics.record_generated_rollout_groups(args, scenario_groups(), _data_source())
    requests = read_retry_requests(run_dir).records
    assert [(r.request_id, r.source_group_index, r.task_id, r.chunk_ids) for r in requests] == [
        ("0-2-full_skill", 2, "task-2", ["c1", "c2"]),
    ]


def test_retry_results_and_failure_cards_feed_the_next_log(tmp_path):
    run_dir = tmp_path / "train"
    args = _args(run_dir)
    groups = scenario_groups()
    slime_metrics.record_generated_rollout_groups(args, groups, _data_source())
    slime_metrics.enrich_rollout_metrics(0, args, _accepted_samples(groups), {}, 1.0)
    # Between steps: two retries finish (one success, one technical error), and g2 gets a failure card.
    append_retry_result(run_dir, RetryResult(request_id="0-2-full_skill", source_group_index=2,
                                             outcome=OutcomeRecord(reward=1.0, strict_reward=1.0, success=True, scorable=True)))
    append_retry_result(run_dir, RetryResult(request_id="0-9-full_skill", source_group_index=9,
                                             outcome=OutcomeRecord(scorable=False),
                                             technical_error={"kind": "model_service", "message": "timeout"}))
    append_jsonl(tmp_path / "analysis" / "failure_cards.jsonl", {"group_key": "key-task-2", "card_id": "c-1"})
    step1 = [make_group(11, [Traj(0.0)] * 2, arm=Arm.ASSISTED, mask=("c1",), rho=RHO)]  # all-wrong
    slime_metrics.record_generated_rollout_groups(args, step1, _data_source())
    extra: dict = {}
    slime_metrics.enrich_rollout_metrics(1, args, flatten_group(step1[0]), extra, 1.0)
    assert extra[P + "full_skill_retry_success_rate"] == 1.0  # 1 success of 1 scorable retry
    assert extra[P + "runtime_error_group_rate"] == 1.0  # the retry of group 9 erred; 1 completed group
    # triaged all-wrong this round: g2 (card) and g11 (none) -> 1/2 pending
    assert extra[P + "pending_analysis_rate"] == pytest.approx(1 / 2)
    extra2: dict = {}
    slime_metrics.record_generated_rollout_groups(args, [make_group(12, [Traj(1.0), Traj(0.0)])], _data_source())
    slime_metrics.enrich_rollout_metrics(2, args, flatten_group(make_group(12, [Traj(1.0), Traj(0.0)])), extra2, 1.0)
    assert P + "full_skill_retry_success_rate" not in extra2  # nothing new finished since the last log


def test_pending_analysis_survives_a_process_restart(tmp_path):
    run_dir = tmp_path / "train"
    args = _args(run_dir)
    groups = scenario_groups()
    slime_metrics.record_generated_rollout_groups(args, groups, _data_source())
    slime_metrics.reset_process_state()  # a new RolloutManager process after resume
    extra: dict = {}
    slime_metrics.enrich_rollout_metrics(0, args, _accepted_samples(groups), extra, 1.0)
    assert extra[P + "pending_analysis_rate"] == 1.0  # read back from triage.jsonl

"""Triage / retry journals: schema, validation-split guard, torn tail and bad records reported."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from shopsimrl.records import (
    RetryRequest,
    TriageReason,
    TriageRecord,
    ValidationSplitLeakError,
    append_retry_request,
    append_triage,
    read_retry_requests,
    read_triage,
)
from shopsimrl.records.schemas import OutcomeRecord


def _triage(group_index=2, **overrides):
    fields = dict(
        triage_id=f"0-{group_index}", rollout_step=0, group_index=group_index, group_key="key-t", task_id="t",
        split="train", arm="assisted", mask=["c1"], reasons=[TriageReason.ALL_WRONG],
        outcomes=[OutcomeRecord(reward=0.0, strict_reward=0.0, success=False, scorable=True)],
        rollout_ids=[200], technical_errors=[], trace_path="traces/step-0/group-2.json",
    )
    fields.update(overrides)
    return fields


def test_round_trip_with_schema_version(tmp_path):
    append_triage(tmp_path, TriageRecord(**_triage(2)))
    append_triage(tmp_path, TriageRecord(**_triage(3)))
    line = json.loads((tmp_path / "triage.jsonl").read_text().splitlines()[0])
    assert line["schema_version"] == 1 and line["kind"] == "triage"
    read = read_triage(tmp_path)
    assert [r.group_index for r in read.records] == [2, 3] and read.problems == []


def test_torn_tail_is_reported_not_raised(tmp_path):
    append_triage(tmp_path, TriageRecord(**_triage(2)))
    append_triage(tmp_path, TriageRecord(**_triage(3)))
    with open(tmp_path / "triage.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"schema_version": 1, "kind": "tri')  # a crash in the middle of an append
    read = read_triage(tmp_path)
    assert [r.group_index for r in read.records] == [2, 3]
    assert read.problems == [f"{tmp_path / 'triage.jsonl'}:3: unreadable JSONL record (no newline at end (torn write))"]


def test_unknown_schema_version_and_bad_record_are_reported(tmp_path):
    path = tmp_path / "triage.jsonl"
    append_triage(tmp_path, TriageRecord(**_triage(2)))
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({**TriageRecord(**_triage(3)).model_dump(mode="json"), "schema_version": 2}) + "\n")
    read = read_triage(tmp_path)
    assert [r.group_index for r in read.records] == [2]
    assert read.problems == [f"{path}: record 2: invalid TriageRecord (schema_version: Input should be 1)"]


def test_validation_split_never_reaches_triage(tmp_path):
    with pytest.raises(ValidationError, match="split"):
        TriageRecord(**_triage(split="validation"))
    # Even a record built without validation is refused at the writer.
    sneaky = TriageRecord.model_construct(**_triage(split="validation"))
    with pytest.raises(ValidationSplitLeakError, match=(
        r"^triage refused for task 't' \(group_index=2\): split 'validation'; only train tasks may reach the "
        r"Failure Analyst$"
    )):
        append_triage(tmp_path, sneaky)
    assert not (tmp_path / "triage.jsonl").exists()


def test_retry_queue_round_trip_and_missing_file(tmp_path):
    assert read_retry_requests(tmp_path).records == []
    request = RetryRequest(request_id="0-2-full_skill", task_id="t", group_key="k", source_group_index=2,
                           rollout_step=0, chunk_ids=["c1", "c2"])
    append_retry_request(tmp_path, request)
    assert read_retry_requests(tmp_path).records == [request]


def test_unknown_fields_are_rejected():
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        TriageRecord(**_triage(), extra_field=1)

"""JSONL: one line per write; a torn last line is reported with file and line number."""

from __future__ import annotations

from pathlib import Path

import pytest

from shopsimrl.errors import TornRecordError
from shopsimrl.storage import append_jsonl, read_jsonl


def test_append_and_read(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    for step in range(3):
        append_jsonl(path, {"rollout/step": step, "x": step / 2})
    result = read_jsonl(path)
    assert result.records == [{"rollout/step": 0, "x": 0.0}, {"rollout/step": 1, "x": 0.5}, {"rollout/step": 2, "x": 1.0}]
    assert result.problems == []


def test_torn_last_line_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "triage.jsonl"
    append_jsonl(path, {"a": 1})
    append_jsonl(path, {"a": 2})
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"a": 3, "b": [1, 2')  # a crash mid-append
    result = read_jsonl(path)
    assert result.records == [{"a": 1}, {"a": 2}]
    assert len(result.problems) == 1
    assert str(result.torn_tail) == f"{path}:3: unreadable JSONL record (no newline at end (torn write))"


def test_corrupt_middle_line_raises_with_location(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\nnot json\n{"a": 3}\n', encoding="utf-8")
    with pytest.raises(TornRecordError) as excinfo:
        read_jsonl(path)
    assert excinfo.value.line_number == 2
    assert str(excinfo.value).startswith(f"{path}:2: unreadable JSONL record")
    tolerant = read_jsonl(path, strict_middle=False)
    assert tolerant.records == [{"a": 1}, {"a": 3}]
    assert [p.line_number for p in tolerant.problems] == [2]


def test_numpy_like_scalars_and_nan(tmp_path: Path) -> None:
    class Scalar:
        def item(self) -> float:
            return 0.25

    path = tmp_path / "m.jsonl"
    append_jsonl(path, {"v": Scalar(), "n": float("nan")})
    record = read_jsonl(path).records[0]
    assert record["v"] == 0.25
    assert record["n"] != record["n"]  # NaN survives the round trip

"""Disk full and read-only directories, on real file systems: one line naming the path and the cause."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

try:
    from shopsimrl.errors import StorageError
except ImportError:  # before the fix: make the tests run and fail on behaviour
    StorageError = OSError
from shopsimrl.storage import append_jsonl, atomic_write_json, atomic_write_many, read_jsonl
from shopsimrl.tracking.failure_record import failure_recording


def test_an_append_to_a_full_device_says_disk_full(tmp_path: Path) -> None:
    # /dev/full answers every write with ENOSPC: no root needed.
    metrics = tmp_path / "metrics.jsonl"
    metrics.symlink_to("/dev/full")
    with pytest.raises(StorageError) as excinfo:
        append_jsonl(metrics, {"x": 1})
    assert str(excinfo.value) == f"cannot write {metrics}: disk full"
    assert excinfo.value.path == str(metrics) and excinfo.value.cause == "disk full"


def test_a_short_append_on_a_nearly_full_disk_says_disk_full_and_leaves_whole_lines(
    small_disk: Path, fill_file_system
) -> None:
    metrics = small_disk / "metrics.jsonl"
    append_jsonl(metrics, {"_step": 0, "x": 1})
    before = metrics.read_bytes()
    filler = fill_file_system(small_disk)
    os.truncate(filler, filler.stat().st_size - 8192)  # two pages free: less than the next record
    with pytest.raises(StorageError) as excinfo:
        append_jsonl(metrics, {"_step": 1, "text": "y" * 20_000})
    assert str(excinfo.value) == f"cannot write {metrics}: disk full"
    assert metrics.read_bytes() == before  # the partial record was cut: no torn line for the next append
    assert read_jsonl(metrics).records == [{"_step": 0, "x": 1}]


def test_atomic_writes_on_a_full_disk_say_disk_full_and_keep_the_old_file(small_disk: Path, fill_file_system) -> None:
    target = small_disk / "status.json"
    atomic_write_json(target, {"state": "old"})
    fill_file_system(small_disk)
    with pytest.raises(StorageError) as excinfo:
        atomic_write_json(target, {"state": "new", "pad": "z" * 10_000})
    assert str(excinfo.value) == f"cannot write {target}: disk full"
    with pytest.raises(StorageError, match=r"cannot write .*/traces/a\.json: disk full"):
        atomic_write_many({small_disk / "traces" / "a.json": b"{}", small_disk / "traces" / "b.json": b"x" * 10_000})
    assert json.loads(target.read_text()) == {"state": "old"}
    assert sorted(p.name for p in small_disk.rglob("*.tmp-*")) == []


def test_writes_into_a_read_only_directory_name_the_path_and_cause(read_only_dir: tuple[Path, str]) -> None:
    directory, cause = read_only_dir
    for write, path in [
        (lambda p: atomic_write_json(p, {}), directory / "x.json"),
        (lambda p: atomic_write_json(p, {}), directory / "sub" / "x.json"),
        (lambda p: append_jsonl(p, {}), directory / "metrics.jsonl"),
    ]:
        with pytest.raises(StorageError) as excinfo:
            write(path)
        assert str(excinfo.value) == f"cannot write {path}: {cause}"


def test_a_failure_record_that_cannot_be_written_is_one_line_and_keeps_the_original_error(
    read_only_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, cause = read_only_dir
    with pytest.raises(ValueError, match="the run's own error"):
        with failure_recording(directory, run_id=lambda: "r1", config={}, handle_sigterm=False):
            raise ValueError("the run's own error")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"failure record not written: cannot write {directory}/failures/")
    assert err[0].endswith(f"/failure.json: {cause}")

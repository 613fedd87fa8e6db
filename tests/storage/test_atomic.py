"""Atomic writes: a reader sees the old file or the new one, never a partial one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shopsimrl.storage import atomic_write_json, atomic_write_text


def test_atomic_write_json_round_trip(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "dir" / "record.json"
    atomic_write_json(target, {"schema_version": 1, "reward": 0.5, "nan": float("nan")})
    text = target.read_text()
    assert json.loads(text)["reward"] == 0.5
    assert "NaN" in text
    assert [p.name for p in target.parent.iterdir()] == ["record.json"]


def test_unserialisable_object_leaves_old_file_intact(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    atomic_write_json(target, {"version": "old"})
    with pytest.raises(TypeError):
        atomic_write_json(target, {"version": object()})
    assert json.loads(target.read_text()) == {"version": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_write_failure_removes_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "dir_in_the_way"
    target.mkdir()
    (target / "child").write_text("x")  # os.replace cannot overwrite a non-empty directory
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir_in_the_way"]


def test_killed_between_write_and_rename_leaves_no_partial_file(tmp_path: Path) -> None:
    """A real process is SIGKILLed after the data is written and fsynced but before the rename."""
    target = tmp_path / "trace.json"
    atomic_write_json(target, {"version": "old"})
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from shopsimrl.storage import atomic as atomic_module

        def pause_instead_of_rename(src, dst):
            print("READY", flush=True)   # data written and fsynced, rename not yet done
            time.sleep(60)

        atomic_module.os.replace = pause_instead_of_rename
        atomic_module.atomic_write_json({str(target)!r}, {{"version": "new", "blob": "x" * 100000}})
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert json.loads(target.read_text()) == {"version": "old"}
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "trace.json"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".trace.json.tmp-")
    # Readers that glob for records never see the hidden temp file.
    assert [p.name for p in tmp_path.glob("*.json")] == ["trace.json"]


def test_atomic_write_many_writes_all_or_leaves_the_old_files(tmp_path: Path) -> None:
    from shopsimrl.storage import atomic_write_many

    a, b = tmp_path / "step-1" / "group-1.json", tmp_path / "step-1" / "group-2.json"
    assert atomic_write_many({a: b'{"g": 1}\n', b: b'{"g": 2}\n'}) == [a, b]
    assert (a.read_text(), b.read_text()) == ('{"g": 1}\n', '{"g": 2}\n')

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(OSError):
        atomic_write_many({a: b'{"g": "new"}\n', blocker / "group-3.json": b"{}\n"})
    # The failure came before any rename: the old file is intact and no temp file is left behind.
    assert a.read_text() == '{"g": 1}\n'
    assert sorted(p.name for p in a.parent.iterdir()) == ["group-1.json", "group-2.json"]


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_atomic_files_honour_the_umask_like_open_does(tmp_path: Path, umask: int) -> None:
    from shopsimrl.storage import append_jsonl, atomic_write_many
    from shopsimrl.tracking.export.frozen import write_frozen

    previous = os.umask(umask)
    try:
        expected = 0o666 & ~umask
        with open(tmp_path / "plain.txt", "w") as handle:  # what open() does with this umask
            handle.write("x")
        atomic_write_text(tmp_path / "a.json", "{}")
        atomic_write_many({tmp_path / "b.json": b"{}", tmp_path / "sub" / "c.json": b"{}"})
        append_jsonl(tmp_path / "metrics.jsonl", {"x": 1})
        write_frozen(tmp_path / "frozen.json", [], lambda count: {"rows": count})
    finally:
        os.umask(previous)
    modes = {
        path.name: path.stat().st_mode & 0o777
        for path in (tmp_path / "plain.txt", tmp_path / "a.json", tmp_path / "b.json",
                     tmp_path / "sub" / "c.json", tmp_path / "metrics.jsonl", tmp_path / "frozen.json")
    }  # fmt: skip
    assert modes == dict.fromkeys(modes, expected)

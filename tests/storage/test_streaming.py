"""Streaming atomic writes, atomic directories and file hashes: old content whole, no temp left."""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shopsimrl.errors import StorageError
from shopsimrl.storage import atomic_directory, atomic_open, file_sha256


def test_atomic_open_streams_text_and_bytes(tmp_path: Path) -> None:
    with atomic_open(tmp_path / "deep" / "rows.csv") as handle:
        handle.write("a,b\r\n1,é\r\n")  # newline="": the csv module's \r\n is kept as written
    with atomic_open(tmp_path / "blob.bin", "wb") as handle:
        handle.write(b"\x00\x01")
    assert (tmp_path / "deep" / "rows.csv").read_bytes() == "a,b\r\n1,é\r\n".encode()
    assert (tmp_path / "blob.bin").read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == ["rows.csv"]


def test_atomic_open_refuses_append_mode(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="atomic_open mode must be 'w' or 'wb', not 'a'"):
        with atomic_open(tmp_path / "x", "a"):
            pass


def test_raising_writer_leaves_the_old_file_whole_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "episodes.csv"
    target.write_text("old\n")
    with pytest.raises(KeyError, match="source broke"):
        with atomic_open(target) as handle:
            handle.write("new, half written\n" * 1000)
            raise KeyError("source broke")  # not a write error: propagates unchanged
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["episodes.csv"]


def test_full_disk_inside_the_block_becomes_storage_error(tmp_path: Path) -> None:
    target = tmp_path / "rollout.csv"
    with pytest.raises(StorageError) as caught:
        with atomic_open(target):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert str(caught.value) == f"cannot write {target}: disk full"
    assert list(tmp_path.iterdir()) == []


def test_other_os_errors_of_the_block_are_not_write_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        with atomic_open(tmp_path / "out.csv"):
            open(tmp_path / "missing-source.jsonl")  # a read error of the source stays itself
    assert list(tmp_path.iterdir()) == []


def test_failed_rename_is_storage_error_and_removes_temp(tmp_path: Path) -> None:
    target = tmp_path / "dir_in_the_way"
    target.mkdir()
    (target / "child").write_text("x")  # os.replace cannot overwrite a non-empty directory
    with pytest.raises(StorageError, match=f"cannot write {target}"):
        with atomic_open(target) as handle:
            handle.write("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir_in_the_way"]


def test_killed_streaming_writer_leaves_the_old_file_whole(tmp_path: Path) -> None:
    """A real process is SIGKILLed in the middle of a streamed file: the old file is untouched."""
    target = tmp_path / "history.json"
    target.write_text("old\n")
    script = textwrap.dedent(
        f"""
        import time
        from shopsimrl.storage import atomic_open

        with atomic_open({str(target)!r}) as handle:
            handle.write("x" * 100000)
            handle.flush()
            print("READY", flush=True)
            time.sleep(60)
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
    assert target.read_text() == "old\n"
    # Only the hidden temp file is left, which no reader of history.json or *.json ever opens.
    assert [p.name for p in tmp_path.glob("*.json")] == ["history.json"]


def test_interrupted_writer_removes_its_temp(tmp_path: Path) -> None:
    target = tmp_path / "updates.csv"
    with pytest.raises(KeyboardInterrupt):
        with atomic_open(target) as handle:
            handle.write("row\n")
            raise KeyboardInterrupt  # Ctrl-C between rows
    assert list(tmp_path.iterdir()) == []


def test_atomic_directory_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    final = tmp_path / "ckpt" / "rollout-0001"
    with atomic_directory(final) as staging:
        assert staging.parent == final.parent and staging.name.startswith(".rollout-0001.tmp-")
        (staging / "sub").mkdir()
        (staging / "sub" / "weights.bin").write_bytes(b"w")
        assert not final.exists()
    assert (final / "sub" / "weights.bin").read_bytes() == b"w"
    assert [p.name for p in final.parent.iterdir()] == ["rollout-0001"]

    with pytest.raises(RuntimeError, match="save failed"):
        with atomic_directory(tmp_path / "ckpt" / "rollout-0002") as staging:
            (staging / "half.bin").write_bytes(b"h")
            raise RuntimeError("save failed")
    assert [p.name for p in final.parent.iterdir()] == ["rollout-0001"]


def test_atomic_directory_replace_swaps_an_existing_entry(tmp_path: Path) -> None:
    entry = tmp_path / "cache-entry"
    entry.mkdir()
    (entry / "old.bin").write_bytes(b"o")
    with pytest.raises(OSError):  # without replace=True a finished directory is never overwritten
        with atomic_directory(entry) as staging:
            (staging / "new.bin").write_bytes(b"n")
    assert [p.name for p in entry.iterdir()] == ["old.bin"]
    with atomic_directory(entry, replace=True) as staging:
        (staging / "new.bin").write_bytes(b"n")
    assert [p.name for p in entry.iterdir()] == ["new.bin"]
    assert [p.name for p in tmp_path.iterdir()] == ["cache-entry"]


def test_file_sha256_streams_the_same_hash_as_hashlib(tmp_path: Path) -> None:
    data = os.urandom(3 * (1 << 20) + 17)  # more than one block, not a multiple of it
    (tmp_path / "model.gguf").write_bytes(data)
    assert file_sha256(tmp_path / "model.gguf") == hashlib.sha256(data).hexdigest()
    assert file_sha256(str(tmp_path / "model.gguf")) == hashlib.sha256(data).hexdigest()

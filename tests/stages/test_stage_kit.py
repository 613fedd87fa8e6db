"""The stage kit: one writer per directory, inputs registered once, a signal named in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shopsimrl.errors import ConfigError, RunnerStopped, StageInterrupted
from shopsimrl.stages import directory_lock, register_inputs, signal_of, stage_session


class Busy(RuntimeError):
    pass


def test_a_second_process_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    lock = tmp_path / "stage" / "stage.lock"
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from shopsimrl.stages import directory_lock

        with directory_lock(Path({str(lock)!r}), busy=RuntimeError):
            print("HELD", flush=True)
            time.sleep(60)
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "HELD"
        with pytest.raises(Busy, match=f"^held by {holder.pid}$"):
            with directory_lock(lock, busy=lambda pid: Busy(f"held by {pid}")):
                pass
    finally:
        holder.kill()
        holder.wait(timeout=10)
    # The OS dropped the killed holder's lock: the directory is free again, the file names us now.
    with directory_lock(lock, busy=lambda pid: Busy(pid)) as path:
        assert path.read_text() == f"{os.getpid()}\n"


def _differences(stored: dict, fresh: dict, where: str) -> None:
    if stored != fresh:
        raise ConfigError(where, [f"{key}: stored {stored.get(key)!r}, now {fresh.get(key)!r}"
                                  for key in sorted(set(stored) | set(fresh)) if stored.get(key) != fresh.get(key)])


def test_inputs_are_registered_once_and_a_change_is_refused(tmp_path: Path) -> None:
    manifest, records = tmp_path / "plan.json", tmp_path / "episodes.jsonl"
    written: list[str] = []
    register_inputs(manifest, {"seed": 1}, records=records, compare=_differences, before=lambda: written.append("x"))
    assert json.loads(manifest.read_text()) == {"seed": 1} and written == ["x"]
    records.write_text("{}\n")
    register_inputs(manifest, {"seed": 1}, records=records, compare=_differences)  # a resume: same inputs
    with pytest.raises(ConfigError) as refused:
        register_inputs(manifest, {"seed": 2}, records=records, compare=_differences)
    assert refused.value.problems == ["seed: stored 1, now 2"]
    assert json.loads(manifest.read_text()) == {"seed": 1}


def test_records_without_a_manifest_are_refused(tmp_path: Path) -> None:
    (tmp_path / "evaluations.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError) as refused:
        register_inputs(tmp_path / "online_gate_manifest.json", {}, records=tmp_path / "evaluations.jsonl",
                        compare=_differences)  # fmt: skip
    assert refused.value.problems == [
        "evaluations.jsonl exists without online_gate_manifest.json: refusing to guess its inputs"]  # fmt: skip
    assert not (tmp_path / "online_gate_manifest.json").exists()


@pytest.mark.parametrize(
    ("exc", "signum"),
    [(RunnerStopped(signal.SIGTERM), signal.SIGTERM), (KeyboardInterrupt(), signal.SIGINT),
     (SystemExit(128 + signal.SIGTERM), signal.SIGTERM), (SystemExit(1), None), (ValueError("x"), None),
     (StageInterrupted("gate", signal.SIGINT, "here"), None)],
)  # fmt: skip
def test_signal_of(exc: BaseException, signum: int | None) -> None:
    assert signal_of(exc) == signum


def test_a_signal_becomes_one_stage_interrupted_after_the_incomplete_stage_is_logged(tmp_path: Path) -> None:
    logged: list[str] = []
    with pytest.raises(StageInterrupted) as stopped:
        with stage_session("eval", tmp_path, settings=None, config={"x": 1}, where=lambda: "3/8 episodes final",
                           on_incomplete=lambda log: logged.append(str(log.stage_dir))):  # fmt: skip
            raise RunnerStopped(signal.SIGTERM)
    assert (stopped.value.code, str(stopped.value)) == (128 + signal.SIGTERM, "eval stopped by SIGTERM: 3/8 episodes final")
    assert logged == [str(tmp_path)]


def test_any_other_error_propagates_as_it_is(tmp_path: Path) -> None:
    logged: list[str] = []
    with pytest.raises(ValueError, match="bad record"):
        with stage_session("gate", tmp_path, settings=None, config={}, where=lambda: "unused",
                           on_incomplete=lambda log: logged.append("incomplete")):  # fmt: skip
            raise ValueError("bad record")
    assert logged == ["incomplete"]


def test_a_stage_that_cannot_resume_lets_a_signal_through(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        with stage_session("train", tmp_path, settings=None, config={}, where=None):
            raise KeyboardInterrupt

"""One gate per directory (a lock held by a real second process) and one outcome per evaluation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_resume import _command, _env

from shopsimrl.gate.guards import gate_lock

# A process that holds the gate directory's lock until it is killed, as a running gate does.
HOLD = """
import sys, time
from pathlib import Path
from shopsimrl.gate.guards import gate_lock
with gate_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_a_second_gate_on_one_directory_exits_with_one_line_naming_it_and_the_holder(gate_files, tmp_path):
    """Two gates on one directory cannot interleave (fails before: the second one ran)."""
    config = gate_files()
    runs = tmp_path / "runs"
    gate_dir = runs / "round-000" / "gate"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(gate_dir)], env=_env(), stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        second = subprocess.run(_command(config, runs), env=_env(), capture_output=True, text=True, timeout=300)
    finally:
        holder.kill()  # SIGKILL: the OS releases the lock, nothing of ours runs
        holder.wait(timeout=60)
    assert second.returncode == 1
    assert second.stderr.splitlines() == [f"Error: {gate_dir} is in use by another gate (PID {holder.pid}); wait for it to end"]
    assert sorted(p.name for p in gate_dir.iterdir()) == ["gate.lock"]  # refused before registering anything
    with gate_lock(Path(gate_dir)):  # the killed holder's lock is gone: a resume is never blocked by it
        assert (gate_dir / "gate.lock").read_text() == f"{os.getpid()}\n"

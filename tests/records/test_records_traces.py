"""Group traces: atomic write (a kill before the rename leaves the old file), read-back, bad files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from shopsimrl.metrics import summarize_group
from shopsimrl.metrics.synthetic import Traj, make_group
from shopsimrl.records import build_group_trace, read_group_trace, trace_path, write_group_trace


def _trace(step=3, reward=1.0):
    group = make_group(5, [Traj(reward, segments=2), Traj(0.0)], fan_out=True)
    leaves = [s for traj in group for s in traj]
    return build_group_trace(summarize_group(leaves), leaves, step, "reward")


def test_write_and_read_back(tmp_path):
    path = write_group_trace(tmp_path, _trace())
    assert path == tmp_path / "traces" / "step-3" / "group-5.json"
    trace = read_group_trace(path)
    assert trace.schema_version == 1
    assert [t.rollout_id for t in trace.trajectories] == [500, 501]
    assert [s.segment_index for s in trace.trajectories[0].segments] == [0, 1]
    assert trace.zero_std is False and trace.all_wrong is False
    assert [p.name for p in path.parent.iterdir()] == ["group-5.json"]  # no temp file left behind


def test_killed_before_rename_leaves_old_trace_intact(tmp_path):
    path = write_group_trace(tmp_path, _trace(reward=1.0))
    before = path.read_bytes()
    script = textwrap.dedent(f"""
        import os, signal
        from shopsimrl.metrics import summarize_group
        from shopsimrl.metrics.synthetic import Traj, make_group
        from shopsimrl.records import build_group_trace, write_group_trace
        group = make_group(5, [Traj(0.5, segments=2), Traj(0.0)])
        trace = build_group_trace(summarize_group(group), group, 3, "reward")
        os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # die between fsync and rename
        write_group_trace({str(tmp_path)!r}, trace)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    assert path.read_bytes() == before
    assert read_group_trace(path).trajectories[0].outcome.reward == 1.0
    visible = [p.name for p in path.parent.iterdir() if not p.name.startswith(".")]
    assert visible == ["group-5.json"]


def test_unreadable_trace_names_the_file(tmp_path):
    path = trace_path(tmp_path, 0, 1)
    os.makedirs(path.parent)
    path.write_text('{"schema_version": 1,')
    with pytest.raises(ValueError, match=r"group-1.json: not valid JSON \(Expecting property name enclosed in double quotes at line 1\)"):
        read_group_trace(path)

"""A sequential gate SIGKILLed after its interim looks (a real subprocess), resumed, equals an uninterrupted one:
the resume re-reads the looks it had passed from evaluations.jsonl and takes the same decisions."""

from __future__ import annotations

import subprocess

from test_resume import _command, _env, _final, _kill_after_lines

from shopsimrl.storage import read_jsonl

LOOKS = 4
PLANNED = 2 * 10 * 2  # two arms x 10 tasks x 2 replicates; looks after 10, 20, 30 and 40 evaluations


def _looks(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("gate: look ")]


def test_sigkilled_sequential_gate_resumes_past_its_interim_looks_to_byte_identical_contributions(gate_files, tmp_path):
    config = gate_files()
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    sequential = ["--set", f"design.looks={LOOKS}"]
    done = subprocess.run(_command(config, whole) + sequential, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(_looks(done.stdout)) == LOOKS  # 10 tasks decide nothing: every look runs

    evaluations = killed / "round-000" / "gate" / "evaluations.jsonl"
    _kill_after_lines(_command(config, killed) + sequential, evaluations, 23)  # inside look 3
    gate_dir = killed / "round-000" / "gate"
    assert 23 <= len(read_jsonl(evaluations).records) < PLANNED
    assert not (gate_dir / "contributions.json").exists()

    resumed = subprocess.run(_command(config, killed) + sequential, env=_env(), capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert _looks(resumed.stdout) == _looks(done.stdout)  # the same looks, the same decisions
    reference = whole / "round-000" / "gate"
    assert (gate_dir / "contributions.json").read_bytes() == (reference / "contributions.json").read_bytes()
    assert (gate_dir / "selected_skillbank.json").read_bytes() == (reference / "selected_skillbank.json").read_bytes()
    assert _final(gate_dir) == _final(reference)

"""Rounds after rounds on the tiny model: round N+1 continues round N (its checkpoint, its gate's
skillbank, new seeds, no second warm start, the same W&B settings) and a killed chain resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from round_helpers import ROOT, tiny_round, write_round

from shopsimrl.models.checkpoint import checkpoint_sha256
from shopsimrl.round import load_round_config, round_config_from_mapping
from shopsimrl.round.backends import LocalBackend
from shopsimrl.round.chain import run_rounds
from shopsimrl.tracking import WandbSettings
from shopsimrl.tracking.offline_reader import find_run_files, read_offline_run


def _quiet(_: str) -> None:
    pass


def _with_warm_start(tmp_path: Path) -> dict:
    raw = tiny_round(tmp_path)
    raw["train"]["warm_start"] = {"enabled": True, "max_steps": 1, "batch_size": 1, "check_every": 1,
                                  "probe_tasks": 1, "probe_samples": 2}  # fmt: skip
    raw["train"]["shopsim"]["max_turns"] = 8  # the noiseless expert's longest task (the start-up check)
    return raw


def test_the_next_round_continues_the_last_one(tmp_path, wandb_offline):
    settings = WandbSettings.from_env(overrides={"enabled": True, "project": "shopsimrl-test"})
    first = round_config_from_mapping(_with_warm_start(tmp_path), "test")
    events: list[list[str]] = []

    def echo(line: str) -> None:
        if line.startswith("=== rounds: "):
            events.append([])  # the train events below belong to this round

    results, summary = run_rounds(first, count=2, settings_for=lambda c: replace(settings, group=c.group),
                                  backend=LocalBackend(), echo=echo,
                                  on_train_event=lambda name, _: events[-1].append(name))  # fmt: skip
    (_, result), (second, again) = results
    assert second.group == "tiny-round-001" and second.source == str(result.next_round.config_path)

    # The warm start belongs to the first round: round 001's first optimizer step is a GRPO step.
    assert "warm_start_step" in events[0]
    assert "warm_start_step" not in events[1] and "train_step" in events[1]
    assert second.train_config().warm_start.enabled is False
    runs = tmp_path / "runs"
    states = [json.loads((runs / g / "round_state.json").read_text()) for g in ("tiny-round-000", "tiny-round-001")]
    assert [s["stages"]["train"]["warm_start_steps"] for s in states] == [1, 0]

    manifests = [json.loads((runs / g / "round_manifest.json").read_text()) for g in ("tiny-round-000", "tiny-round-001")]
    assert [m["warm_start"] for m in manifests] == [True, False]
    assert manifests[0]["seeds"] == first.seeds.as_dict() and manifests[1]["seeds"] == second.seeds.as_dict()
    assert all(manifests[0]["seeds"][k] != manifests[1]["seeds"][k] for k in ("rollout", "curriculum", "gate"))
    start = Path(manifests[1]["start_checkpoint"])
    assert start == tmp_path / "checkpoints" / "tiny-round-000" / "rollout-0000"
    assert manifests[1]["start_checkpoint_sha256"] == checkpoint_sha256(start)
    assert manifests[1]["skillbank"] == str(runs / "tiny-round-000" / "gate" / "selected_skillbank.json")
    assert manifests[0]["start_checkpoint"] is None

    handed = json.loads((runs / "tiny-round-000" / "next_round.json").read_text())
    assert handed["changed"]["warm_start"] == {"from": True, "to": False}
    assert handed["changed"]["seeds"]["to"] == second.seeds.as_dict()
    assert handed["carried_over"]["tracking"] == {"enabled": True, "mode": "offline", "project": "shopsimrl-test",
                                                 "dir": str(settings.dir)}  # fmt: skip
    assert handed["command"] == f"make round RUNNER=local ROUND_CONFIG={runs / 'tiny-round-000' / 'next_round.yaml'}"

    report = (again.report).read_text()
    assert "### Beside the previous round (tiny-round-000)" in report
    assert "warm start: no (the first optimizer step is a GRPO step)" in report

    # W&B: three runs in each round's group, and the chain's summary run in its own group.
    runs_read = [read_offline_run(path) for path in find_run_files(wandb_offline.wandb_dir)]
    assert sorted((r.info.group, r.info.job_type) for r in runs_read) == sorted(
        [(g, j) for g in ("tiny-round-000", "tiny-round-001") for j in ("train", "analysis", "gate")]
        + [("tiny-rounds", "rounds")])  # fmt: skip
    chain_run = next(r for r in runs_read if r.info.job_type == "rounds")
    rows = [row for row in chain_run.history if "rounds/warm_start_steps" in row]  # the table has a row of its own
    assert [(row["rounds/index"], row["rounds/warm_start_steps"]) for row in rows] == [(0, 1), (1, 0)]
    assert summary == runs / "tiny-rounds" / "rounds_report.md"
    text = summary.read_text()
    assert "| tiny-round-000 | `base model` |" in text and f"| tiny-round-001 | `{start}` |" in text


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "shopsimrl.cli", "training", *args]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "USE_WANDB"}
    return {**env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WANDB_DIR": str(tmp_path / "wandb"),
            "WANDB_SILENT": "true"}  # fmt: skip


def test_the_printed_next_round_command_logs_to_wandb_as_the_first_round_did(tmp_path):
    config = write_round(tmp_path, tiny_round(tmp_path))
    env = _env(tmp_path)
    first = subprocess.run(_cli("round", str(config), "--wandb"), cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    next_config = tmp_path / "runs" / "tiny-round-000" / "next_round.yaml"
    assert f"start it:    make round RUNNER=local ROUND_CONFIG={next_config}" in first.stdout
    # No --wandb and no USE_WANDB: the next round keeps the first one's settings from its config.
    second = subprocess.run(_cli("round", str(next_config)), cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)  # fmt: skip
    assert second.returncode == 0, second.stdout + second.stderr
    runs = [read_offline_run(path) for path in find_run_files(tmp_path / "wandb" / "wandb")]
    groups = sorted((run.info.group, run.info.job_type) for run in runs)
    assert groups == sorted((g, j) for g in ("tiny-round-000", "tiny-round-001") for j in ("train", "analysis", "gate"))
    # ... unless the command line says otherwise.
    third = load_round_config(tmp_path / "runs" / "tiny-round-001" / "next_round.yaml")
    assert third.tracking is not None and third.tracking.enabled is True and third.tracking.mode == "offline"


class _LessonServer(ThreadingHTTPServer):
    """An OpenAI-compatible endpoint on 127.0.0.1: answers with a lesson until `hang` is set, then
    takes the request and never answers (the test kills the round while the Analyst waits)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _LessonHandler)
        self.hang = threading.Event()
        self.hung = threading.Event()
        self.daemon_threads = True


class _LessonHandler(BaseHTTPRequestHandler):
    server: _LessonServer

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.server.hang.is_set():
            self.server.hung.set()
            time.sleep(600)
            return
        body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
            {"index": 0, "finish_reason": "stop",
             "message": {"role": "assistant", "content": '{"lesson": "Read every attribute before you buy."}'}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_chain_killed_during_round_two_analyst_resumes_without_retraining(tmp_path):
    server = _LessonServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    raw = tiny_round(tmp_path)
    port = server.server_address[1]
    raw["analysis"]["lessons"] = {"backend": "llm", "llm": {"base_url": f"http://127.0.0.1:{port}/v1",
                                                           "timeout_s": 600, "max_retries": 0}}  # fmt: skip
    config = write_round(tmp_path, raw)
    env = {**_env(tmp_path), "USE_WANDB": "0"}
    second_state = tmp_path / "runs" / "tiny-round-001" / "round_state.json"
    process = subprocess.Popen(_cli("rounds", str(config), "--count", "2"), cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not second_state.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        server.hang.set()  # round 001 has started: its Analyst's requests will hang
        assert server.hung.wait(timeout=300), "round 001's analysis never asked the lesson server"
        stages = json.loads(second_state.read_text())["stages"]
        assert (stages["train"]["status"], stages["analysis"]["status"]) == ("finished", "running")
        time.sleep(0.2)
        before = {str(p): p.stat().st_mtime_ns for p in sorted((tmp_path / "checkpoints").rglob("*")) if p.is_file()}
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL
    finally:
        process.kill()
        server.shutdown()

    done = subprocess.run(_cli("rounds", str(config), "--count", "2", "--set", "analysis.lessons.backend=rules"),
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stage 1/3" not in done.stdout  # neither round trains again
    after = {str(p): p.stat().st_mtime_ns for p in sorted((tmp_path / "checkpoints").rglob("*")) if p.is_file()}
    assert after == before
    stages = json.loads(second_state.read_text())["stages"]
    assert {name: (s["status"], s["attempts"]) for name, s in stages.items()} == {
        "train": ("finished", 1), "analysis": ("finished", 2), "gate": ("finished", 1)}  # fmt: skip
    report = tmp_path / "runs" / "tiny-rounds" / "rounds_report.md"
    assert "| tiny-round-001 |" in report.read_text() and (report.parent / "rounds_curves.png").is_file()


def test_a_finished_round_resumed_without_wandb_still_hands_on_the_tracking_it_ran_with(tmp_path, wandb_offline):
    """`make demo` (--wandb) then `make rounds` (no flag): round 000 is only reprinted; the next round
    must log as round 000 did, so its tracking comes from round 000's manifest, not from the re-run."""
    config = round_config_from_mapping(tiny_round(tmp_path), "test")
    on = WandbSettings.from_env(overrides={"enabled": True, "project": "shopsimrl-test"})
    from shopsimrl.round import run_round

    run_round(config, settings=replace(on, group=config.group), echo=_quiet)
    again = run_round(config, settings=WandbSettings(enabled=False), echo=_quiet)
    assert again.ran == []
    following = load_round_config(again.next_round.config_path)
    assert following.tracking is not None and following.tracking.enabled is True
    manifest = json.loads((tmp_path / "runs" / "tiny-round-000" / "round_manifest.json").read_text())
    assert manifest["tracking"]["enabled"] is True

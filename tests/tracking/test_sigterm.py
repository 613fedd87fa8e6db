"""SIGTERM in the middle of a run (a real subprocess): the rows survive locally and in the .wandb file."""

import json
import os
import signal
import subprocess
import sys

from shopsimrl.storage import read_jsonl
from shopsimrl.tracking.offline_reader import read_offline_run

_CHILD = """
import sys, time
from shopsimrl.tracking import StageLogger
with StageLogger(sys.argv[1], stage="train") as log:
    for step in range(1, 51):
        log.log({"train/step": step, "train/loss": 1.0 / step})
    print("logged", flush=True)
    time.sleep(120)
"""


def test_sigterm_keeps_every_logged_row(wandb_offline, tmp_path):
    stage = tmp_path / "stage"
    env = {**os.environ, "USE_WANDB": "1"}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(stage)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "logged\n"
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    local = read_jsonl(stage / "metrics.jsonl").records
    assert [r["train/step"] for r in local] == list(range(1, 51))
    status = json.loads((stage / "wandb_status.json").read_text())
    assert (status["state"], status["exit_code"]) == ("failed", 143)
    run = read_offline_run(status["run_file"])
    assert [row["train/step"] for row in run.history] == list(range(1, 51))
    assert run.history[49]["train/loss"] == 1.0 / 50
    assert run.exit_code == 143

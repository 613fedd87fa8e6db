"""scripts/with_sglang.sh: serve the round's checkpoint, run the stage against it, stop the server.

A stand-in `sglang.launch_server` (a real HTTP server answering /health, found first on PYTHONPATH)
plays SGLang; the checkpoint resolution is the real `shopsimrl slime last-hf-save`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ops_helpers import ROOT

SCRIPT = str(ROOT / "scripts/with_sglang.sh")

# Records its argv and pid, then answers GET /health (FAKE_SGLANG=die: exits 3 at once instead).
_LAUNCH_SERVER = """
import http.server, json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_SGLANG_LOG"], "w") as log:
    json.dump({"argv": args, "pid": os.getpid(), "pgid": os.getpgid(0)}, log)
if os.environ.get("FAKE_SGLANG") == "die":
    sys.exit(3)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(args[args.index("--port") + 1])), Health).serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    package = tmp_path / "fake" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(_LAUNCH_SERVER)
    # python3 and shopsimrl of this environment, as in the train image.
    return {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "SGLANG_PORT": str(_free_port()),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "FAKE_SGLANG_LOG": str(tmp_path / "server.json"), "WANDB_GROUP": "g-round-001"}


def _run(tmp_path: Path, env: dict[str, str], *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", SCRIPT, *command], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def _gone(pid: int) -> bool:
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_serves_the_named_checkpoint_runs_the_command_and_stops_the_server(tmp_path: Path, env: dict[str, str]):
    (tmp_path / "ckpt").mkdir()
    result = _run(tmp_path, {**env, "SGLANG_CHECKPOINT": "ckpt"}, "bash", "-c",
                  'python3 -c "import urllib.request as u; u.urlopen(\'http://127.0.0.1:$SGLANG_PORT/health\')" '
                  '&& echo "stage on $SGLANG_CHECKPOINT" && exit 7')
    assert result.returncode == 7, result.stderr  # the command's own status
    assert result.stdout == "stage on ckpt\n"
    server = json.loads((tmp_path / "server.json").read_text())
    assert server["argv"] == ["--model-path", "ckpt", "--host", "127.0.0.1", "--port", env["SGLANG_PORT"],
                              "--enable-deterministic-inference"]
    assert server["pgid"] == server["pid"]  # its own process group, ended as one
    assert _gone(server["pid"])


def test_an_empty_checkpoint_is_the_rounds_last_hf_save(tmp_path: Path, env: dict[str, str]):
    for n in (3, 12, 9):  # whole exports: the shard and the index slime's exporter writes last
        save = tmp_path / f"checkpoints/g-round-001/hf/rollout-{n}"
        save.mkdir(parents=True)
        (save / "model-00001-of-00001.safetensors").write_bytes(b"w")
        (save / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors"}}))
    result = _run(tmp_path, {**env, "SGLANG_CHECKPOINT": ""}, "bash", "-c", 'echo "$SGLANG_CHECKPOINT"')
    assert result.returncode == 0, result.stderr
    assert result.stdout == "checkpoints/g-round-001/hf/rollout-12\n"
    assert json.loads((tmp_path / "server.json").read_text())["argv"][1] == "checkpoints/g-round-001/hf/rollout-12"


def test_a_round_without_hf_save_starts_nothing(tmp_path: Path, env: dict[str, str]):
    (tmp_path / "checkpoints/g-round-001").mkdir(parents=True)
    result = _run(tmp_path, env, "touch", "ran")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "with_sglang.sh: error: no checkpoint to serve for round g-round-001: train it first, or name the HF "
        "directory (GATE_CHECKPOINT, EVAL_CHECKPOINT, ANALYZE_CHECKPOINT)")
    assert not (tmp_path / "server.json").exists() and not (tmp_path / "ran").exists()
    without = _run(tmp_path, {**env, "WANDB_GROUP": ""}, "true")
    assert (without.returncode, without.stderr) == (
        1, "with_sglang.sh: error: no checkpoint to serve: SGLANG_CHECKPOINT and WANDB_GROUP are both empty\n")


def test_a_server_that_dies_first_is_an_error_and_the_command_never_runs(tmp_path: Path, env: dict[str, str]):
    (tmp_path / "ckpt").mkdir()
    result = _run(tmp_path, {**env, "SGLANG_CHECKPOINT": "ckpt", "FAKE_SGLANG": "die"}, "touch", "ran")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "with_sglang.sh: error: SGLang exited with status 3 before it was healthy (its output is above)")
    assert not (tmp_path / "ran").exists()


def test_sigterm_reaches_the_command_and_ends_the_server(tmp_path: Path, env: dict[str, str]):
    (tmp_path / "ckpt").mkdir()
    proc = subprocess.Popen(["bash", SCRIPT, "bash", "-c", "trap 'echo stopped > stopped; exit 0' TERM; "
                             "touch started; while true; do sleep 0.1; done"],
                            cwd=tmp_path, env={**env, "SGLANG_CHECKPOINT": "ckpt"})
    for _ in range(600):  # poll until the command runs (no timing assertion)
        if (tmp_path / "started").exists():
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert (tmp_path / "stopped").read_text() == "stopped\n"  # the stage got to record where it stopped
    assert _gone(json.loads((tmp_path / "server.json").read_text())["pid"])


def test_dry_run_prints_the_server_and_the_command(tmp_path: Path, env: dict[str, str]):
    (tmp_path / "ckpt").mkdir()
    result = _run(tmp_path, {**env, "SGLANG_CHECKPOINT": "ckpt", "DRY_RUN": "1", "SGLANG_PORT": "30000"},
                  "shopsimrl", "eval", "configs/eval.yaml")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        "# serve: python3 -m sglang.launch_server --model-path ckpt --host 127.0.0.1 --port 30000 "
        "--enable-deterministic-inference\n"
        "# then (SGLANG_CHECKPOINT=ckpt): shopsimrl eval configs/eval.yaml\n")

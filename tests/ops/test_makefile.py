"""The Makefile front door: `make help` lists targets, each of which `make -n` can expand on both runners."""

from __future__ import annotations

import os
import subprocess

import pytest
from ops_helpers import ROOT

_ENV = {k: v for k, v in os.environ.items()
        if k not in ("RUNNER", "WANDB_DIR", "WANDB_GROUP", "MAKEFLAGS", "WANDB_NETRC", "SMOKE_CONFIG", "NUM_GPUS",
                     "SMOKE_NUM_GPUS", "ANALYZE_CONFIG", "GATE_CONFIG", "EVAL_CONFIG", "USE_WANDB", "WANDB_MODE",
                     "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_GROUP", "ALGO")}


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=_ENV, capture_output=True,
                          text=True, timeout=60, check=False)


def listed_targets() -> list[str]:
    result = make("help")
    assert result.returncode == 0, result.stderr
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def test_help_is_the_default_goal_and_lists_the_required_targets():
    assert make().stdout == make("help").stdout
    assert listed_targets() == ["help", "setup", "test", "test-slow", "test-containers", "lint", "demo", "preflight", "convert",
                                "train-smoke", "train", "analyze", "gate", "eval", "round", "rounds", "wandb-sync", "report", "behavior", "canary",
                                "shell", "images", "requirements", "engine", "pin-images"]


@pytest.mark.parametrize("runner", ["docker", "local"])
def test_every_listed_target_expands(runner):
    for target in listed_targets():
        result = make("-n", target, f"RUNNER={runner}")
        assert result.returncode == 0, f"{target} ({runner}): {result.stderr}"
        assert result.stdout.strip() or target == "setup", target


def _last_line(*args: str) -> str:
    return make("-n", *args).stdout.strip().splitlines()[-1]


def test_fixed_cli_commands_on_the_local_runner():
    cli = ".venv/bin/python -m shopsimrl.cli"
    assert _last_line("demo") == f"WANDB_GROUP= {cli} training round configs/local/demo_round.yaml --wandb"
    assert _last_line("round", "RUNNER=local") == f"{cli} training round configs/local/round.yaml"
    assert _last_line("round", "RUNNER=local", "ROUND_CONFIG=runs/g-round-000/next_round.yaml") == (
        f"{cli} training round runs/g-round-000/next_round.yaml")
    assert _last_line("rounds", "RUNNER=local", "COUNT=3", "ROUND_CONFIG=configs/local/demo_round.yaml") == (
        f"{cli} training rounds configs/local/demo_round.yaml --count 3")
    assert _last_line("train-smoke", "RUNNER=local") == f"{cli} training smoke --config configs/local/smoke.yaml"
    assert _last_line("train", "RUNNER=local") == f"{cli} training run --config configs/local/train.yaml"
    assert _last_line("wandb-sync", "RUNNER=local") == f"{cli} wandb sync wandb"
    assert _last_line("wandb-sync", "RUNNER=local", "WANDB_DIR=/data/wandb") == f"{cli} wandb sync /data/wandb"
    assert _last_line("report", "RUNNER=local", "WANDB_GROUP=g1") == f"{cli} wandb export --group g1"
    assert _last_line("behavior", "WANDB_GROUP=g1") == f"{cli} behavior analyze runs/g1"
    assert _last_line("canary", "RUNNER=local") == f"{cli} canary --tasks 10"
    assert _last_line("gate", "RUNNER=local") == f"{cli} training online-gate configs/local/gate.yaml"
    assert _last_line("analyze", "RUNNER=local") == f"{cli} training analyze configs/local/analysis.yaml --wandb"
    assert _last_line("eval", "RUNNER=local") == f"{cli} eval configs/local/eval.yaml"
    assert _last_line("eval", "RUNNER=local", "EVAL_CHECKPOINT=checkpoints/g", "EVAL_ARGS=--mask none") == (
        f"{cli} eval configs/local/eval.yaml --checkpoint checkpoints/g --mask none")
    assert _last_line("preflight", "RUNNER=local") == f"{cli} preflight --runner local"
    assert _last_line("pin-images") == "bash docker/pin_images.sh docker/versions.env"


def test_docker_runner_runs_the_compose_service():
    compose = "docker compose -f compose.yaml --env-file docker/versions.env"
    for target in ("convert", "train-smoke", "train", "analyze", "gate", "eval", "wandb-sync", "report", "canary"):
        line = _last_line(target)
        assert compose in line and line.endswith(f"run --rm {target}"), line
    assert _last_line("preflight") == ".venv/bin/python -m shopsimrl.cli preflight --runner docker"
    # The GPU round: the one round runner on the host, driving the compose services (round/backends.py).
    for target, tail in (("round", ""), ("rounds", " --count 2")):
        line = _last_line(target)
        assert line.startswith(f".venv/bin/python -m shopsimrl.cli training {target} configs/round.yaml{tail} --compose ")
        assert compose in line and "HOST_UID=" in line
    assert _last_line("shell").endswith("run --rm train bash")


def test_standin_swaps_the_pins_and_adds_the_override_and_volume_dirs_come_first():
    line = _last_line("wandb-sync", "STANDIN=1")
    assert "docker compose -f compose.yaml -f compose.standin.yaml --env-file docker/versions.local.env" in line
    # The bind mounts' directories are the invoking user's, made before compose would make them as root.
    assert line.startswith("for dir in runs checkpoints wandb artifacts; do [ -d \"$dir\" ] || install -d -o ")
    assert _last_line("images", "STANDIN=1").endswith("build train wandb-sync")
    result = make("help", "STANDIN=yes")
    assert result.returncode == 2 and "STANDIN must be 0 or 1, got 'yes'" in result.stderr


def test_unknown_runner_is_an_error():
    result = make("help", "RUNNER=slurm")
    assert result.returncode == 2
    assert "RUNNER must be docker or local, got 'slurm'" in result.stderr


def _compose_env(*args: str, env: dict | None = None) -> dict[str, str]:
    result = subprocess.run(["make", "--no-print-directory", "-n", *args], cwd=ROOT, env=env or _ENV,
                            capture_output=True, text=True, timeout=60, check=True)
    prefix = result.stdout.strip().splitlines()[-1].split(" docker compose ")[0].split(" && ")[-1]
    return dict(item.split("=", 1) for item in prefix.split())


@pytest.mark.parametrize("target", ["train", "train-smoke", "convert", "canary", "shell"])
def test_compose_gets_the_host_user_the_round_and_the_credential_file(target):
    """Ownership (point 5), round identity (point 6) and the netrc route (point 3) are visible in `make -n`."""
    env = _compose_env(target, "WANDB_GROUP=qwen35-4b-round-004")
    assert env["HOST_UID"] == str(os.getuid()) and env["HOST_GID"] == str(os.getgid())
    assert env["WANDB_GROUP"] == "qwen35-4b-round-004"
    assert env["WANDB_NETRC"] in (os.path.expanduser("~/.netrc"), "/dev/null")


def test_netrc_of_the_host_is_mounted_when_it_exists(tmp_path):
    (tmp_path / ".netrc").write_text("machine api.wandb.ai login user password x\n")
    assert _compose_env("train", env={**_ENV, "HOME": str(tmp_path)})["WANDB_NETRC"] == str(tmp_path / ".netrc")
    assert _compose_env("train", env={**_ENV, "HOME": str(tmp_path / "none")})["WANDB_NETRC"] == "/dev/null"


def test_round_defaults_to_the_one_in_dot_env(tmp_path):
    """.env's WANDB_GROUP is the round unless the command line names another (make does not read .env itself)."""
    env_file = ROOT / ".env"
    assert not env_file.exists(), "a developer .env would change this test"
    env_file.write_text('WANDB_GROUP="qwen35-4b-round-002"\n')
    try:
        assert _compose_env("train")["WANDB_GROUP"] == "qwen35-4b-round-002"
        assert _compose_env("train", "WANDB_GROUP=r3")["WANDB_GROUP"] == "r3"
    finally:
        env_file.unlink()
    assert _compose_env("train")["WANDB_GROUP"] == "qwen35-4b-round-000"


def test_gpu_counts_from_make_reach_compose():
    """`make train NUM_GPUS=4`: visible in the compose call (compose.yaml passes it into the container:
    tests/ops/test_compose_services.py); unset, compose takes .env's or the profile's default."""
    env = _compose_env("train", "NUM_GPUS=4", "SMOKE_NUM_GPUS=2")
    assert (env["NUM_GPUS"], env["SMOKE_NUM_GPUS"]) == ("4", "2")
    assert "NUM_GPUS" not in _compose_env("train-smoke") and "SMOKE_NUM_GPUS" not in _compose_env("train-smoke")
    # From the environment too (make exports it to the compose call either way).
    assert _compose_env("train-smoke", env={**_ENV, "SMOKE_NUM_GPUS": "2"})["SMOKE_NUM_GPUS"] == "2"


def test_the_estimator_reaches_compose_only_when_given_and_the_cpu_backend_as_a_set():
    """`make train ALGO=ppo`: to the containers as ALGO (the launcher's ALGO wins over the profile's
    ADVANTAGE_ESTIMATOR); unset, nothing (make's default must not override a profile's own estimator);
    from the environment or .env too. The CPU backend gets driver.advantage_estimator as a --set."""
    assert "ALGO" not in _compose_env("train") and "ALGO=" not in _last_line("rounds", "RUNNER=docker")
    assert '--compose "HOST_UID=' in _last_line("rounds", "RUNNER=docker", "ALGO=ppo")  # each stage's compose call
    assert " ALGO=ppo " in _last_line("rounds", "RUNNER=docker", "ALGO=ppo")
    assert _compose_env("train", "ALGO=ppo")["ALGO"] == "ppo"
    assert _compose_env("train", "ALGO=grpo")["ALGO"] == "grpo"  # said explicitly: passed
    assert _compose_env("train", env={**_ENV, "ALGO": "ppo"})["ALGO"] == "ppo"
    env_file = ROOT / ".env"
    assert not env_file.exists(), "a developer .env would change this test"
    env_file.write_text("ALGO=ppo\n")
    try:
        assert _compose_env("train")["ALGO"] == "ppo"
        assert _compose_env("train-smoke")["SMOKE_CONFIG"] == "configs/slime/smoke-ppo.env"
    finally:
        env_file.unlink()
    assert _last_line("train", "RUNNER=local", "ALGO=ppo").endswith(
        "training run --config configs/local/train.yaml --set driver.advantage_estimator=ppo")
    assert _last_line("train", "RUNNER=local").endswith("training run --config configs/local/train.yaml")
    for target in ("round", "rounds"):
        assert "--set train.driver.advantage_estimator=ppo" in _last_line(target, "RUNNER=local", "ALGO=ppo")
        assert "advantage_estimator" not in _last_line(target, "RUNNER=local")
        # a CPU round in containers: the train stage is the CPU backend's, so it gets the --set too
        cpu = _last_line(target, "RUNNER=docker", "CPU=1", "ALGO=ppo")
        assert "--set round.trainer=local --set train.driver.advantage_estimator=ppo" in cpu


def test_docker_stage_configs_are_the_services_own_unless_given():
    """RUNNER=docker: the compose service's production config (no round in it) unless make is given one,
    which reaches the service through the environment of the compose call."""
    for target, variable in (("analyze", "ANALYZE_CONFIG"), ("gate", "GATE_CONFIG"), ("eval", "EVAL_CONFIG")):
        assert variable not in _compose_env(target)
        given = subprocess.run(["make", "-s", "--no-print-directory", target, f"{variable}=runs/g-round-001/x.yaml",
                                "COMPOSE=printenv " + variable + " #"], cwd=ROOT, env=_ENV, capture_output=True,
                               text=True, timeout=60, check=True)
        assert given.stdout == "runs/g-round-001/x.yaml\n", target


def test_rounds_pass_the_w_and_b_settings_of_dot_env_to_every_service_of_every_round(tmp_path):
    """`make -n rounds COUNT=2` with .env from .env.example (USE_WANDB=1), then the printed command with
    --dry-run: every compose service of both rounds gets .env's W&B settings. (In compose the caller's
    environment wins over --env-file, and the round runner sets them from its own environment.)"""
    for name in ("configs", ".venv", "pyproject.toml"):  # a checkout without the developer's .env
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / ".env").write_text((ROOT / ".env.example").read_text())
    printed = subprocess.run(["make", "--no-print-directory", "-f", str(ROOT / "Makefile"), "-n", "rounds", "COUNT=2",
                              "ROUND_ARGS=--dry-run"], cwd=tmp_path, env=_ENV, capture_output=True, text=True,
                             timeout=60, check=True).stdout.strip().splitlines()[-1]  # fmt: skip
    assert " training rounds configs/round.yaml --count 2 --compose " in printed and printed.endswith(" --dry-run")
    result = subprocess.run(["bash", "-c", printed], cwd=tmp_path, env=_ENV, capture_output=True, text=True,
                            timeout=120, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    services = [line for line in result.stdout.splitlines() if " run --rm " in line]
    assert [line.rsplit(" ", 1)[1] for line in services] == ["train", "analyze", "gate"] * 2
    for line in services:
        assert " USE_WANDB=1 WANDB_MODE=offline WANDB_PROJECT=shopsimrl " in line, line
    assert sorted(os.listdir(tmp_path)) == [".env", ".venv", "configs", "pyproject.toml"]  # the dry run wrote nothing

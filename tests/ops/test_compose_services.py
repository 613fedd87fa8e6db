"""compose.yaml's environment contract: what the round runner and make pass reaches the containers,
and every stage's inputs derive from the round (WANDB_GROUP), none from round 000.

`_interpolate` is compose's variable substitution (`${VAR}`, `${VAR:-default}`, `${VAR-default}`,
`$$`), written out slowly here because the compose CLI is not on the test host.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ops_helpers import ROOT

from shopsimrl.analyst.config import load_analysis_config
from shopsimrl.config.overrides import parse_overrides
from shopsimrl.evaluation.config import load_eval_config
from shopsimrl.gate.config import load_gate_config
from shopsimrl.ops import compose_schema
from shopsimrl.ops.launch import RESOLVED_OPTIONS_NAME

_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
GROUP = "qwen35-4b-round-001"
CHECKPOINT = f"checkpoints/{GROUP}/hf/rollout-199"


def _interpolate(value: Any, env: dict[str, str]) -> Any:
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        if match.group(2) == ":-":
            return env.get(name) or match.group(3)
        if match.group(2) == "-":
            return env[name] if name in env else match.group(3)
        return env.get(name, "")

    return _VARIABLE.sub(substitute, value)


def _services() -> dict[str, Any]:
    return compose_schema.read_compose(ROOT / "compose.yaml")["services"]


def container_env(service: str, host_env: dict[str, str]) -> dict[str, str]:
    """The service's `environment:` as the container sees it, for this host environment."""
    return {key: _interpolate(value, host_env) for key, value in _services()[service]["environment"].items()
            if value is not None}


def test_the_round_runners_variables_reach_the_train_container():
    host = {"WANDB_GROUP": GROUP, "START_LOAD": "checkpoints/qwen35-4b-round-000", "ROLLOUT_SEED": "1001",
            "SHOPSIM_CONFIG": f"runs/{GROUP}/shopsim_config.yaml", "USE_WANDB": "1", "WANDB_MODE": "online",
            "WANDB_PROJECT": "p", "NUM_GPUS": "4", "SMOKE_NUM_GPUS": "2", "ALGO": "ppo"}
    env = container_env("train", host)
    assert {key: env[key] for key in host} == host
    assert env["WANDB_DIR"] == "/workspace/wandb"  # the host's WANDB_DIR never reaches the container
    # Unset: empty (the launcher's profile default), W&B off and offline, the default round.
    bare = container_env("train", {})
    assert {key: bare[key] for key in host} == {
        "WANDB_GROUP": "qwen35-4b-round-000", "START_LOAD": "", "ROLLOUT_SEED": "", "SHOPSIM_CONFIG": "",
        "USE_WANDB": "0", "WANDB_MODE": "offline", "WANDB_PROJECT": "shopsimrl", "NUM_GPUS": "", "SMOKE_NUM_GPUS": "",
        "ALGO": ""}  # empty: the launcher's profile ADVANTAGE_ESTIMATOR


@pytest.mark.parametrize("service", ["train", "train-smoke", "convert", "preflight", "canary", "analyze", "gate",
                                     "eval", "wandb-sync", "report"])
def test_every_service_gets_the_round_the_w_and_b_switch_the_gpu_counts_and_the_estimator(service):
    env = container_env(service, {"WANDB_GROUP": GROUP, "USE_WANDB": "1", "NUM_GPUS": "4", "SMOKE_NUM_GPUS": "2",
                                  "ALGO": "ppo"})
    assert (env["WANDB_GROUP"], env["USE_WANDB"], env["WANDB_MODE"]) == (GROUP, "1", "offline")
    assert (env["NUM_GPUS"], env["SMOKE_NUM_GPUS"], env["ALGO"]) == ("4", "2", "ppo")


@pytest.mark.parametrize("service", ["train", "train-smoke", "convert", "preflight", "canary", "analyze", "gate",
                                     "eval", "wandb-sync", "report"])
def test_every_service_gets_the_w_and_b_entity_and_a_private_servers_address(service):
    """`--wandb-entity` of the round runner (it sets WANDB_ENTITY for compose) and a private server's
    WANDB_BASE_URL reach the container; an unset WANDB_BASE_URL stays unset (passed by name: an empty
    one would be a bad address to wandb)."""
    env = container_env(service, {"WANDB_ENTITY": "team-a", "WANDB_BASE_URL": "https://wandb.example.com"})
    assert env["WANDB_ENTITY"] == "team-a"
    assert "WANDB_BASE_URL" in _services()[service]["environment"]
    assert _services()[service]["environment"]["WANDB_BASE_URL"] is None
    assert container_env(service, {})["WANDB_ENTITY"] == ""


def test_no_service_default_or_production_config_names_a_round():
    """Round 000 appears only as the default of WANDB_GROUP itself; the configs name no round at all."""
    compose = (ROOT / "compose.yaml").read_text()
    assert compose.count("round-000") == compose.count("${WANDB_GROUP:-qwen35-4b-round-000}") == 2
    for name in ("trace2skill_online_analysis.yaml", "trace2skill_online_gate.yaml", "eval.yaml"):
        text = (ROOT / "configs" / name).read_text()
        assert not re.search(r"^[^#]*round-\d", text, re.M), name
        assert "local-demo" not in text, name


def _stage_argv(service: str, host_env: dict[str, str], served: str, tmp_path: Path) -> list[str]:
    """The stage command the service runs once SGLang serves `served` (scripts/with_sglang.sh exports
    it as SGLANG_CHECKPOINT), run by bash as in the container; a stand-in `shopsimrl` prints its argv."""
    command = _services()[service]["command"]
    assert command[:6] == ["bash", "/opt/shopsimrl/scripts/container_entry.sh",
                           "bash", "/opt/shopsimrl/scripts/with_sglang.sh", "bash", "-c"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "shopsimrl").write_text("#!/bin/sh\nprintf '%s\\0' \"$@\"\n")
    (bin_dir / "shopsimrl").chmod(0o755)
    env = {**container_env(service, host_env), "SGLANG_CHECKPOINT": served, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(["bash", "-c", _interpolate(command[6], {})], env=env, capture_output=True, text=True,
                          check=True, timeout=60)
    return done.stdout.split("\0")[:-1]


def _sets(argv: list[str]) -> dict[str, Any]:
    return parse_overrides((argv[i + 1] for i, arg in enumerate(argv) if arg == "--set"), example="k=v")


def test_the_analyze_service_runs_the_production_analyst_of_the_round(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    services = _services()
    assert services["analyze"]["environment"]["SGLANG_CHECKPOINT"] == "${ANALYZE_CHECKPOINT:-}"
    argv = _stage_argv("analyze", {"WANDB_GROUP": GROUP}, CHECKPOINT, tmp_path)
    assert argv[:3] == ["training", "analyze", "configs/trace2skill_online_analysis.yaml"]
    config = load_analysis_config(argv[2], _sets(argv))
    assert (config.run.group, config.train_dir, config.analysis_dir) == (
        GROUP, Path(f"runs/{GROUP}/train"), Path(f"runs/{GROUP}/analysis"))
    # The plugin options slime trained with: the launcher writes them beside the round's train/.
    assert config.shopsim_config == f"runs/{GROUP}/train/{RESOLVED_OPTIONS_NAME}"
    assert (config.lessons.backend.value, config.lessons.llm.base_url) == ("llm", "http://127.0.0.1:30000/v1")
    assert (config.trial.generator.value, config.trial.sglang_url, config.trial.tokenizer) == (
        "sglang", "http://127.0.0.1:30000", CHECKPOINT)
    # The round runner's own config (ANALYZE_CONFIG) runs as written.
    runner = _stage_argv("analyze", {"WANDB_GROUP": GROUP, "ANALYZE_CONFIG": f"runs/{GROUP}/analysis_config.yaml"},
                         CHECKPOINT, tmp_path)
    assert runner == ["training", "analyze", f"runs/{GROUP}/analysis_config.yaml"]


def test_the_gate_service_runs_the_rounds_gate_on_the_served_checkpoint(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    assert _services()["gate"]["environment"]["SGLANG_CHECKPOINT"] == "${GATE_CHECKPOINT:-}"
    argv = _stage_argv("gate", {"WANDB_GROUP": GROUP}, CHECKPOINT, tmp_path)
    assert argv[:3] == ["training", "online-gate", "configs/trace2skill_online_gate.yaml"]
    config = load_gate_config(argv[2], _sets(argv))
    assert (config.round, config.gate_dir, config.inputs.checkpoint) == (GROUP, Path(f"runs/{GROUP}/gate"), CHECKPOINT)
    assert (config.inputs.candidate_pool, config.inputs.proposal_ledger) == (
        f"runs/{GROUP}/analysis/candidate_pool.json", f"runs/{GROUP}/analysis/proposal_ledger.jsonl")
    assert config.generator.url == "http://127.0.0.1:30000"
    runner = _stage_argv("gate", {"WANDB_GROUP": GROUP, "GATE_CONFIG": f"runs/{GROUP}/gate_config.yaml"},
                         CHECKPOINT, tmp_path)
    assert runner == ["training", "online-gate", f"runs/{GROUP}/gate_config.yaml"]


def test_the_eval_service_evaluates_the_served_checkpoint_into_the_round(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    assert _services()["eval"]["environment"]["SGLANG_CHECKPOINT"] == "${EVAL_CHECKPOINT:-}"
    argv = _stage_argv("eval", {"WANDB_GROUP": GROUP}, CHECKPOINT, tmp_path)
    assert argv == ["eval", "configs/eval.yaml", "--checkpoint", CHECKPOINT, "--group", GROUP]
    config = load_eval_config(argv[1], {"checkpoint": argv[3], "group": argv[5]})
    assert config.eval_dir == Path(f"runs/{GROUP}/eval/rollout-199-validation-full")


@pytest.mark.parametrize("service", ["analyze", "gate", "eval"])
def test_stage_services_share_the_train_services_gpu_settings(service):
    services = _services()
    for key in ("image", "deploy", "ipc", "shm_size", "ulimits", "volumes", "env_file"):
        assert services[service][key] == services["train"][key], key


@pytest.mark.parametrize(("service", "argv"), [
    ("wandb-sync", ["wandb", "sync", "/workspace/wandb"]),
    ("report", ["wandb", "export", "--group", GROUP]),
])
def test_sync_and_report_services_run_our_cli(service, argv):
    """`wandb sync` alone trusts its exit code and checks no credentials; wandb has no `export` at all."""
    from click.testing import CliRunner

    from shopsimrl.cli import main

    command = [_interpolate(part, {"WANDB_GROUP": GROUP}) for part in _services()[service]["command"]]
    assert command == ["shopsimrl", *argv]
    assert CliRunner().invoke(main, [*argv, "--help"]).exit_code == 0

"""scripts/run_shopsimrl_slime.sh in DRY_RUN mode: the exact slime command it would run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ops_helpers import ROOT, dry_run, value_of

from shopsimrl.ops.slime_flags import FORBIDDEN_FLAGS, flags_in_command, unlisted_flags

WANDB_FLAGS = {"--use-wandb", "--wandb-project", "--wandb-group", "--disable-wandb-random-suffix",
               "--wandb-team", "--wandb-mode", "--wandb-dir"}
HOOKS = {
    "--custom-generate-function-path": "shopsimrl.slime_hooks.generate",
    "--custom-rm-path": "shopsimrl.slime_hooks.reward",
    "--custom-reward-post-process-path": "shopsimrl.slime_hooks.reward_post_process",
    "--dynamic-sampling-filter-path": "shopsimrl.slime_hooks.dynamic_sampling_filter",
    "--rollout-all-samples-process-path": "shopsimrl.slime_metrics.record_generated_rollout_groups",
    "--custom-rollout-log-function-path": "shopsimrl.slime_metrics.enrich_rollout_metrics",
}


def test_bash_syntax_of_every_shell_file():
    files = [*ROOT.glob("scripts/*.sh"), *ROOT.glob("docker/*.sh"), *ROOT.glob("configs/slime/*.env"),
             *ROOT.glob("configs/slime/models/*.sh")]
    assert len(files) >= 6
    for path in files:
        result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{path}: {result.stderr}"


def test_use_wandb_0_passes_no_wandb_flag():
    run = dry_run(USE_WANDB="0", WANDB_PROJECT="p", WANDB_GROUP="g", WANDB_MODE="offline")
    assert run.returncode == 0, run.stderr
    assert not WANDB_FLAGS & set(flags_in_command(run.submit))
    assert "use_wandb=0" in run.stderr


def test_use_wandb_unset_means_0():
    run = dry_run()
    assert run.returncode == 0, run.stderr
    assert "--use-wandb" not in run.submit


def test_use_wandb_1_minimal():
    run = dry_run(USE_WANDB="1", WANDB_PROJECT="shopsimrl", WANDB_GROUP="qwen35-4b-round-007")
    assert run.returncode == 0, run.stderr
    assert run.submit[-6:] == ["--use-wandb", "--wandb-project", "shopsimrl", "--wandb-group",
                               "qwen35-4b-round-007", "--disable-wandb-random-suffix"]
    assert "--wandb-team" not in run.submit and "--wandb-mode" not in run.submit and "--wandb-dir" not in run.submit


def test_use_wandb_1_with_entity_mode_and_dir():
    run = dry_run(USE_WANDB="1", WANDB_PROJECT="shopsimrl", WANDB_GROUP="g0", WANDB_ENTITY="my-team",
                  WANDB_MODE="offline", WANDB_DIR="/workspace/wandb")
    assert run.returncode == 0, run.stderr
    assert run.submit[-12:] == ["--use-wandb", "--wandb-project", "shopsimrl", "--wandb-group", "g0",
                                "--disable-wandb-random-suffix", "--wandb-team", "my-team", "--wandb-mode",
                                "offline", "--wandb-dir", "/workspace/wandb"]


@pytest.mark.parametrize("value", ["2", "true", "yes", " 1"])
def test_use_wandb_other_than_0_or_1_is_rejected(value):
    run = dry_run(USE_WANDB=value)
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr == f"run_shopsimrl_slime.sh: error: USE_WANDB must be 0 or 1, got '{value}'\n"


def test_bad_wandb_mode_is_rejected():
    run = dry_run(USE_WANDB="1", WANDB_MODE="offlin")
    assert run.returncode == 2
    assert run.stderr == "run_shopsimrl_slime.sh: error: WANDB_MODE must be online or offline, got 'offlin'\n"


def test_api_key_in_environment_never_reaches_the_command():
    key = "k" * 40
    run = dry_run(USE_WANDB="1", WANDB_API_KEY=key)
    assert run.returncode == 0, run.stderr
    assert key not in run.stdout and key not in run.stderr
    for flag in FORBIDDEN_FLAGS:
        assert flag not in run.stdout


@pytest.mark.parametrize("config", ["configs/slime/smoke.env", "configs/slime/formal.env"])
@pytest.mark.parametrize("use_wandb", ["0", "1"])
def test_every_flag_is_declared(config, use_wandb):
    run = dry_run(config, USE_WANDB=use_wandb, WANDB_ENTITY="t", WANDB_MODE="online", WANDB_DIR="/w")
    assert run.returncode == 0, run.stderr
    assert unlisted_flags(run.submit) == []


@pytest.mark.parametrize("config", ["configs/slime/smoke.env", "configs/slime/formal.env"])
def test_hooks_by_dotted_path_and_absolute_plugin_config(config):
    argv = dry_run(config).submit
    for flag, path in HOOKS.items():
        assert value_of(argv, flag) == path
    expected = {"configs/slime/smoke.env": "configs/shopsim.smoke.yaml", "configs/slime/formal.env": "configs/shopsim.formal.yaml"}
    assert value_of(argv, "--custom-config-path") == str(ROOT / expected[config])
    assert argv[:3] == ["ray", "job", "submit"]
    assert argv[argv.index("--") + 1:argv.index("--") + 3][1] == "/root/slime/train.py"


def test_smoke_is_one_group_of_four_one_step_no_save():
    argv = dry_run("configs/slime/smoke.env").submit
    shape = {f: value_of(argv, f) for f in ("--num-rollout", "--rollout-batch-size", "--n-samples-per-prompt",
                                           "--over-sampling-batch-size", "--num-steps-per-rollout",
                                           "--actor-num-gpus-per-node")}
    assert shape == {"--num-rollout": "1", "--rollout-batch-size": "1", "--n-samples-per-prompt": "4",
                     "--over-sampling-batch-size": "1", "--num-steps-per-rollout": "1", "--actor-num-gpus-per-node": "1"}
    assert "--save" not in argv and "--load" not in argv and "--save-interval" not in argv


def test_formal_saves_under_the_round_and_differs_from_smoke_only_in_config():
    formal = dry_run("configs/slime/formal.env", WANDB_GROUP="qwen35-4b-round-003").submit
    smoke = dry_run("configs/slime/smoke.env").submit
    assert value_of(formal, "--save") == str(ROOT / "checkpoints/qwen35-4b-round-003")
    assert value_of(formal, "--over-sampling-batch-size") == "32"
    assert value_of(formal, "--rollout-batch-size") == "16"
    # Same flags apart from batch shape/checkpointing: the model and hooks are shared.
    assert set(flags_in_command(formal)) - set(flags_in_command(smoke)) == {"--load", "--save", "--save-interval"}
    assert set(flags_in_command(smoke)) <= set(flags_in_command(formal))


def test_model_architecture_comes_from_the_sourced_model_file():
    argv = dry_run().submit
    assert value_of(argv, "--num-layers") == "32"
    assert value_of(argv, "--hidden-size") == "2560"
    assert value_of(argv, "--vocab-size") == "248320"
    assert argv[argv.index("--spec") + 1:argv.index("--spec") + 3] == ["slime_plugins.models.qwen3_5", "get_qwen3_5_spec"]


def test_runtime_env_carries_wandb_dirs_but_no_key():
    run = dry_run(USE_WANDB="1", WANDB_DIR="/workspace/wandb", WANDB_DATA_DIR="/workspace/wandb/data",
                  WANDB_API_KEY="x" * 40)
    runtime = next(t for t in run.submit if t.startswith("--runtime-env-json="))
    import json

    env_vars = json.loads(runtime.split("=", 1)[1])["env_vars"]
    assert env_vars["WANDB_DIR"] == "/workspace/wandb"
    assert env_vars["WANDB_DATA_DIR"] == "/workspace/wandb/data"
    assert env_vars["PYTHONPATH"] == "/root/Megatron-LM/"
    assert "WANDB_API_KEY" not in env_vars


def test_missing_launch_config_is_reported():
    run = dry_run("configs/slime/nope.env")
    assert run.returncode == 2
    assert "launch config not found: configs/slime/nope.env" in run.stderr


def test_invalid_plugin_options_stop_the_launch(tmp_path: Path):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("shopsim:\n  run_dir: /x\n  q: {start: 1.5}\n  bogus: 1\n")
    config = tmp_path / "bad.env"
    config.write_text((ROOT / "configs/slime/smoke.env").read_text() + f"SHOPSIM_CONFIG={bad_yaml}\n")
    run = dry_run(str(config))
    assert run.returncode == 2
    assert "shopsim.q.start: Input should be less than or equal to 1" in run.stderr
    assert "shopsim.bogus: Extra inputs are not permitted" in run.stderr
    assert f"invalid plugin options in {bad_yaml}" in run.stderr


def test_missing_settings_are_listed_together(tmp_path: Path):
    config = tmp_path / "partial.env"
    config.write_text("RUN_MODE=smoke\nSHOPSIM_CONFIG=configs/shopsim.smoke.yaml\n")
    run = dry_run(str(config))
    assert run.returncode == 2
    assert run.stderr == (f"run_shopsimrl_slime.sh: error: {config}: missing setting(s): NUM_ROLLOUT "
                          "ROLLOUT_BATCH_SIZE N_SAMPLES_PER_PROMPT OVER_SAMPLING_BATCH_SIZE NUM_STEPS_PER_ROLLOUT\n")

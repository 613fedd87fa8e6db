"""scripts/run_shopsimrl_slime.sh in DRY_RUN mode: the exact slime command it would run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ops_helpers import ROOT, dry_run, value_of

from shopsimrl.ops.slime_flags import (
    FLAG_NAMES,
    FORBIDDEN_FLAGS,
    HANDOFF_BREAKING_FLAGS,
    flags_in_command,
    unlisted_flags,
)

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


def test_use_wandb_1_minimal_is_offline_by_default():
    """slime's own default mode is online (fails at wandb.init without credentials): always pass it."""
    run = dry_run(USE_WANDB="1", WANDB_PROJECT="shopsimrl", WANDB_GROUP="qwen35-4b-round-007")
    assert run.returncode == 0, run.stderr
    # A smoke run has its own group: it never mixes into the round it checks.
    assert run.submit[-8:] == ["--use-wandb", "--wandb-project", "shopsimrl", "--wandb-group",
                               "qwen35-4b-round-007-smoke", "--disable-wandb-random-suffix", "--wandb-mode", "offline"]
    assert "--wandb-team" not in run.submit and "--wandb-dir" not in run.submit
    runtime = json.loads(next(t for t in run.submit if t.startswith("--runtime-env-json=")).split("=", 1)[1])
    assert runtime["env_vars"]["WANDB_MODE"] == "offline"  # the workers' own wandb calls agree with slime
    assert run.plan["credentials"].startswith("none needed now: WANDB_MODE=offline")


def test_use_wandb_1_with_entity_mode_and_dir():
    run = dry_run(USE_WANDB="1", WANDB_PROJECT="shopsimrl", WANDB_GROUP="g0", WANDB_ENTITY="my-team",
                  WANDB_MODE="offline", WANDB_DIR="/workspace/wandb")
    assert run.returncode == 0, run.stderr
    assert run.submit[-12:] == ["--use-wandb", "--wandb-project", "shopsimrl", "--wandb-group", "g0-smoke",
                                "--disable-wandb-random-suffix", "--wandb-team", "my-team", "--wandb-mode",
                                "offline", "--wandb-dir", "/workspace/wandb"]
    online = dry_run(USE_WANDB="1", WANDB_MODE="online").submit
    assert value_of(online, "--wandb-mode") == "online"


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
    group = {"configs/slime/smoke.env": "qwen35-4b-round-000-smoke", "configs/slime/formal.env": "qwen35-4b-round-000"}
    # The resolved copy the launcher writes into the run directory ({group} filled in, absolute paths).
    assert value_of(argv, "--custom-config-path") == str(ROOT / "runs" / group[config] / "train/shopsim_options.yaml")
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
    assert set(flags_in_command(formal)) - set(flags_in_command(smoke)) == {"--load", "--save", "--save-interval", "--save-hf"}
    # slime formats the pattern with the rollout id: the last save is the round's fixed HF checkpoint.
    assert value_of(formal, "--save-hf") == str(ROOT / "checkpoints/qwen35-4b-round-003/hf/rollout-{rollout_id}")
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
    assert f"cannot launch {config} with {bad_yaml}: see the errors above; nothing was started" in run.stderr


def test_missing_settings_are_listed_together(tmp_path: Path):
    config = tmp_path / "partial.env"
    config.write_text("RUN_MODE=smoke\nSHOPSIM_CONFIG=configs/shopsim.smoke.yaml\n")
    run = dry_run(str(config))
    assert run.returncode == 2
    assert run.stderr == (f"run_shopsimrl_slime.sh: error: {config}: missing setting(s): NUM_ROLLOUT "
                          "ROLLOUT_BATCH_SIZE N_SAMPLES_PER_PROMPT OVER_SAMPLING_BATCH_SIZE NUM_STEPS_PER_ROLLOUT\n")


# ----------------------------------------------------------------------------------- the DRY_RUN plan


@pytest.mark.parametrize("config", ["configs/slime/smoke.env", "configs/slime/formal.env"])
def test_dry_run_plan_shows_conversion_prompt_shape_credentials_and_ownership(config):
    run = dry_run(config, USE_WANDB="1", WANDB_MODE="online", WANDB_API_KEY="k" * 40, HOST_UID="1234",
                  HOST_GID="5678", MODELS_DIR="/models")
    assert run.returncode == 0, run.stderr
    ref_load = str(ROOT / "checkpoints/base/Qwen3.5-4B_torch_dist")
    assert value_of(run.submit, "--ref-load") == ref_load
    conversion = run.plan["conversion"]
    assert "`make convert`" in conversion
    assert ("torchrun --nproc-per-node 1 /root/slime/tools/convert_hf_to_torch_dist.py --spec "
            "slime_plugins.models.qwen3_5 get_qwen3_5_spec") in conversion
    assert conversion.endswith(f"--hf-checkpoint /models/Qwen3.5-4B --save {ref_load}.partial")
    assert '[{"role": "user", "content": <instruction>}]' in run.plan["prompts"]
    assert "--apply-chat-template" in run.submit
    assert run.plan["credentials"].startswith("WANDB_API_KEY from the environment (compose passes it by name")
    assert "k" * 40 not in run.stdout
    assert "chown -R 1234:5678" in run.plan["ownership"]


@pytest.mark.parametrize(("env", "route"), [
    ({"USE_WANDB": "0"}, "none: USE_WANDB=0"),
    ({"USE_WANDB": "1", "WANDB_MODE": "offline"}, "none needed now: WANDB_MODE=offline"),
    ({"USE_WANDB": "1", "WANDB_MODE": "online", "NETRC": "/run/secrets/wandb.netrc"},
     "netrc file NETRC=/run/secrets/wandb.netrc"),
    ({"USE_WANDB": "1", "WANDB_MODE": "online"}, "MISSING: WANDB_MODE=online but neither WANDB_API_KEY nor NETRC"),
])
def test_dry_run_names_the_credential_route(env, route):
    run = dry_run("configs/slime/formal.env", **env)
    assert run.returncode == 0, run.stderr
    assert run.plan["credentials"].startswith(route)


def test_round_identity_has_one_source():
    """WANDB_GROUP names the run dir, the plugin options, the checkpoints and the W&B group together."""
    import json

    for config, group in (("configs/slime/formal.env", "r-005"), ("configs/slime/smoke.env", "r-005-smoke")):
        argv = dry_run(config, WANDB_GROUP="r-005", USE_WANDB="1").submit
        assert value_of(argv, "--wandb-group") == group
        assert value_of(argv, "--custom-config-path") == str(ROOT / f"runs/{group}/train/shopsim_options.yaml")
        runtime = json.loads(next(t for t in argv if t.startswith("--runtime-env-json=")).split("=", 1)[1])
        assert runtime["env_vars"]["WANDB_GROUP"] == group and runtime["env_vars"]["WANDB_RUN_GROUP"] == group
    assert value_of(dry_run("configs/slime/formal.env", WANDB_GROUP="r-005").submit, "--save") == str(ROOT / "checkpoints/r-005")


def test_shipped_plugin_configs_name_no_container_path_and_take_the_group():
    for name in ("shopsim.smoke.yaml", "shopsim.formal.yaml"):
        text = (ROOT / "configs" / name).read_text()
        assert "run_dir: runs/{group}/train" in text
        assert "/workspace" not in text.split("\nshopsim:\n", 1)[1]


def test_runtime_env_as_slimes_launcher_sets_it():
    import json

    run = dry_run(MASTER_ADDR="10.0.0.5", NCCL_NVLS_ENABLE="1")
    env_vars = json.loads(next(t for t in run.submit if t.startswith("--runtime-env-json=")).split("=", 1)[1])["env_vars"]
    assert env_vars["NCCL_NVLS_ENABLE"] == "1"
    assert env_vars["no_proxy"] == env_vars["NO_PROXY"] == "127.0.0.1,localhost,10.0.0.5"
    assert env_vars["MASTER_ADDR"] == "10.0.0.5" and env_vars["RAY_USE_UVLOOP"] == "0"
    assert value_of(run.ray_start, "--temp-dir") == "/tmp/ray"
    # No NVLink (no nvidia-smi here): NVLS off, as slime's check_has_nvlink decides.
    default = dry_run()
    assert json.loads(next(t for t in default.submit if t.startswith("--runtime-env-json=")).split("=", 1)[1])[
        "env_vars"]["NCCL_NVLS_ENABLE"] in ("0", "1")


def test_no_context_len_flag_that_bounds_nothing():
    """slime v0.3.1 does not hand --rollout-max-context-len to SGLang; the real bound is shopsim.max_context_tokens."""
    for config in ("configs/slime/smoke.env", "configs/slime/formal.env"):
        assert "--rollout-max-context-len" not in dry_run(config).submit
    assert "ROLLOUT_MAX_CONTEXT_LEN" not in (ROOT / "configs/slime/common.env").read_text()


def test_two_gpu_smoke_profile():
    argv = dry_run("configs/slime/smoke-2gpu.env").submit
    assert value_of(argv, "--actor-num-gpus-per-node") == "2"
    assert value_of(argv, "--n-samples-per-prompt") == "4" and "--save" not in argv


def test_background_retries_are_refused_at_launch_because_the_launcher_colocates(tmp_path: Path):
    plugin = tmp_path / "bg.yaml"
    plugin.write_text((ROOT / "configs/shopsim.formal.yaml").read_text() + "shopsim_retry_mode: background\n")
    config = tmp_path / "bg.env"
    config.write_text((ROOT / "configs/slime/formal.env").read_text() + f"SHOPSIM_CONFIG={plugin}\n")
    run = dry_run(str(config))
    assert run.returncode == 2
    assert f"error: {plugin}: shopsim_retry_mode=background needs engines that are not colocated" in run.stderr
    assert "--colocate" in dry_run("configs/slime/formal.env").submit


# ------------------------------------------------------ issues 23 and 27: rounds after the first one


def test_round_001_dry_run_shows_the_handoff_and_only_round_001s_paths():
    """START_LOAD -> --ref-load; --load/--save are round 001's own (docs/slime_handoff.md)."""
    run = dry_run("configs/slime/formal.env", WANDB_GROUP="qwen35-4b-round-001", USE_WANDB="1",
                  START_LOAD="checkpoints/qwen35-4b-round-000", ROLLOUT_SEED="1001")
    assert run.returncode == 0, run.stderr
    argv = run.submit
    assert value_of(argv, "--ref-load") == str(ROOT / "checkpoints/qwen35-4b-round-000")
    assert value_of(argv, "--load") == value_of(argv, "--save") == str(ROOT / "checkpoints/qwen35-4b-round-001")
    assert value_of(argv, "--save-hf") == str(ROOT / "checkpoints/qwen35-4b-round-001/hf/rollout-{rollout_id}")
    assert value_of(argv, "--rollout-seed") == "1001"
    assert value_of(argv, "--wandb-mode") == "offline"
    assert "--finetune" not in argv and "--start-rollout-id" not in argv  # both would break round 001's resume
    # Round 000 appears once: as the weights round 001 starts from.
    assert [t for t in argv if "round-000" in t] == [str(ROOT / "checkpoints/qwen35-4b-round-000")]
    assert run.plan["start"].startswith(f"hand-off: --ref-load {ROOT}/checkpoints/qwen35-4b-round-000 (")
    assert run.plan["start"].endswith(
        f"with an empty --load {ROOT}/checkpoints/qwen35-4b-round-001: slime starts at rollout 0 from the "
        "previous round's final weights with a fresh optimizer (docs/slime_handoff.md)")


def test_first_round_starts_from_the_converted_base_model():
    run = dry_run("configs/slime/formal.env", WANDB_GROUP="qwen35-4b-round-000")
    assert value_of(run.submit, "--ref-load") == str(ROOT / "checkpoints/base/Qwen3.5-4B_torch_dist")
    assert run.plan["start"] == f"base: rollout 0 from --ref-load {ROOT}/checkpoints/base/Qwen3.5-4B_torch_dist " \
                                "(the converted base model) with a fresh optimizer"


def test_start_load_equal_to_the_rounds_own_save_dir_is_refused():
    run = dry_run("configs/slime/formal.env", WANDB_GROUP="r-001", START_LOAD=str(ROOT / "checkpoints/r-001"))
    assert run.returncode == 2 and run.stdout == ""
    assert (f"error: START_LOAD {ROOT}/checkpoints/r-001 is this round's own save dir: slime would resume it at "
            "its iteration + 1 and train 0 new steps; START_LOAD is the previous round's save dir "
            "(checkpoints/<previous group>)") in run.stderr


def test_rollout_seed_and_plugin_options_come_from_the_round(tmp_path: Path):
    options = tmp_path / "shopsim_config.yaml"
    options.write_text((ROOT / "configs/shopsim.formal.yaml").read_text())
    formal = dry_run("configs/slime/formal.env", WANDB_GROUP="g-001", ROLLOUT_SEED="77", SHOPSIM_CONFIG=str(options))
    assert formal.returncode == 0, formal.stderr
    assert value_of(formal.submit, "--rollout-seed") == "77"
    assert "config=configs/slime/formal.env" in formal.stderr
    # The smoke profile keeps its own options: a smoke check never runs the round's formal options.
    smoke = dry_run("configs/slime/smoke.env", ROLLOUT_SEED="78", SHOPSIM_CONFIG=str(tmp_path / "absent.yaml"))
    assert smoke.returncode == 0, smoke.stderr
    assert value_of(smoke.submit, "--rollout-seed") == "78"
    # Outside a round the constants apply.
    assert value_of(dry_run("configs/slime/formal.env").submit, "--rollout-seed") == "42"


def test_the_rounds_plugin_options_are_what_prepare_validates(tmp_path: Path):
    bad = tmp_path / "shopsim_config.yaml"
    bad.write_text("shopsim:\n  run_dir: runs/{group}/train\n  bogus: 1\n")
    run = dry_run("configs/slime/formal.env", SHOPSIM_CONFIG=str(bad))
    assert run.returncode == 2
    assert "shopsim.bogus: Extra inputs are not permitted" in run.stderr


@pytest.mark.parametrize("seed", ["-1", "4.2", "abc", ""])
def test_a_rollout_seed_that_is_no_integer_is_refused(seed):
    run = dry_run("configs/slime/formal.env", ROLLOUT_SEED=seed)
    if seed == "":  # empty means unset: the profile's constant
        assert value_of(run.submit, "--rollout-seed") == "42"
        return
    assert run.returncode == 2
    assert run.stderr == f"run_shopsimrl_slime.sh: error: ROLLOUT_SEED must be a non-negative integer, got '{seed}'\n"


def test_gpu_counts_come_from_the_environment():
    formal = dry_run("configs/slime/formal.env", NUM_GPUS="4")
    assert value_of(formal.submit, "--actor-num-gpus-per-node") == "4"
    assert value_of(formal.ray_start, "--num-gpus") == "4"
    smoke = dry_run("configs/slime/smoke.env", SMOKE_NUM_GPUS="2", NUM_GPUS="8")
    assert value_of(smoke.submit, "--actor-num-gpus-per-node") == "2" and value_of(smoke.ray_start, "--num-gpus") == "2"
    bad = dry_run("configs/slime/formal.env", NUM_GPUS="eight")
    assert bad.returncode == 2
    assert bad.stderr == ("run_shopsimrl_slime.sh: error: configs/slime/formal.env: the GPU count "
                          "(NUM_GPUS / SMOKE_NUM_GPUS) must be a positive integer, got 'eight'\n")


def test_dry_run_works_on_a_host_without_torch(tmp_path: Path):
    """The launch checks import no torch: `shopsimrl.models` loads its torch-backed names lazily.

    A host's venv has neither torch nor slime (slime needs torch): both are blocked, and the test
    session's vendored slime is left off PYTHONPATH.
    """
    blocker = tmp_path / "no_torch"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nsys.modules['torch'] = sys.modules['slime'] = None  # as if not installed\n")
    pythonpath = str(blocker)
    for module in ("torch", "slime"):
        probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": pythonpath}, check=False)  # fmt: skip
        assert probe.returncode == 1 and "ModuleNotFoundError" in probe.stderr  # the blocker works
    for config in ("configs/slime/formal.env", "configs/slime/smoke.env"):
        run = dry_run(config, PYTHONPATH=pythonpath, WANDB_GROUP="qwen35-4b-round-001",
                      START_LOAD="checkpoints/qwen35-4b-round-000")
        assert run.returncode == 0, run.stderr
        assert run.submit[:3] == ["ray", "job", "submit"]


@pytest.mark.parametrize("config", ["configs/slime/smoke.env", "configs/slime/formal.env"])
@pytest.mark.parametrize("start_load", ["", "checkpoints/qwen35-4b-round-000"])
def test_no_launch_passes_a_flag_that_breaks_the_handoff(config, start_load):
    run = dry_run(config, WANDB_GROUP="qwen35-4b-round-001", START_LOAD=start_load)
    assert run.returncode == 0, run.stderr
    assert set(flags_in_command(run.submit)) & HANDOFF_BREAKING_FLAGS == set()
    assert not HANDOFF_BREAKING_FLAGS & FLAG_NAMES  # nor may they be declared as launcher flags


def test_the_round_runner_hands_each_round_its_own_rollout_seed_and_start(tmp_path):
    """The slime dry run of round 001, from the environment the round runner gives the train
    service, shows a rollout seed other than round 000's and round 000's save as the start."""
    from shopsimrl.round import load_round_config
    from shopsimrl.round.backends import round_environment, train_environment
    from shopsimrl.tracking import WandbSettings

    first = load_round_config(ROOT / "configs" / "round.yaml")
    second = load_round_config(ROOT / "configs" / "round.yaml", {
        "round.group": "qwen35-4b-round-001", "round.start_load": "checkpoints/qwen35-4b-round-000"})  # fmt: skip
    seeds = []
    for config in (first, second):
        env = {**round_environment(config, WandbSettings(enabled=True)), **train_environment(config)}
        options = tmp_path / f"{config.group}.yaml"  # the runner writes runs/<group>/shopsim_config.yaml
        options.write_text(__import__("yaml").safe_dump(config.train_document()))
        run = dry_run("configs/slime/formal.env", **{**env, "SHOPSIM_CONFIG": str(options)})
        assert run.returncode == 0, run.stderr
        seeds.append(value_of(run.submit, "--rollout-seed"))
        assert seeds[-1] == str(config.seeds.rollout) and value_of(run.submit, "--wandb-mode") == "offline"
    assert seeds[0] != seeds[1]
    assert value_of(run.submit, "--ref-load") == str(ROOT / "checkpoints/qwen35-4b-round-000")
    assert value_of(run.submit, "--load") == str(ROOT / "checkpoints/qwen35-4b-round-001")


@pytest.mark.parametrize(("coef", "passed"), [(None, False), ("0", False), ("0.0", False), ("0.01", True)])
def test_the_kl_loss_flags_only_with_a_nonzero_coefficient(tmp_path: Path, coef, passed):
    """slime loads a reference model (a pinned CPU copy of the weights on every rank, a forward per step)
    whenever --use-kl-loss is passed, whatever its coefficient (slime/ray/placement_group.py:178)."""
    config = "configs/slime/smoke.env"
    if coef is not None:
        config = str(tmp_path / "kl.env")
        Path(config).write_text(f"source configs/slime/smoke.env\nKL_LOSS_COEF={coef}\n")
    run = dry_run(config)
    assert run.returncode == 0, run.stderr
    flags = set(flags_in_command(run.submit))
    assert {"--use-kl-loss", "--kl-loss-coef", "--kl-loss-type"} & flags == (
        {"--use-kl-loss", "--kl-loss-coef", "--kl-loss-type"} if passed else set())
    if passed:
        assert value_of(run.submit, "--kl-loss-coef") == coef

"""The slime path of PPO: the launcher's critic flags, parsed by slime's own argument parser, and our
critic-role config read by slime's own `parse_megatron_role_args` (skipped without slime's source).

slime's `arguments.py` imports SGLang's and sglang-router's argument classes at module level; neither
is installed here (they need a GPU build), so those two third-party modules are stand-ins with the
names imported. Every parser entry checked here is slime's own."""

from __future__ import annotations

import argparse
import inspect
import sys
import types
from collections.abc import Iterator

import pytest
from ops_helpers import ROOT, dry_run, value_of
from slime_source import SLIME_SRC, requires_slime

from shopsimrl.ops.slime_flags import FLAGS, FlagSource, unlisted_flags

PPO_FLAGS = ("--gamma", "--lambd", "--value-clip", "--num-critic-only-steps", "--megatron-config-path",
             "--rollout-data-postprocess-path")
SPREAD_HOOK = "shopsimrl.slime_metrics.add_ppo_spread_metrics"


@pytest.fixture
def slime_arguments(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    for name, attrs in (("sglang", {}), ("sglang.srt", {}), ("sglang.srt.server_args", {"ServerArgs": type("ServerArgs", (), {})}),
                        ("sglang_router", {}), ("sglang_router.launch_router", {"RouterArgs": type("RouterArgs", (), {})})):  # fmt: skip
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            monkeypatch.setitem(sys.modules, name, module)
    from slime.utils import arguments

    yield arguments


def _slime_only(argv: list[str]) -> list[str]:
    """The SLIME-source flags of a train.py command with their values (Megatron/SGLang flags left out)."""
    slime = {f.name for f in FLAGS if f.source is FlagSource.SLIME}
    tail = argv[next(i for i, t in enumerate(argv) if t.endswith("train.py")) + 1 :]
    out: list[str] = []
    for i, token in enumerate(tail):
        if token.startswith("--") and token in slime:
            out.append(token)
            out.extend(v for v in tail[i + 1 : i + 2] if not v.startswith("--"))
    return out


def test_ppo_profile_passes_slimes_critic_flags_and_grpo_does_not() -> None:
    ppo = dry_run("configs/slime/smoke-ppo.env")
    assert ppo.returncode == 0, ppo.stderr
    argv = ppo.submit
    assert value_of(argv, "--advantage-estimator") == "ppo"
    assert [value_of(argv, f) for f in PPO_FLAGS[:4]] == ["1.0", "1.0", "0.2", "0"]
    assert value_of(argv, "--megatron-config-path") == str(ROOT / "configs/slime/ppo_roles.yaml")
    assert value_of(argv, "--rollout-data-postprocess-path") == SPREAD_HOOK
    assert value_of(argv, "--num-steps-per-rollout") == "2"  # two optimizer steps each, actor and critic
    assert unlisted_flags(argv) == []
    grpo = dry_run("configs/slime/smoke.env").submit
    assert value_of(grpo, "--advantage-estimator") == "grpo"
    assert not set(PPO_FLAGS) & set(grpo)
    # ALGO in the environment wins over the profile
    assert value_of(dry_run("configs/slime/smoke.env", ALGO="ppo").submit, "--advantage-estimator") == "ppo"


def test_bad_algo_is_refused() -> None:
    bad = dry_run("configs/slime/smoke.env", ALGO="gspo")
    assert bad.returncode == 2
    assert "ALGO / ADVANTAGE_ESTIMATOR must be grpo or ppo, got 'gspo'" in bad.stderr


def test_ppo_with_checkpoints_gets_the_run_dirs_role_file_and_a_critic_plan() -> None:
    """Under SAVE_DIR the critic's load/save go into a resolved role file (tests/ops/test_slime_critic.py)."""
    formal = dry_run("configs/slime/formal.env", ALGO="ppo", WANDB_GROUP="ppo-round-000")
    assert formal.returncode == 0, formal.stderr
    assert value_of(formal.submit, "--megatron-config-path") == str(ROOT / "runs/ppo-round-000/train/megatron_roles.yaml")
    assert formal.plan["critic"] == ("fresh (the first round): slime builds the critic from --ref-load's weights with "
                                     f"a new value head, saves to {ROOT}/checkpoints/ppo-round-000/critic")  # fmt: skip
    assert not (ROOT / "runs/ppo-round-000").exists()  # a dry run writes nothing
    smoke = dry_run("configs/slime/smoke-ppo.env")
    assert smoke.plan["critic"] == (f"fresh from --ref-load's weights, never saved (no SAVE_DIR; "
                                    f"{ROOT}/configs/slime/ppo_roles.yaml as shipped)")  # fmt: skip
    assert "critic" not in dry_run("configs/slime/formal.env").plan


@requires_slime
def test_slimes_parser_reads_the_ppo_command(slime_arguments: types.ModuleType) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, conflict_handler="resolve")
    slime_arguments.get_slime_extra_args_provider()(parser)
    args, unknown = parser.parse_known_args(_slime_only(dry_run("configs/slime/smoke-ppo.env").submit))
    assert unknown == []  # every SLIME flag we pass is slime's, with a value of its type
    assert (args.advantage_estimator, args.gamma, args.lambd, args.value_clip, args.num_critic_only_steps) == (
        "ppo", 1.0, 1.0, 0.2, 0)
    # slime's own rule: ppo means a critic (parse_args sets it after parsing; the same expression here)
    assert args.advantage_estimator == "ppo"
    critic = slime_arguments.parse_megatron_role_args(args, args.megatron_config_path, role="critic")
    assert critic.lr == 1e-5 and isinstance(critic.lr, float)  # our override, as slime reads the YAML
    assert critic.kl_coef == 0  # slime's critic-only setting
    actor = slime_arguments.parse_megatron_role_args(args, args.megatron_config_path, role="actor")
    assert actor.lr == args.lr  # no actor entry: the actor keeps the command line's


@requires_slime
def test_slime_has_no_critic_checkpoint_flag(slime_arguments: types.ModuleType) -> None:
    """slime's usage docs name --critic-load/--critic-save; v0.3.1's parser has neither, so the critic's
    load and save can only come from its --megatron-config-path entry (shopsimrl/ops/critic.py)."""
    parser = argparse.ArgumentParser(allow_abbrev=False, conflict_handler="resolve")
    slime_arguments.get_slime_extra_args_provider()(parser)
    _args, unknown = parser.parse_known_args(["--rollout-batch-size", "1", "--critic-load", "/a", "--critic-save", "/b"])
    assert unknown == ["--critic-load", "/a", "--critic-save", "/b"]


@requires_slime
def test_slime_loads_our_rollout_data_hook_with_its_call_sites_arguments(slime_arguments: types.ModuleType) -> None:
    from slime.utils.misc import load_function

    from shopsimrl.slime_metrics import add_ppo_spread_metrics

    parser = argparse.ArgumentParser(allow_abbrev=False, conflict_handler="resolve")
    slime_arguments.get_slime_extra_args_provider()(parser)
    args, _ = parser.parse_known_args(_slime_only(dry_run("configs/slime/smoke-ppo.env").submit))
    hook = load_function(args.rollout_data_postprocess_path)  # as MegatronTrainRayActor.init loads it
    assert hook is add_ppo_spread_metrics
    # slime's one call site (actor.py, train_actor), as slime's own plugin-contract test pins it
    call = "self.rollout_data_postprocess(self.args, rollout_id, rollout_data)"
    assert call in (SLIME_SRC / "slime/backends/megatron_utils/actor.py").read_text()
    assert tuple(inspect.signature(hook).parameters) == ("args", "rollout_id", "rollout_data")

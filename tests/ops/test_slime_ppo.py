"""The slime path of PPO: the launcher's critic flags, parsed by slime's own argument parser, and our
critic-role config read by slime's own `parse_megatron_role_args` (skipped without slime's source).

slime's `arguments.py` imports SGLang's and sglang-router's argument classes at module level; neither
is installed here (they need a GPU build), so those two third-party modules are stand-ins with the
names imported. Every parser entry checked here is slime's own."""

from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Iterator

import pytest
from ops_helpers import ROOT, dry_run, value_of
from slime_source import requires_slime

from shopsimrl.ops.slime_flags import FLAGS, FlagSource, unlisted_flags

PPO_FLAGS = ("--gamma", "--lambd", "--value-clip", "--num-critic-only-steps", "--megatron-config-path")


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
    assert value_of(argv, "--num-steps-per-rollout") == "2"  # two optimizer steps each, actor and critic
    assert unlisted_flags(argv) == []
    grpo = dry_run("configs/slime/smoke.env").submit
    assert value_of(grpo, "--advantage-estimator") == "grpo"
    assert not set(PPO_FLAGS) & set(grpo)
    # ALGO in the environment wins over the profile
    assert value_of(dry_run("configs/slime/smoke.env", ALGO="ppo").submit, "--advantage-estimator") == "ppo"


def test_bad_algo_and_ppo_with_checkpoints_are_refused() -> None:
    bad = dry_run("configs/slime/smoke.env", ALGO="gspo")
    assert bad.returncode == 2
    assert "ALGO / ADVANTAGE_ESTIMATOR must be grpo or ppo, got 'gspo'" in bad.stderr
    formal = dry_run("configs/slime/formal.env", ALGO="ppo")
    assert formal.returncode == 2
    assert "ppo runs without SAVE_DIR for now" in formal.stderr


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

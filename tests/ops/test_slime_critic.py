"""PPO under SAVE_DIR on slime: the critic saves beside the actor, in <save>/critic, and round N+1's critic
starts from round N's, while a relaunch resumes its own (shopsimrl/ops/critic.py, docs/slime_handoff.md).

A real (non-dry) launch of scripts/run_shopsimrl_slime.sh with `ray` replaced by a recorder writes the
role file slime gets as --megatron-config-path; slime v0.3.1's own parser, `slime_validate_args` and
`create_training_models` (with `parse_megatron_role_args`) then say what each role loads and saves and
where the run starts (tests/contract/slime_handoff_probe.py, in a subprocess; Megatron stood in there).
The save directories hold only what slime writes: Megatron's tracker and iter_ dirs per role.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ops_helpers import (
    _LAUNCH_VARS,
    ROOT,
    converted_checkpoint,
    model_dir,
    prompt_data,
    stand_in_workspace,
    value_of,
)
from slime_source import requires_slime

from shopsimrl.errors import ConfigError
from shopsimrl.ops.critic import critic_plan, resolved_roles

PROBE = ROOT / "tests/contract/slime_handoff_probe.py"
R0, R1 = "round-000", "round-001"


@pytest.fixture(scope="module")
def launch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The container's /workspace with every input of a formal launch, a stand-in slime and `ray`."""
    root = stand_in_workspace(tmp_path_factory.mktemp("workspace"))
    converted_checkpoint(root, model_dir(root))
    prompt_data(root)
    return root


@pytest.fixture(autouse=True)
def _fresh_checkpoints(launch_dir: Path):
    yield
    for name in ("checkpoints/round-000", "checkpoints/round-001", "ray.log"):
        path = launch_dir / name
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def _launch(launch_dir: Path, group: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    clean.update({"PATH": f"{launch_dir}/bin:{os.environ['PATH']}", "PYTHON": sys.executable, "ALGO": "ppo",
                  "SLIME_DIR": str(launch_dir / "slime"), "MODELS_DIR": str(launch_dir / "models"),
                  "WANDB_GROUP": group, "NCCL_NVLS_ENABLE": "0", **env})  # fmt: skip
    (launch_dir / "ray.log").unlink(missing_ok=True)
    return subprocess.run(["bash", str(ROOT / "scripts/run_shopsimrl_slime.sh"), "configs/slime/formal.env"],
                          cwd=launch_dir, env=clean, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def _train_argv(launch_dir: Path, group: str, keep_as: str, **env: str) -> tuple[list[str], str]:
    """train.py's arguments of a real launch (role file kept under `keep_as`), and its plan's critic line."""
    run = _launch(launch_dir, group, **env)
    assert run.returncode == 0, run.stderr
    submit = (launch_dir / "ray.log").read_text().splitlines()[2].split()  # stop, start, job submit
    argv = submit[submit.index("--") + 3 :]
    roles = Path(value_of(argv, "--megatron-config-path"))
    kept = shutil.copy(roles, launch_dir / keep_as)
    argv[argv.index("--megatron-config-path") + 1] = str(kept)
    critic = next(line for line in run.stderr.splitlines() if line.startswith("run_shopsimrl_slime.sh: critic: "))
    return argv, critic.removeprefix("run_shopsimrl_slime.sh: critic: ")


def _saved(launch_dir: Path, group: str, actor: int | None, critic: int | None) -> Path:
    """What slime's saves leave: Megatron's iter_ dir and tracker, for the actor and (in critic/) the critic."""
    save = launch_dir / "checkpoints" / group
    for root, iteration in ((save, actor), (save / "critic", critic)):
        if iteration is not None:
            (root / f"iter_{iteration:07d}").mkdir(parents=True)
            (root / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    return save


def _probe(tmp_path: Path, launches: dict[str, list[str]], save_data: list[dict] | None = None) -> dict:
    spec = tmp_path / "probe.json"
    spec.write_text(json.dumps({"launches": launches, "save_data": save_data or []}))
    run = subprocess.run([sys.executable, str(PROBE), str(spec)], capture_output=True, text=True, timeout=300,
                         check=False, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])})  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return {name: got["ppo"] for name, got in json.loads(run.stdout.strip().splitlines()[-1]).items()}


@requires_slime
def test_round_000_saves_the_critic_beside_the_actor_and_starts_it_fresh(launch_dir: Path, tmp_path: Path) -> None:
    run_dir = launch_dir / "runs" / R0 / "train"
    argv, line = _train_argv(launch_dir, R0, "r0.yaml")
    save, base = launch_dir / "checkpoints" / R0, launch_dir / "checkpoints/base/Qwen3.5-4B_torch_dist"
    assert (run_dir / "megatron_roles.yaml").read_text() == (launch_dir / "r0.yaml").read_text()
    assert value_of(argv, "--save") == str(save)
    roles = yaml.safe_load((launch_dir / "r0.yaml").read_text())["megatron"]
    assert roles == [{"name": "critic", "role": "critic", "overrides": {"lr": 1.0e-5, "save": f"{save}/critic"}}]
    shipped = [*argv]
    shipped[shipped.index("--megatron-config-path") + 1] = str(ROOT / "configs/slime/ppo_roles.yaml")
    got = _probe(tmp_path, {"ours": argv, "shipped_file": shipped})
    ours = got["ours"]
    assert ours["actor"]["save"] == str(save) and ours["critic"]["save"] == f"{save}/critic"
    assert ours["critic"]["load"] == ours["actor"]["load"] == str(base)  # fresh: the actor's --ref-load weights
    assert ours["critic"]["load_passes_slimes_check"] and ours["critic"]["finetune"] is True
    assert (ours["critic"]["lr"], ours["actor"]["lr"]) == (1e-5, 1e-6)
    assert ours["start_rollout_id"] == 0
    # What the refusal guarded against: the shipped file alone makes slime save both models into one dir.
    assert got["shipped_file"]["critic"]["save"] == got["shipped_file"]["actor"]["save"] == str(save)
    assert line == (f"fresh (the first round): slime builds the critic from --ref-load's weights with a new value "
                    f"head, saves to {save}/critic")  # fmt: skip


@requires_slime
def test_round_001_starts_both_models_from_round_000_and_a_relaunch_resumes_both(launch_dir, tmp_path) -> None:
    r0 = _saved(launch_dir, R0, actor=199, critic=199)
    first, line = _train_argv(launch_dir, R1, "first.yaml", START_LOAD=f"checkpoints/{R0}")
    assert line.startswith(f"hand-off: --load {r0}/critic (iteration 199) as weights only, fresh optimizer")
    start = _probe(tmp_path, {"first": first}, [{"save": str(r0), "rollout_id": 199, "sample_offset": 3200}])["first"]
    assert (start["actor"]["load"], start["critic"]["load"]) == (str(r0), f"{r0}/critic")
    for role in ("actor", "critic"):  # round 000's weights only: fresh optimizer and RNG, Megatron's iteration 0
        assert (start[role]["finetune"], start[role]["no_load_optim"], start[role]["no_load_rng"]) == (True,) * 3
        assert start[role]["load_passes_slimes_check"]
    r1 = launch_dir / "checkpoints" / R1
    assert (start["actor"]["save"], start["critic"]["save"]) == (str(r1), f"{r1}/critic")
    assert (start["start_rollout_id"], start["data_sample_offset"]) == (0, 0)

    _saved(launch_dir, R1, actor=39, critic=39)  # round 001 saved rollout 39, then the node died
    again, line = _train_argv(launch_dir, R1, "again.yaml", START_LOAD=f"checkpoints/{R0}")
    at = first.index("--megatron-config-path") + 1  # the same command; only the role file's content moved on
    assert first[:at] + first[at + 1 :] == again[:at] + again[at + 1 :]
    assert line == f"resume: --load {r1}/critic (iteration 39; model, optimizer, RNG), saves to {r1}/critic"
    resume = _probe(tmp_path, {"again": again}, [{"save": str(r1), "rollout_id": 39, "sample_offset": 640}])["again"]
    assert (resume["actor"]["load"], resume["critic"]["load"]) == (str(r1), f"{r1}/critic")
    for role in ("actor", "critic"):
        assert (resume[role]["finetune"], resume[role]["no_load_optim"], resume[role]["loads_iteration"]) == (False, False, 39)
    assert (resume["start_rollout_id"], resume["data_sample_offset"]) == (40, 640)


@requires_slime
def test_a_previous_round_without_a_critic_starts_a_fresh_one_from_its_final_policy(launch_dir, tmp_path) -> None:
    r0 = _saved(launch_dir, R0, actor=199, critic=None)  # a GRPO round 000
    argv, line = _train_argv(launch_dir, R1, "r1.yaml", START_LOAD=f"checkpoints/{R0}")
    assert line == (f"fresh ({r0}/critic holds no latest_checkpointed_iteration.txt): slime builds the critic from "
                    f"--ref-load's weights with a new value head, saves to {launch_dir}/checkpoints/{R1}/critic")  # fmt: skip
    got = _probe(tmp_path, {"r1": argv})["r1"]
    assert got["critic"]["load"] == got["actor"]["load"] == str(r0) and got["critic"]["load_passes_slimes_check"]
    assert got["critic"]["save"] == f"{launch_dir}/checkpoints/{R1}/critic" and got["start_rollout_id"] == 0


@requires_slime
def test_a_crash_between_the_two_saves(launch_dir, tmp_path) -> None:
    """slime starts a PPO run at the critic's iteration + 1: behind the actor it redoes rollouts, and with
    no critic save at all it could not start, so the launcher refuses before Ray starts."""
    _saved(launch_dir, R0, actor=199, critic=199)
    r1 = _saved(launch_dir, R1, actor=39, critic=19)
    argv, line = _train_argv(launch_dir, R1, "behind.yaml", START_LOAD=f"checkpoints/{R0}")
    assert line.endswith("; slime starts at the critic's rollout 20 (placement_group.py:210-219) with the actor's iteration 39")
    got = _probe(tmp_path, {"behind": argv})["behind"]
    assert (got["actor"]["loads_iteration"], got["critic"]["loads_iteration"], got["start_rollout_id"]) == (39, 19, 20)
    shutil.rmtree(r1 / "critic")
    run = _launch(launch_dir, R1, START_LOAD=f"checkpoints/{R0}")
    assert run.returncode == 2 and not (launch_dir / "ray.log").exists()
    assert (f"error: {r1} holds the actor's iteration 39 but {r1}/critic holds no latest_checkpointed_iteration.txt: "
            "the run died between the actor's and the critic's save") in run.stderr  # fmt: skip
    # A critic saved alone (critic-only rollouts) while the actor has none: slime would restart at rollout 0.
    shutil.rmtree(r1)
    _saved(launch_dir, R1, actor=None, critic=9)
    run = _launch(launch_dir, R1, START_LOAD=f"checkpoints/{R0}")
    assert run.returncode == 2 and not (launch_dir / "ray.log").exists()
    assert (f"error: {r1}/critic holds the critic's iteration 9 but {r1} no actor save: slime restarts this round "
            f"at rollout 0 and would save over it; move {r1}/critic aside to restart the round") in run.stderr  # fmt: skip


def test_the_role_file_may_not_set_what_the_launcher_owns_and_gains_a_critic_entry(tmp_path: Path) -> None:
    plan = critic_plan(save_dir=str(tmp_path / "save"), start_load=None)
    owned = tmp_path / "owned.yaml"
    owned.write_text("megatron:\n  - {role: critic, overrides: {lr: 1.0e-5, save: /elsewhere, finetune: true}}\n")
    with pytest.raises(ConfigError) as err:
        resolved_roles(owned, plan)
    assert err.value.source == str(owned)
    assert err.value.problems == ["the critic entry sets save, finetune: the launcher sets where the critic loads "
                                  "and saves under SAVE_DIR (docs/slime_handoff.md); remove it"]  # fmt: skip
    actor_only = tmp_path / "actor.yaml"
    actor_only.write_text("megatron:\n  - {role: actor, args: {lr: 2.0e-6}}\n")
    assert resolved_roles(actor_only, plan)["megatron"] == [
        {"role": "actor", "args": {"lr": 2.0e-6}},
        {"name": "critic", "role": "critic", "overrides": {"save": str(tmp_path / "save/critic")}}]  # fmt: skip
    flat = tmp_path / "flat.yaml"
    flat.write_text("critic: {lr: 1.0e-5}\n")  # slime's legacy shape, which v0.3.1's parser rejects
    with pytest.raises(ConfigError, match="needs a top-level 'megatron' list"):
        resolved_roles(flat, plan)

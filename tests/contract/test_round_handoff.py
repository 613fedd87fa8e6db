"""Round N+1 starts from round N's final weights, fresh optimizer, rollout 0; its own crash-resume works.

The launcher's dry run (scripts/run_shopsimrl_slime.sh, DRY_RUN=1) gives the train.py argv of round
000 and round 001; slime v0.3.1's own parser and `slime_validate_args`, its checkpoint test and its
data source's save/load then say what each launch loads and where it starts (slime_handoff_probe.py,
in a subprocess). The launch directory is real: Megatron trackers, iter_ dirs, HF saves, and data
positions written by slime's own `RolloutDataSource.save`. docs/slime_handoff.md gives the reasons.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from slime_source import requires_slime

pytestmark = requires_slime

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("slime_handoff_probe.py")
R0, R1 = "qwen35-4b-round-000", "qwen35-4b-round-001"
_HOST_VARS = ("START_LOAD", "ROLLOUT_SEED", "SHOPSIM_CONFIG", "WANDB_GROUP", "USE_WANDB", "WANDB_MODE", "NUM_GPUS",
              "REF_LOAD", "PROMPT_DATA", "MODELS_DIR", "LAUNCH_CONFIG")  # fmt: skip


@pytest.fixture
def launch_dir(tmp_path: Path) -> Path:
    """The container's /workspace: configs/ and the converted base model (Megatron's `release` tracker)."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    base = tmp_path / "checkpoints/base/Qwen3.5-4B_torch_dist"
    (base / "release").mkdir(parents=True)
    (base / "latest_checkpointed_iteration.txt").write_text("release")
    return tmp_path


def _train_argv(launch_dir: Path, group: str, **env: str) -> list[str]:
    """train.py's arguments in the launcher's dry run of the formal profile for `group`."""
    clean = {k: v for k, v in os.environ.items() if k not in _HOST_VARS}
    clean.update({"DRY_RUN": "1", "PYTHON": sys.executable, "WANDB_GROUP": group, **env})
    run = subprocess.run(["bash", str(ROOT / "scripts/run_shopsimrl_slime.sh"), "configs/slime/formal.env"],
                         cwd=launch_dir, env=clean, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    submit = shlex.split(run.stdout.strip().splitlines()[-1])  # ray job submit ... -- PYTHON train.py ARGS
    return submit[submit.index("--") + 3 :]


def _probe(tmp_path: Path, launches: dict[str, list[str]], save_data: list[dict] | None = None) -> dict:
    spec = tmp_path / "probe.json"
    spec.write_text(json.dumps({"launches": launches, "save_data": save_data or []}))
    run = subprocess.run([sys.executable, str(PROBE), str(spec)], capture_output=True, text=True, timeout=300,
                         check=False, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])})  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _finish_round(launch_dir: Path, group: str, last_rollout: int) -> Path:
    """What slime leaves after a round: tracker, iter_ dir, the HF copy (data position: via the probe)."""
    save = launch_dir / "checkpoints" / group
    (save / f"iter_{last_rollout:07d}").mkdir(parents=True)
    (save / "latest_checkpointed_iteration.txt").write_text(str(last_rollout))
    (save / "hf" / f"rollout-{last_rollout}").mkdir(parents=True)
    return save


def test_round_000_starts_from_the_base_model_at_rollout_0(launch_dir: Path, tmp_path: Path) -> None:
    argv = _train_argv(launch_dir, R0)
    got = _probe(tmp_path, {"round-000": argv})["round-000"]
    base = str(launch_dir / "checkpoints/base/Qwen3.5-4B_torch_dist")
    assert got["load"] == got["ref_load"] == base  # slime: --load holds no tracker -> load = ref_load
    assert (got["finetune"], got["no_load_optim"], got["no_load_rng"]) == (True, True, True)
    assert (got["start_rollout_id"], got["rollouts_trained"], got["data_sample_offset"]) == (0, 200, 0)
    assert got["save"] == str(launch_dir / "checkpoints" / R0)


def test_round_001_starts_from_round_000s_final_weights_with_a_fresh_optimizer(launch_dir, tmp_path) -> None:
    r0 = _finish_round(launch_dir, R0, 199)
    argv = _train_argv(launch_dir, R1, START_LOAD=f"checkpoints/{R0}", ROLLOUT_SEED="1001")
    assert "--finetune" not in argv and "--start-rollout-id" not in argv  # both would break the resume below
    got = _probe(tmp_path, {"round-001": argv}, [{"save": str(r0), "rollout_id": 199, "sample_offset": 3200}])
    got = got["round-001"]
    assert got["ref_load"] == got["load"] == str(r0)  # weights from round 000's iteration 199
    assert got["load_is_megatron"] and got["loads_iteration"] == 199
    assert (got["finetune"], got["no_load_optim"], got["no_load_rng"]) == (True, True, True)
    assert got["start_rollout_id_after_validate"] == 0
    assert (got["start_rollout_id"], got["rollouts_trained"], got["rollout_manager_step"]) == (0, 200, 0)
    assert got["data_sample_offset"] == 0  # round 000's data position (3200) is not carried over
    assert got["save"] == str(launch_dir / "checkpoints" / R1)  # round 001's saves never mix into round 000's
    assert got["reference_model"] is False  # KL_LOSS_COEF=0: no reference copy, the hand-off as before (F8)


def test_a_crash_inside_round_001_resumes_round_001_not_round_000(launch_dir, tmp_path) -> None:
    _finish_round(launch_dir, R0, 199)
    first = _train_argv(launch_dir, R1, START_LOAD=f"checkpoints/{R0}")
    r1 = _finish_round(launch_dir, R1, 39)  # round 001 saved rollout 39, then the node died
    again = _train_argv(launch_dir, R1, START_LOAD=f"checkpoints/{R0}")
    assert again == first  # the same command: the round runner needs no resume logic of its own
    got = _probe(tmp_path, {"relaunch": again}, [{"save": str(r1), "rollout_id": 39, "sample_offset": 640}])
    got = got["relaunch"]
    assert got["load"] == str(r1) and got["loads_iteration"] == 39
    assert (got["finetune"], got["no_load_optim"], got["no_load_rng"]) == (False, False, False)  # optimizer, RNG too
    assert got["start_rollout_id_after_validate"] is None
    assert (got["start_rollout_id"], got["rollouts_trained"], got["data_sample_offset"]) == (40, 160, 640)
    # Our hooks in the RolloutManager number the first resumed rollout as the actor does (F5).
    assert got["rollout_manager_step"] == 40
    assert got["ref_load"] == str(launch_dir / "checkpoints" / R0)


def test_the_traps_the_handoff_avoids(launch_dir, tmp_path) -> None:
    """Round 001 pointed at round 000's dir trains 0 steps; --finetune there starts at rollout 1."""
    r0 = _finish_round(launch_dir, R0, 199)
    argv = _train_argv(launch_dir, R1, START_LOAD=f"checkpoints/{R0}")
    at = argv.index("--load")
    same_dir = [*argv[:at], "--load", str(r0), "--save", str(r0), *argv[at + 4 :]]
    assert argv[at + 2] == "--save"
    finetune = [*same_dir, "--finetune", "--no-load-optim", "--no-load-rng"]
    got = _probe(tmp_path, {"same_dir": same_dir, "finetune": finetune},
                 [{"save": str(r0), "rollout_id": 199, "sample_offset": 3200}])  # fmt: skip
    trap = got["same_dir"]
    assert (trap["start_rollout_id"], trap["num_rollout"], trap["rollouts_trained"]) == (200, 200, 0)
    assert trap["data_sample_offset"] == 3200 and trap["no_load_optim"] is False  # a full resume of round 000
    skip = got["finetune"]
    assert (skip["start_rollout_id"], skip["rollouts_trained"]) == (1, 199)  # rollout 0 never runs


def test_the_launcher_refuses_start_load_equal_to_its_own_save_dir(launch_dir) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in _HOST_VARS}
    clean.update({"DRY_RUN": "1", "PYTHON": sys.executable, "WANDB_GROUP": R1, "START_LOAD": f"checkpoints/{R1}/"})
    run = subprocess.run(["bash", str(ROOT / "scripts/run_shopsimrl_slime.sh"), "configs/slime/formal.env"],
                         cwd=launch_dir, env=clean, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert run.returncode == 2
    assert run.stdout == ""
    assert (f"error: START_LOAD {launch_dir}/checkpoints/{R1}/ is this round's own save dir: slime would resume it "
            "at its iteration + 1 and train 0 new steps") in run.stderr  # fmt: skip

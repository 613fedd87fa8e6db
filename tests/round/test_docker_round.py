"""The docker backend of the round runner, with a stand-in for `docker compose` (a real subprocess that
records what each service was given and writes only what the real service writes under slime): the same
round_state.json / next_round / report as the local backend, the round's inputs in each service's
environment, START_LOAD for the next round, a failed service named with its log, resume."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from round_helpers import SKILLBANK

from shopsimrl.errors import rerun_command
from shopsimrl.ops.critic import critic_plan
from shopsimrl.round import load_round_config, round_config_from_mapping, run_round
from shopsimrl.round.backends import DockerBackend
from shopsimrl.round.chain import run_rounds
from shopsimrl.round.state import RoundError
from shopsimrl.tracking import WandbSettings

# Args: run --rm SERVICE. Appends {service, env} to $CALLS, fails when SERVICE is $FAIL_SERVICE, and
# writes only files the real service writes under slime (each says where it comes from there; what the
# real services write beyond these is left out). Run by this interpreter: the train stand-in calls our
# real rollout-log hook, as slime's RolloutManager does.
_COMPOSE = r"""
import json, os, shutil, sys
from pathlib import Path
from types import SimpleNamespace
import yaml
if "config" in sys.argv[1:]:  # `docker compose config --format json`: the services and their images
    print(json.dumps({"services": {s: {"image": "shopsimrl-train:0.1.0"} for s in ("train", "analyze", "gate")}}))
    sys.exit(0)
service = sys.argv[-1]
keys = ("WANDB_GROUP", "USE_WANDB", "WANDB_MODE", "START_LOAD", "ROLLOUT_SEED", "SHOPSIM_CONFIG", "ANALYZE_CONFIG",
        "ANALYZE_CHECKPOINT", "GATE_CONFIG", "GATE_CHECKPOINT", "HOST_UID")
with open(os.environ["CALLS"], "a") as f:
    f.write(json.dumps({"service": service, "argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in keys}}) + "\n")
print(f"service {service} says hello")
if service == os.environ.get("FAIL_SERVICE"):
    sys.exit(3)
group = os.environ["WANDB_GROUP"]
runs, ckpt = Path(os.environ["RUNS"]) / group, Path(os.environ["CKPTS"]) / group
if service == "train":
    from shopsimrl.contract import Arm
    from shopsimrl.metrics.synthetic import Traj, make_group
    from shopsimrl.slime_metrics import enrich_rollout_metrics
    # runs/<group>/train/metrics.jsonl: slime's RolloutManager calls our rollout-log hook once per rollout
    # (slime/ray/rollout.py _log_rollout_data) with the plugin options --custom-config-path set on args.
    with open(os.environ["SHOPSIM_CONFIG"]) as f:
        args = SimpleNamespace(**yaml.safe_load(f))
    for rollout_id in range(int(os.environ.get("ROLLOUTS", "20"))):
        samples = make_group(1, [Traj(1.0), Traj(0.0), Traj(0.5), Traj(0.0)], arm=Arm.SKILL_FREE)
        enrich_rollout_metrics(rollout_id, args, samples, {}, 1.0)
    for n in (9, 19):  # --save-interval 10 of 20 rollouts
        # checkpoints/<group>/iter_<n>/: Megatron's save_checkpoint, called by slime's actor save_model.
        (ckpt / f"iter_{n:07d}").mkdir(parents=True, exist_ok=True)
        (ckpt / f"iter_{n:07d}" / "common.pt").write_bytes(b"m" * n)
        # checkpoints/<group>/hf/rollout-<n>/: slime's --save-hf exporter (hf_checkpoint_saver.py): the
        # base model's config, the shards, and the index last.
        hf = ckpt / "hf" / f"rollout-{n}"
        hf.mkdir(parents=True, exist_ok=True)
        (hf / "config.json").write_text("{}")
        shards = {"model-00001-of-00002.safetensors": b"w" * n, "model-00002-of-00002.safetensors": b"v" * n}
        for name, data in shards.items():
            (hf / name).write_bytes(data)
        weight_map = {"embed.weight": "model-00001-of-00002.safetensors", "head.weight": "model-00002-of-00002.safetensors"}
        if n == 19 and os.environ.get("CUT_FINAL_EXPORT"):  # the node died before the index was written
            continue
        (hf / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        # checkpoints/<group>/latest_checkpointed_iteration.txt: Megatron's tracker, after each save.
        (ckpt / "latest_checkpointed_iteration.txt").write_text(str(n))
        if os.environ.get("ALGO") == "ppo":  # .env's ALGO reaches the train service (compose env_file)
            # checkpoints/<group>/critic/: the critic's save_model after the actor's (train.py:75-78), Megatron's
            # save_checkpoint into the critic role's --save; no HF copy (actor.py:564: --save-hf is the actor's).
            (ckpt / "critic" / f"iter_{n:07d}").mkdir(parents=True, exist_ok=True)
            (ckpt / "critic" / f"iter_{n:07d}" / "common.pt").write_bytes(b"c" * n)
            (ckpt / "critic" / "latest_checkpointed_iteration.txt").write_text(str(n))
elif service == "analyze":
    # runs/<group>/analysis/*: `shopsimrl training analyze` (shopsimrl/analyst/stage.py) in the tools image.
    d = runs / "analysis"; d.mkdir(parents=True, exist_ok=True)
    for name in ("analysis_summary.json", "candidate_pool.json"):
        (d / name).write_text("{}")
    (d / "proposal_ledger.jsonl").write_text("")
elif service == "gate":
    # runs/<group>/gate/*: `shopsimrl training online-gate` (shopsimrl/gate/stage.py).
    d = runs / "gate"; d.mkdir(parents=True, exist_ok=True)
    (d / "contributions.json").write_text("{}")
    shutil.copy(os.environ["SKILLBANK"], d / "selected_skillbank.json")
    (d / "proposal_ledger.jsonl").write_text("")
"""


@pytest.fixture(autouse=True)
def _in_checkout(tmp_path, monkeypatch):
    """A docker round's directories are relative to the checkout (the services see it at /workspace)."""
    monkeypatch.chdir(tmp_path)


def _docker_round(tmp_path: Path, **train: str) -> dict:
    return {"schema_version": 1,
            "round": {"group": "gpu-round-000", "backend": "docker", "runs_root": "runs",
                      "checkpoints_root": "checkpoints"},
            "train": {"service": "train", "shopsim": {"skillbank": str(SKILLBANK), "max_turns": 12}, **train},
            "analysis": {"lessons": {"backend": "rules"}, "trial": {"generator": "sglang", "tokenizer": "/models/x",
                                                                   "sglang_url": "http://127.0.0.1:30000"}},
            "gate": {"generator": {"backend": "sglang", "url": "http://127.0.0.1:30000"},
                     "design": {"tasks": 20, "replicates": 1}}}  # fmt: skip


@pytest.fixture
def compose(tmp_path, monkeypatch):
    program = tmp_path / "fake-compose"
    program.write_text(f"#!{sys.executable}\n{_COMPOSE}")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls.jsonl"
    for name, value in {"CALLS": str(calls), "RUNS": str(tmp_path / "runs"), "CKPTS": str(tmp_path / "checkpoints"),
                        "SKILLBANK": str(SKILLBANK)}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    return f"HOST_UID=1234 {program} --env-file docker/versions.env", calls


def _calls(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_docker_rounds_hand_on_the_slime_save_and_the_gate_skillbank(tmp_path, compose):
    command, calls = compose
    first = round_config_from_mapping(_docker_round(tmp_path), "test")
    settings = lambda config: WandbSettings(enabled=True, group=config.group)  # noqa: E731
    results, report = run_rounds(first, count=2, settings_for=settings, backend=DockerBackend(compose=command),
                                 echo=lambda _: None)  # fmt: skip
    seen = _calls(calls)
    assert [c["service"] for c in seen] == ["train", "analyze", "gate"] * 2
    assert all(c["argv"][-3:] == ["run", "--rm", c["service"]] and c["env"]["HOST_UID"] == "1234" for c in seen)
    runs, ckpts = Path("runs"), Path("checkpoints")
    r0, r1 = seen[0]["env"], seen[3]["env"]
    assert (r0["WANDB_GROUP"], r1["WANDB_GROUP"]) == ("gpu-round-000", "gpu-round-001")
    assert (r0["START_LOAD"], r1["START_LOAD"]) == ("", str(ckpts / "gpu-round-000"))
    assert r0["ROLLOUT_SEED"] != r1["ROLLOUT_SEED"] and r0["WANDB_MODE"] == "offline" and r0["USE_WANDB"] == "1"
    assert r1["SHOPSIM_CONFIG"] == str(runs / "gpu-round-001" / "shopsim_config.yaml")
    options = json.loads(json.dumps(__import__("yaml").safe_load(Path(r1["SHOPSIM_CONFIG"]).read_text())))
    assert options["shopsim"]["skillbank"] == str(runs / "gpu-round-000" / "gate" / "selected_skillbank.json")
    assert options["shopsim"]["round_seed"] == results[1][0].seeds.curriculum
    assert seen[4]["env"]["ANALYZE_CHECKPOINT"] == str(ckpts / "gpu-round-001" / "hf" / "rollout-19")
    gate_config = __import__("yaml").safe_load(Path(seen[5]["env"]["GATE_CONFIG"]).read_text())
    assert gate_config["inputs"]["checkpoint"] == seen[5]["env"]["GATE_CHECKPOINT"]
    assert gate_config["design"]["seed"] == results[1][0].seeds.gate and gate_config["round"] == "gpu-round-001"

    # train/metrics.jsonl is slime's rollout-log hook's: one row per rollout, rollout/step from 0.
    rows = [json.loads(line) for line in (runs / "gpu-round-000" / "train" / "metrics.jsonl").read_text().splitlines()]
    assert [row["rollout/step"] for row in rows] == list(range(20))
    assert rows[0]["rollout/shopsim/reward_mean"] == 0.375
    for group in ("gpu-round-000", "gpu-round-001"):
        state = json.loads((runs / group / "round_state.json").read_text())["stages"]
        assert {s: v["status"] for s, v in state.items()} == dict.fromkeys(("train", "analysis", "gate"), "finished")
        assert state["train"]["save_dir"] == str(ckpts / group)
        assert (runs / group / "round_report.md").is_file() and (runs / group / "logs" / "train.log").is_file()
        # Only what a later stage or round reads stays: START_LOAD's iteration and the served HF save.
        assert sorted(p.name for p in (ckpts / group).iterdir()) == ["hf", "iter_0000019", "latest_checkpointed_iteration.txt"]
        assert [p.name for p in (ckpts / group / "hf").iterdir()] == ["rollout-19"]
    nxt = load_round_config(runs / "gpu-round-001" / "next_round.yaml")
    assert nxt.round.start_load == str(ckpts / "gpu-round-001") and nxt.tracking.enabled is True
    assert "make round RUNNER=docker" in (runs / "gpu-round-000" / "next_round.yaml").read_text()
    assert report == runs / "gpu-rounds" / "rounds_report.md" and report.is_file()

    again, _ = run_rounds(first, count=2, settings_for=settings, backend=DockerBackend(compose=command),
                          echo=lambda _: None)  # fmt: skip
    assert [r.ran for _, r in again] == [[], []] and len(_calls(calls)) == 6


def test_ppo_rounds_hand_on_the_critic_with_the_actor(tmp_path, compose, monkeypatch):
    """START_LOAD names round N's save dir; its critic/ is what round N+1's critic loads (shopsimrl/ops/critic.py)."""
    command, calls = compose
    monkeypatch.setenv("ALGO", "ppo")
    first = round_config_from_mapping(_docker_round(tmp_path), "test")
    settings = lambda config: WandbSettings(enabled=False, group=config.group)  # noqa: E731
    run_rounds(first, count=2, settings_for=settings, backend=DockerBackend(compose=command), echo=lambda _: None)
    ckpts = Path("checkpoints").resolve()
    for group in ("gpu-round-000", "gpu-round-001"):
        # pruned like the actor: the tracker's iteration stays, the earlier one goes
        assert sorted(p.name for p in (ckpts / group / "critic").iterdir()) == [
            "iter_0000019", "latest_checkpointed_iteration.txt"]  # fmt: skip
    assert _calls(calls)[3]["env"]["START_LOAD"] == str(Path("checkpoints") / "gpu-round-000")
    nxt = load_round_config(Path("runs") / "gpu-round-001" / "next_round.yaml")
    plan = critic_plan(save_dir=str(ckpts / nxt.group), start_load=str(Path(nxt.round.start_load).resolve()))
    assert (plan.load, plan.save) == (str(ckpts / "gpu-round-001" / "critic"), str(ckpts / "gpu-round-002" / "critic"))
    assert plan.line.startswith(f"hand-off: --load {ckpts}/gpu-round-001/critic (iteration 19) as weights only")


def test_a_training_that_logged_no_rollout_finishes_its_round_and_a_rerun_is_not_refused(tmp_path, compose, monkeypatch):
    """A relaunch whose save dir already holds the last save trains nothing (slime's train.py loops over
    range(start_rollout_id, num_rollout)), so no rollout-log hook runs and no metrics.jsonl is written."""
    command, calls = compose
    config = round_config_from_mapping(_docker_round(tmp_path), "test")
    monkeypatch.setenv("ROLLOUTS", "0")
    result = run_round(config, settings=WandbSettings(), backend=DockerBackend(compose=command), echo=lambda _: None)
    assert result.ran == ["train", "analysis", "gate"] and result.report is not None and result.report.is_file()
    train = json.loads((config.round_dir / "round_state.json").read_text())["stages"]["train"]
    assert set(train["outputs"]) == {"checkpoint"}  # only what exists is recorded
    again = run_round(config, settings=WandbSettings(), backend=DockerBackend(compose=command), echo=lambda _: None)
    assert again.ran == [] and len(_calls(calls)) == 3


def test_a_training_that_left_an_incomplete_final_export_stops_the_round_naming_it_and_the_log(tmp_path, compose,
                                                                                                  monkeypatch):
    """slime's relaunch after a crash during the final export trains nothing and exits 0 (its tracker is
    already at the last rollout): the round stops with the save and the log named, not a traceback."""
    command, calls = compose
    config = round_config_from_mapping(_docker_round(tmp_path), "test")
    monkeypatch.setenv("CUT_FINAL_EXPORT", "1")
    with pytest.raises(RoundError) as excinfo:
        run_round(config, settings=WandbSettings(), backend=DockerBackend(compose=command), echo=lambda _: None)
    final = Path("checkpoints") / "gpu-round-000" / "hf" / "rollout-19"
    log = Path("runs") / "gpu-round-000" / "logs" / "train.log"
    assert str(excinfo.value).startswith(f"train: {final}: the newest Hugging Face save is incomplete ")
    assert str(excinfo.value).endswith(f"; the training's output is in {log}")
    assert [c["service"] for c in _calls(calls)] == ["train"]


def test_keep_saves_all_prunes_nothing(tmp_path, compose):
    command, _ = compose
    config = round_config_from_mapping(_docker_round(tmp_path, keep_saves="all"), "test")
    run_round(config, settings=WandbSettings(), backend=DockerBackend(compose=command), echo=lambda _: None)
    save = Path("checkpoints") / "gpu-round-000"
    assert sorted(p.name for p in (save / "hf").iterdir()) == ["rollout-19", "rollout-9"]
    assert (save / "iter_0000009").is_dir()


def test_a_failed_service_is_named_with_its_log_and_the_round_resumes_from_it(tmp_path, compose, monkeypatch, capsys):
    command, calls = compose
    config = round_config_from_mapping(_docker_round(tmp_path), "test")
    monkeypatch.setenv("FAIL_SERVICE", "analyze")
    with pytest.raises(RoundError) as excinfo:
        run_round(config, settings=WandbSettings(), backend=DockerBackend(compose=command), echo=lambda _: None)
    log = Path("runs") / "gpu-round-000" / "logs" / "analysis.log"
    assert str(excinfo.value) == (f"analysis: compose service 'analyze' exited 3; its output is in {log}; "
                                  f"retry: {rerun_command()} (finished stages are not re-run)")  # fmt: skip
    assert "service analyze says hello" in log.read_text() and "service analyze says hello" in capsys.readouterr().out
    monkeypatch.delenv("FAIL_SERVICE")
    result = run_round(config, settings=WandbSettings(), backend=DockerBackend(compose=command), echo=lambda _: None)
    assert result.ran == ["analysis", "gate"]
    assert [c["service"] for c in _calls(calls)] == ["train", "analyze", "analyze", "gate"]


def test_a_dry_run_prints_every_round_and_writes_nothing(tmp_path):
    first = round_config_from_mapping(_docker_round(tmp_path), "test")
    lines: list[str] = []
    run_rounds(first, count=2, settings_for=lambda c: WandbSettings(group=c.group),
               backend=DockerBackend(compose="docker compose", dry_run=True), echo=lines.append)  # fmt: skip
    trains = [line for line in lines if ": train: " in line]
    assert len(trains) == 2 and trains[1].endswith("docker compose run --rm train")
    assert f"START_LOAD={Path('checkpoints') / 'gpu-round-000'}" in trains[1] and "WANDB_MODE=offline" in trains[1]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "checkpoints").exists()
    assert os.listdir(tmp_path) == []

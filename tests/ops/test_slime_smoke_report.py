"""The slime smoke's report from slime's own log lines (shopsimrl/ops/slime_log.py, slime_smoke.py).

The reference is slime v0.3.1 itself: each message is built with the f-string found at slime's call
site (asserted present in its source), and each line is formatted by the handler slime's own
`configure_logger` installs, in a subprocess (tests/ops/slime_log_emitter.py). Ray's actor prefix is
added as `ray job submit` streams it. The launcher runs for real with `ray` replaced by a stand-in that
prints such a log for `job submit`.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ops_helpers import _LAUNCH_VARS, ROOT, converted_checkpoint, model_dir, prompt_data, stand_in_workspace
from slime_source import SLIME_SRC, requires_slime

from shopsimrl.metrics import names as m
from shopsimrl.ops.slime_log import literal_dict, metric_rows, parse_slime_log
from shopsimrl.ops.slime_smoke import evaluate_slime_smoke

pytestmark = requires_slime
EMITTER = Path(__file__).with_name("slime_log_emitter.py")
RAY_PREFIX = "(MegatronTrainRayActor pid=4242) "
SUMMARY = ("run_shopsimrl_slime.sh: mode=smoke config=configs/slime/smoke-ppo.env group=g-smoke "
           "run_dir=/w/runs/g-smoke/train groups=1x4 rollouts=1 steps_per_rollout=2 gpus=1 use_wandb=0")  # fmt: skip
# slime's call sites: (file, logger name, the logged f-string exactly as slime's source has it)
SITES = {
    "step": ("slime/backends/megatron_utils/model.py", "slime.backends.megatron_utils.model",
             'logger.info(f"{role_tag}step {accumulated_step_id}: {log_dict}")'),
    "rollout": ("slime/backends/megatron_utils/data.py", "slime.backends.megatron_utils.data",
                'logger.info(f"{metric_name} {rollout_id}: {reduced_log_dict}")'),
    "perf": ("slime/ray/rollout.py", "slime.ray.rollout", 'logger.info(f"perf {rollout_id}: {log_dict}")'),
}  # fmt: skip


def _site(kind: str) -> tuple[str, int, str]:
    relative, name, call = SITES[kind]
    path = SLIME_SRC / relative
    numbers = [i for i, line in enumerate(path.read_text().splitlines(), 1) if line.strip() == call]
    assert len(numbers) == 1, f"{relative}: {call} found at {numbers}"
    return str(path), numbers[0], name


# The messages, with slime's own f-strings (each asserted at its call site by _site).
def _step(role_tag: str, accumulated_step_id: int, log_dict: dict) -> tuple[str, str]:
    return "step", f"{role_tag}step {accumulated_step_id}: {log_dict}"


def _rollout(metric_name: str, rollout_id: int, reduced_log_dict: dict) -> tuple[str, str]:
    return "rollout", f"{metric_name} {rollout_id}: {reduced_log_dict}"


def _perf(rollout_id: int, log_dict: dict) -> tuple[str, str]:
    return "perf", f"perf {rollout_id}: {log_dict}"


def slime_lines(tmp_path: Path, messages: list[tuple[str, str]]) -> list[str]:
    """The lines slime's logging writes for `messages` (kind, message), in order."""
    spec = tmp_path / "records.json"
    spec.write_text(json.dumps([[*_site(kind)[:2], _site(kind)[2], message] for kind, message in messages]))
    run = subprocess.run([sys.executable, str(EMITTER), str(spec)], capture_output=True, text=True, timeout=120,
                         check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == len(messages)
    return lines


def _actor(step: int, loss: float = 0.25) -> dict:
    return {"train/loss": loss, "train/pg_loss": loss - 0.05, "train/entropy_loss": 0.9, "train/pg_clipfrac": 0.0,
            "train/ppo_kl": 0.0, "train/grad_norm": 1.5, "train/lr-pg_0": 1e-6, "train/global_batch_size": 4,
            "train/step": step}  # fmt: skip


def _critic(step: int, value_loss: float = 0.04) -> dict:
    return {"train/critic-value_loss": value_loss, "train/critic-value_clipfrac": 0.0, "train/critic-grad_norm": 0.7,
            "train/critic-lr-pg_0": 1e-5, "train/critic-global_batch_size": 4, "train/step": step}  # fmt: skip


def _rollout_side(rollout_id: int, zero_std_group_rate: float) -> dict:
    """The rollout side's dict: our merged rollout/shopsim/* (rollout_extra_metrics), then slime's own."""
    return {m.Q.name: 0.5, m.REWARD_MEAN.name: 0.25, m.SKILL_FREE_GROUP_RATE.name: 1.0, m.TRAIN_GROUP_COUNT.name: 1,
            m.ZERO_STD_GROUP_RATE.name: zero_std_group_rate, m.ROLLOUT_RESPONSE_LEN_MEAN.name: 120.5,
            m.ROLLOUT_RESPONSE_LEN_MEDIAN.name: 118.0, m.ROLLOUT_RESPONSE_LEN_MAX.name: 180,
            m.ROLLOUT_RESPONSE_LEN_MIN.name: 64, m.ROLLOUT_TRUNCATED_RATIO.name: 0.0,
            m.PERF_ROLLOUT_TIME.name: 41.2}  # fmt: skip


def _train_side(rollout_id: int) -> dict:
    """The actor's `rollout` line under PPO: slime's rollout data and our rollout/ppo/* spreads."""
    return {"rollout/raw_reward": 0.25, "rollout/values": 0.11, "rollout/returns": 0.25, "rollout/advantages": 0.0,
            m.PPO_VALUES_STD.name: 0.02, m.PPO_RETURNS_STD.name: 0.4330127018922193,
            m.PPO_ADVANTAGES_STD.name: 1.0, m.PPO_EXPLAINED_VARIANCE.name: -0.125}  # fmt: skip


def ppo_messages(*, critic_losses: tuple[float, ...] = (0.04, 0.03)) -> list[tuple[str, str]]:
    """One rollout of the PPO micro smoke (smoke-ppo.env: 2 steps per rollout), in slime's order."""
    out = [_perf(0, _rollout_side(0, zero_std_group_rate=0.0)), _rollout("rollout", 0, _train_side(0))]
    out += [_step("critic-", i, _critic(i, loss)) for i, loss in enumerate(critic_losses)]
    return out + [_step("", 0, _actor(0)), _step("", 1, _actor(1, 0.2))]


def _write(tmp_path: Path, lines: list[str], *, prefix: str = RAY_PREFIX, newline: bool = True) -> Path:
    path = tmp_path / "slime_job.log"
    body = [SUMMARY, "Job submission server address: http://127.0.0.1:8265", *(prefix + line for line in lines)]
    path.write_text("\n".join(body) + ("\n" if newline else ""))
    return path


def _status(report) -> dict[str, tuple[bool, str]]:
    return {c.name: (c.required, c.status.value) for c in report.criteria}


def _evidence(report) -> dict[str, str]:
    return {c.name: c.evidence for c in report.criteria}


def test_the_call_sites_are_slimes_own():
    assert [_site(kind)[1] > 0 for kind in SITES] == [True, True, True]
    source = (SLIME_SRC / "slime/utils/logging_utils.py").read_text()
    assert 'format=f"[%(asctime)s{prefix}] %(filename)s:%(lineno)d - %(message)s"' in source


def test_a_passing_ppo_log(tmp_path: Path):
    report = evaluate_slime_smoke(_write(tmp_path, slime_lines(tmp_path, ppo_messages())), ppo=True)
    assert report.passed, report.to_dict()
    assert _status(report) == {
        "startup_summary": (True, "pass"),
        "optimizer_step_completed": (True, "pass"),
        "valid_group_every_step": (True, "pass"),
        "slime_native_rollout_keys": (True, "pass"),
        "shopsim_rollout_keys": (True, "pass"),
        "first_batch_keys": (True, "pass"),
        "in_group_reward_difference": (False, "pass"),
        "ppo_values_returns_advantages": (True, "pass"),
        "ppo_actor_loss_finite": (True, "pass"),
        "ppo_critic_loss_finite": (True, "pass"),
        "ppo_actor_optimizer_steps": (True, "pass"),
        "ppo_critic_optimizer_steps": (True, "pass"),
        "slime_log_readable": (True, "pass"),
    }
    evidence = _evidence(report)
    assert evidence["startup_summary"] == SUMMARY
    assert evidence["ppo_critic_optimizer_steps"] == "2 step(s) (need >= 2): train/step = [0, 1]"
    assert evidence["ppo_critic_loss_finite"] == ("train/step=0: train/critic-value_loss=0.04 | "
                                                  "train/step=1: train/critic-value_loss=0.03")  # fmt: skip
    assert evidence["slime_log_readable"] == "6 metric line(s) of slime among 8 line(s) of slime_job.log"
    observations = report.observations
    assert observations["explained_variance"]["0"] == pytest.approx(-0.125, abs=1e-12)
    assert observations["explained_variance_negative_steps"] == ["0"]  # reported, never judged
    assert observations["reward_spread"]["0"]["returns_std"] == pytest.approx(0.4330127018922193, rel=1e-12)
    assert observations["reward_spread"]["0"]["accepted_groups"] == 1


def test_a_nan_critic_loss_and_one_critic_step_fail(tmp_path: Path):
    lines = slime_lines(tmp_path, ppo_messages(critic_losses=(math.nan,)))
    assert "'train/critic-value_loss': nan" in lines[2]  # Python's repr, as slime's f-string writes it
    report = evaluate_slime_smoke(_write(tmp_path, lines), ppo=True)
    assert not report.passed
    status = _status(report)
    assert status["ppo_critic_loss_finite"] == status["ppo_critic_optimizer_steps"] == (True, "fail")
    assert status["ppo_actor_loss_finite"] == (True, "pass") and status["slime_log_readable"] == (True, "pass")
    evidence = _evidence(report)
    assert evidence["ppo_critic_loss_finite"] == "critic row train/step=0: not finite: train/critic-value_loss=nan"
    assert evidence["ppo_critic_optimizer_steps"] == "1 step(s) (need >= 2): train/step = [0]"


def test_a_grpo_log(tmp_path: Path):
    messages = [_perf(0, _rollout_side(0, zero_std_group_rate=1.0)), _rollout("rollout", 0, {"rollout/raw_reward": 0.0}),
                _step("", 0, _actor(0))]  # fmt: skip
    report = evaluate_slime_smoke(_write(tmp_path, slime_lines(tmp_path, messages)), ppo=False)
    assert report.passed, report.to_dict()
    assert report.observations is None
    status = _status(report)
    assert list(status)[:3] == ["startup_summary", "optimizer_step_completed", "actor_loss_finite"]
    assert status["actor_loss_finite"] == (True, "pass")
    assert not any(name.startswith("ppo_") for name in status)
    assert status["in_group_reward_difference"] == (False, "warn")  # every group's rewards were equal
    assert _evidence(report)["optimizer_step_completed"] == "1 optimizer step(s): train/step = [0]"
    rows = metric_rows(parse_slime_log(_write(tmp_path, slime_lines(tmp_path, messages)).read_text()))
    assert rows[0][m.ROLLOUT_STEP.name] == 0 and rows[0]["rollout/raw_reward"] == 0.0  # both lines, one row
    assert rows[0][m.PERF_ROLLOUT_TIME.name] == pytest.approx(41.2, abs=1e-12)


def test_a_grpo_log_without_an_actor_step_or_summary_fails(tmp_path: Path):
    lines = slime_lines(tmp_path, [_perf(0, _rollout_side(0, zero_std_group_rate=1.0))])
    path = tmp_path / "slime_job.log"
    path.write_text("\n".join(lines) + "\n")
    report = evaluate_slime_smoke(path, ppo=False)
    assert not report.passed
    evidence = _evidence(report)
    assert evidence["startup_summary"] == f"no line starting 'run_shopsimrl_slime.sh: mode=' in {path}"
    assert evidence["optimizer_step_completed"] == "0 optimizer step(s): train/step = []"
    assert evidence["actor_loss_finite"] == "no row in slime_job.log"


def test_a_torn_last_line_is_reported_with_its_line_number(tmp_path: Path):
    lines = slime_lines(tmp_path, ppo_messages())
    torn = lines[:-1] + [lines[-1][: lines[-1].index("'train/ppo_kl'")]]  # the job died mid-line
    report = evaluate_slime_smoke(_write(tmp_path, torn, newline=False), ppo=True)
    assert not report.passed
    assert _status(report)["slime_log_readable"] == (True, "fail")
    evidence = _evidence(report)["slime_log_readable"]
    assert evidence.startswith(f"line 8: model.py:{_site('step')[1]} step 1: not a Python literal (")
    assert evidence.endswith("(the last line, without a newline: torn)")
    assert _evidence(report)["ppo_actor_optimizer_steps"] == "1 step(s) (need >= 2): train/step = [0]"


def test_ray_prefixes_colours_and_other_lines(tmp_path: Path):
    lines = slime_lines(tmp_path, ppo_messages())
    coloured = "\x1b[36m(MegatronTrainRayActor pid=7, ip=10.0.0.1)\x1b[0m "
    text = "\n".join([SUMMARY, lines[0], *(coloured + line for line in lines[1:]),
                      RAY_PREFIX + "[2025-01-01 00:00:00] model.py:776 - Reset optimizer states",
                      "step 3: {'train/step': 3}"]) + "\n"  # fmt: skip
    log = parse_slime_log(text)
    assert [(x.kind, x.index) for x in log.metric_lines] == [
        ("perf", 0), ("rollout", 0), ("critic-step", 0), ("critic-step", 1), ("step", 0), ("step", 1)]
    assert log.problems == [] and log.summary_line == SUMMARY


def test_a_malformed_metric_line_is_a_problem_not_a_silent_drop(tmp_path: Path):
    (line,) = slime_lines(tmp_path, [_step("", 0, _actor(0))])
    bad = line.replace("0.25", "tensor(0.25)")
    log = parse_slime_log("\n".join([SUMMARY, bad, line]) + "\n")
    assert len(log.metric_lines) == 1
    assert log.problems == [f"line 2: model.py:{_site('step')[1]} step 0: not a Python literal: tensor(0.25)"]


def test_literal_dict_reads_nan_and_inf_and_never_runs_code():
    assert math.isnan(literal_dict("{'a': nan}")["a"])
    assert literal_dict("{'a': -inf, 'b': inf, 'c': 1e-06}") == {"a": -math.inf, "b": math.inf, "c": 1e-06}
    with pytest.raises(ValueError, match=r"^not a Python literal: __import__\('os'\)\.getcwd\(\)$"):
        literal_dict("{'a': __import__('os').getcwd()}")
    with pytest.raises(ValueError, match=r"^not a Python literal: x$"):
        literal_dict("{'a': x}")
    with pytest.raises(ValueError, match="not a dict with string keys: list"):
        literal_dict("[1, 2]")


# ---------------------------------------------------------------- the launcher, with a stand-in `ray`


@pytest.fixture(scope="module")
def launch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A launch directory with every smoke input; `ray job submit` prints job_output.txt, exits job_status."""
    root = tmp_path_factory.mktemp("workspace")
    # `ray job submit` streams the job's output (slime's log lines) and ends with the job's status
    stand_in_workspace(root, f'if [ "$1 $2" = "job submit" ]; then cat {root}/job_output.txt; '
                             f'exit "$(cat {root}/job_status)"; fi\n')  # fmt: skip
    converted_checkpoint(root, model_dir(root))
    prompt_data(root)
    return root


def _launch(launch_dir: Path, output: list[str], status: int = 0) -> subprocess.CompletedProcess:
    (launch_dir / "job_output.txt").write_text("".join(RAY_PREFIX + line + "\n" for line in output))
    (launch_dir / "job_status").write_text(str(status))
    clean = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    clean.update({"PATH": f"{launch_dir}/bin:{os.environ['PATH']}", "PYTHON": sys.executable,
                  "SLIME_DIR": str(launch_dir / "slime"), "MODELS_DIR": str(launch_dir / "models"),
                  "WANDB_GROUP": "g", "NCCL_NVLS_ENABLE": "0"})  # fmt: skip
    return subprocess.run(["bash", str(ROOT / "scripts/run_shopsimrl_slime.sh"), "configs/slime/smoke-ppo.env"],
                          cwd=launch_dir, env=clean, capture_output=True, text=True, timeout=180, check=False)  # fmt: skip


def test_the_launch_exits_with_the_reports_verdict(launch_dir: Path, tmp_path: Path):
    run_dir = launch_dir / "runs/g-smoke/train"
    passing = _launch(launch_dir, slime_lines(tmp_path, ppo_messages()))
    assert passing.returncode == 0, passing.stdout + passing.stderr
    log = (run_dir / "slime_job.log").read_text().splitlines()
    assert log[0].startswith("run_shopsimrl_slime.sh: mode=smoke config=configs/slime/smoke-ppo.env group=g-smoke")
    assert log[0] in passing.stderr and len(log) == 7 and log[1].startswith(RAY_PREFIX)
    assert json.loads((run_dir / "smoke_report.json").read_text())["passed"] is True
    assert '{"passed": true}' in passing.stdout

    failing = _launch(launch_dir, slime_lines(tmp_path, ppo_messages(critic_losses=(math.nan,))))
    assert failing.returncode == 1
    report = json.loads((run_dir / "smoke_report.json").read_text())
    assert report["passed"] is False and "FAIL  ppo_critic_loss_finite" in failing.stdout

    died = _launch(launch_dir, slime_lines(tmp_path, ppo_messages())[:2], status=3)  # the job failed
    assert died.returncode == 3  # the job's own status wins; the report still says what was reached
    assert "FAIL  ppo_actor_optimizer_steps: 0 step(s)" in died.stdout


def test_dry_run_plans_the_job_log_and_the_report_in_smoke_mode_only():
    from ops_helpers import dry_run

    smoke = dry_run("configs/slime/smoke-ppo.env")
    run_dir = ROOT / "runs/qwen35-4b-round-000-smoke/train"
    assert smoke.plan["job log"].startswith(f"{run_dir}/slime_job.log (this summary line, then the job's output")
    assert smoke.plan["smoke report"] == (
        f"after the job, {sys.executable} -m shopsimrl.cli slime smoke-report --slime-log {run_dir}/slime_job.log "
        f"--out {run_dir} --algo ppo --options {run_dir}/shopsim_options.yaml writes {run_dir}/smoke_report.json; "
        "a failed required criterion (or a failed job) makes the launch exit non-zero")
    formal = dry_run("configs/slime/formal.env")
    assert "smoke report" not in formal.plan and "job log" in formal.plan

"""StageLogger against real offline W&B runs, read back from disk with our reader."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shopsimrl.errors import ConfigError
from shopsimrl.storage import read_jsonl
from shopsimrl.tracking import StageLogger, WandbFailureWarning, WandbSettings
from shopsimrl.tracking.offline_reader import read_offline_run

# slime's W&B key flag, built from parts: the literal must appear in no tracked file.
KEY_FLAG = "--wandb-" + "key"

FAKE_KEY = "local-" + "a" * 40
ROWS = [
    {"rollout/step": 1, "rollout/shopsim/reward_mean": 0.5, "perf/rollout_time": 12.5},
    {"train/step": 2, "train/loss": 0.25, "train/grad_norm": 0.0},
    {"train/step": 3, "train/loss": float("nan")},
    {"eval/step": 1, "eval/reward": 0.75, "analysis/candidates": 3},
]


@pytest.fixture(scope="module")
def logged(wandb_offline_module):
    """One real offline run shared by the tests of this module (W&B init costs about a second)."""
    env = wandb_offline_module
    os.environ["USE_WANDB"] = "1"
    os.environ["WANDB_GROUP"] = "qwen35-4b-round-000"
    os.environ["WANDB_API_KEY"] = FAKE_KEY
    try:
        stage_dir = env.root / "runs" / "qwen35-4b-round-000" / "train"
        artifact_file = env.root / "runs" / "analysis_summary.json"
        artifact_file.parent.mkdir(parents=True, exist_ok=True)
        artifact_file.write_text('{"schema_version": 1, "cards": 2}\n')
        config = {
            "lr": 1e-6,
            "wandb_key": FAKE_KEY,
            "argv": [KEY_FLAG, FAKE_KEY],
            "reward_key": "reward",
        }
        with StageLogger(
            stage_dir, stage="train", config=config, step_axes={"analysis/*": "rollout/step"}
        ) as log:
            for row in ROWS:
                log.log(row)
            table = log.log_table(
                "gate/chunk_contributions", ["intervention_id", "coefficient"], [["i1", 0.25], ["i2", -0.5]]
            )
            included = log.log_artifact(
                "shopsimrl-analysis", "analysis", [artifact_file, env.root / "runs" / "missing.json"]
            )
        yield {
            "env": env,
            "log": log,
            "stage_dir": stage_dir,
            "run": read_offline_run(log.wandb_run_file),
            "table": table,
            "included": included,
            "artifact_file": artifact_file,
        }
    finally:
        for name in ("USE_WANDB", "WANDB_GROUP", "WANDB_API_KEY"):
            os.environ.pop(name, None)


def test_metrics_jsonl_holds_every_logged_dict_with_the_wandb_step(logged):
    records = read_jsonl(logged["stage_dir"] / "metrics.jsonl").records
    assert [r["_step"] for r in records] == [0, 1, 2, 3]
    for record, row in zip(records, ROWS, strict=True):
        metrics = {k: v for k, v in record.items() if not k.startswith("_")}
        assert metrics.keys() == row.keys()
    assert records[0]["rollout/shopsim/reward_mean"] == 0.5


def test_offline_history_matches_what_was_logged(logged):
    history = logged["run"].history
    assert len(history) == 5  # four rows and the table's row
    assert history[1]["train/loss"] == 0.25 and history[1]["train/grad_norm"] == 0
    assert history[2]["train/loss"] != history[2]["train/loss"]  # NaN survives
    assert "train/grad_norm" not in history[2]
    assert history[3]["analysis/candidates"] == 3
    assert logged["run"].exit_code == 0
    assert logged["run"].torn is None


def test_group_project_and_job_type_reach_the_run(logged):
    info = logged["run"].info
    assert (info.group, info.project, info.job_type) == ("qwen35-4b-round-000", "shopsimrl", "train")


def test_step_axes_are_slimes_plus_the_callers(logged):
    axes = {m["name"]: m["step_metric"] for m in logged["run"].metrics if m["step_metric"]}
    assert axes == {
        "train/*": "train/step",
        "rollout/*": "rollout/step",
        "multi_turn/*": "rollout/step",
        "passrate/*": "rollout/step",
        "perf/*": "rollout/step",
        "eval/*": "eval/step",
        "analysis/*": "rollout/step",
    }


def test_config_is_scrubbed(logged):
    assert logged["run"].config == {
        "lr": 1e-6,
        "wandb_key": "***REDACTED***",
        "argv": [KEY_FLAG, "***REDACTED***"],
        "reward_key": "reward",
    }


def test_api_key_appears_in_no_file_under_wandb_dir_or_runs(logged):
    env = logged["env"]
    scanned = 0
    for base in (env.wandb_dir, env.root / "runs"):
        for path in base.rglob("*"):
            if path.is_file() and not path.is_symlink():
                scanned += 1
                assert FAKE_KEY.encode() not in path.read_bytes(), path
    assert scanned > 10


def test_table_is_kept_locally_and_logged(logged):
    local = json.loads(logged["table"].read_text())
    assert local == {
        "schema_version": 1,
        "key": "gate/chunk_contributions",
        "wandb_step": 4,
        "columns": ["intervention_id", "coefficient"],
        "rows": [["i1", 0.25], ["i2", -0.5]],
    }
    run = logged["run"]
    [ref] = run.tables
    assert (ref.key, ref.step, ref.nrows, ref.ncols) == ("gate/chunk_contributions", 4, 2, 2)
    assert run.load_table(ref) == {
        "columns": ["intervention_id", "coefficient"],
        "data": [["i1", 0.25], ["i2", -0.5]],
    }


def test_artifact_is_staged_under_wandb_dir(logged):
    assert logged["included"] == [logged["artifact_file"]]
    [artifact] = [a for a in logged["run"].artifacts if a.type == "analysis"]
    assert artifact.name == "shopsimrl-analysis"
    staged = Path(artifact.files["analysis_summary.json"])
    assert staged.is_relative_to(logged["env"].wandb_dir)
    assert staged.read_text() == '{"schema_version": 1, "cards": 2}\n'


def test_status_file(logged):
    status = json.loads((logged["stage_dir"] / "wandb_status.json").read_text())
    assert status["state"] == "finished"
    assert status["run_id"] == logged["log"].run_id
    assert status["rows_logged"] == 5
    assert status["wandb_errors"] == 0
    assert status["artifacts"] == [
        {
            "name": "shopsimrl-analysis",
            "type": "analysis",
            "paths": [str(logged["artifact_file"])],
            "logged": True,
        }
    ]


def test_use_wandb_0_writes_local_files_only_and_never_imports_wandb(wandb_offline, tmp_path):
    script = (
        "import sys\n"
        "from shopsimrl.tracking import StageLogger\n"
        f"with StageLogger({str(tmp_path / 'stage')!r}, stage='train') as log:\n"
        "    log.log({'rollout/step': 1, 'rollout/x': 2.0})\n"
        "print(log.wandb_run_file, 'wandb' in sys.modules)\n"
    )
    env = {**os.environ, "USE_WANDB": "0"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == "None False\n"
    assert [r["rollout/x"] for r in read_jsonl(tmp_path / "stage" / "metrics.jsonl").records] == [2.0]
    assert not any(wandb_offline.wandb_dir.glob("wandb/*"))


def test_unwritable_wandb_dir_is_refused(wandb_offline, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    settings = WandbSettings.from_env(overrides={"enabled": True, "dir": str(blocker / "sub")})
    with pytest.raises(ConfigError) as info:
        StageLogger(tmp_path / "stage", stage="train", settings=settings).start()
    assert info.value.problems[0] == (
        f"WANDB_DIR {blocker / 'sub'}: a component of the path is not a directory"
    )
    assert not (tmp_path / "stage" / "metrics.jsonl").exists()


_INIT_FAILS = """
import sys, warnings
from shopsimrl.tracking import StageLogger, WandbFailureWarning, WandbSettings

settings = WandbSettings.from_env(overrides={"enabled": True, "mode": "online"})
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with StageLogger(sys.argv[1], stage="analysis", settings=settings) as log:
        log.log({"analysis/candidates": 2})
        log.log({"analysis/candidates": 3})
print([str(w.message) for w in caught if w.category is WandbFailureWarning])
"""


def test_wandb_init_failure_is_reported_and_local_logging_goes_on(wandb_offline, tmp_path):
    # Online with no credentials and no terminal: wandb.init raises UsageError, a real W&B failure.
    # A separate process with stdin closed, as on a training host (under pytest wandb waits for a prompt).
    stage = tmp_path / "stage"
    out = subprocess.run(
        [sys.executable, "-c", _INIT_FAILS, str(stage)],
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout == (
        "[\"W&B init failed for stage 'analysis' (UsageError: No API key configured. Use `wandb login` to log "
        f'in.); local files in {stage} are unaffected"]\n'
    )
    assert [r["analysis/candidates"] for r in read_jsonl(stage / "metrics.jsonl").records] == [2, 3]
    status = json.loads((stage / "wandb_status.json").read_text())
    assert (status["state"], status["wandb_errors"], status["run_file"]) == ("wandb_failed", 1, None)
    assert status["last_error"] == "init: UsageError: No API key configured. Use `wandb login` to log in."


def test_wandb_log_failure_leaves_local_files_intact(wandb_offline, tmp_path):
    settings = WandbSettings.from_env(overrides={"enabled": True})
    stage = tmp_path / "stage"
    with StageLogger(stage, stage="train", settings=settings) as log:
        log.log({"train/step": 1, "train/loss": 1.0})
        log.run.finish()  # the W&B side goes away under the logger; the next log call fails in wandb
        before = (stage / "metrics.jsonl").read_bytes()
        with pytest.warns(WandbFailureWarning, match=r"W&B log failed .*UsageError"):
            log.log({"train/step": 2, "train/loss": 0.5})
    after = (stage / "metrics.jsonl").read_bytes()
    assert after.startswith(before)
    assert [r["train/loss"] for r in read_jsonl(stage / "metrics.jsonl").records] == [1.0, 0.5]
    assert json.loads((stage / "wandb_status.json").read_text())["wandb_errors"] == 1


def test_metric_names_are_checked(wandb_offline, tmp_path):
    with StageLogger(tmp_path / "s", stage="train", settings=WandbSettings.from_env()) as log:
        with pytest.raises(ValueError, match="metric name '_step' starts with '_'"):
            log.log({"_step": 3})
        with pytest.raises(TypeError, match="log\\(\\) takes a mapping"):
            log.log([("a", 1)])

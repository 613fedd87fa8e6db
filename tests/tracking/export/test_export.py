"""History export of four seed-shaped rounds written by StageLogger into real offline runs."""

import csv
import hashlib
import json
import math

import pytest
from click.testing import CliRunner

from shopsimrl.tracking import StageLogger, WandbSettings
from shopsimrl.tracking.commands import wandb_group
from shopsimrl.tracking.export import (
    ExportError,
    OfflineHistorySource,
    export_history,
    iter_frozen,
    keys,
    update_position,
)
from shopsimrl.tracking.export.synthetic import (
    SEED_ZERO_GRAD_ORDINALS,
    omitted_clip_fraction,
    omitted_truncated_ratio,
    rollout_values,
    seed_shaped_events,
    update_values,
)

GROUPS = [f"qwen35-4b-round-{i:03d}" for i in range(4)]


@pytest.fixture(scope="module")
def exported(wandb_offline_module):
    env = wandb_offline_module
    for index, group in enumerate(GROUPS):
        settings = WandbSettings.from_env(overrides={"enabled": True, "group": group})
        with StageLogger(
            env.root / "runs" / group / "train",
            stage="train",
            settings=settings,
            config={"wandb_key": "local-" + "b" * 40},
        ) as log:
            for event in seed_shaped_events(index):
                log.log(event)
    # Another group in the same dir must not leak into the export.
    with StageLogger(
        env.root / "runs" / "other",
        stage="train",
        settings=WandbSettings.from_env(overrides={"enabled": True, "group": "other"}),
    ) as log:
        log.log({"rollout/step": 999, "rollout/raw_reward": 1.0})
    out = env.root / "out"
    result = export_history(GROUPS, OfflineHistorySource([env.wandb_dir]), out)
    return out, result


def _csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_seed_axis_mapping():
    assert update_position(2, 2) == (1, 1)
    assert update_position(161, 2) == (160, 80)
    assert update_position(67, 2) == (66, 33)


def test_runs_and_row_counts(exported):
    out, result = exported
    runs = result.manifest["runs"]
    assert [(r["round"], r["group"], r["history_rows"], r["state"]) for r in runs] == [
        (f"R{i}", g, 100, "finished") for i, g in enumerate(GROUPS)
    ]
    assert result.manifest["row_counts"] == {
        "rollout_steps.csv": 80,
        "optimizer_updates.csv": 160,
        "history_rows": 400,
    }


def test_optimizer_updates_csv_reproduces_the_seed_axes(exported):
    out, _ = exported
    rows = _csv(out / "optimizer_updates.csv")
    assert [int(r["train_step"]) for r in rows] == list(range(2, 162))
    assert [int(r["update_ordinal"]) for r in rows] == list(range(1, 161))
    assert all(int(r["rollout_step"]) == int(r["train_step"]) // 2 for r in rows)
    assert [r["round"] for r in rows[38:42]] == ["R0", "R0", "R1", "R1"]
    for row in rows:
        expected = update_values(int(row["train_step"]))
        for key in (keys.ENTROPY, keys.GRAD_NORM, keys.PPO_KL):
            assert float(row[key]) == expected[key]
        if omitted_clip_fraction(int(row["train_step"])):
            assert row[keys.CLIP_FRACTION] == ""  # missing stays empty: no interpolation
        else:
            assert float(row[keys.CLIP_FRACTION]) == expected[keys.CLIP_FRACTION]


def test_rollout_steps_csv_merges_the_events_of_a_batch(exported):
    out, _ = exported
    rows = _csv(out / "rollout_steps.csv")
    assert [int(r["rollout_step"]) for r in rows] == list(range(1, 81))
    first = rows[0]
    assert first["wandb_steps"] == "0;3;4"  # rollout manager, trainer's rollout data, perf
    assert float(first["rollout/log_probs"]) == -0.501
    assert float(first[keys.ACTOR_TOKENS_PER_S]) == 13505.0
    empty = [int(r["rollout_step"]) for r in rows if r[keys.TRUNCATED_RATIO] == ""]
    assert empty == [s for s in range(1, 81) if omitted_truncated_ratio(s)]
    for row in rows:
        assert (
            float(row[keys.RESPONSE_LEN_MEAN])
            == rollout_values(int(row["rollout_step"]))[keys.RESPONSE_LEN_MEAN]
        )


def test_summary_means_and_zero_gradient_updates(exported):
    out, _ = exported
    summary = json.loads((out / "summary.json").read_text())
    assert summary["schema_version"] == 1
    assert [z["update_ordinal"] for z in summary["zero_gradient_updates"]] == list(SEED_ZERO_GRAD_ORDINALS)
    assert summary["axis_check"]["updates_outside_run_rollout_steps"] == 0
    assert summary["axis_check"]["rollout_merge_conflicts"] == 0
    for index, entry in enumerate(summary["rounds"]):
        steps = range(20 * index + 1, 20 * index + 21)
        train_steps = range(2 * steps[0], 2 * steps[-1] + 2)
        clip = [update_values(t)[keys.CLIP_FRACTION] for t in train_steps if not omitted_clip_fraction(t)]
        truncated = [rollout_values(s)[keys.TRUNCATED_RATIO] for s in steps if not omitted_truncated_ratio(s)]
        assert math.isclose(entry["means"][keys.CLIP_FRACTION], sum(clip) / len(clip), rel_tol=1e-12)
        assert math.isclose(
            entry["means"][keys.TRUNCATED_RATIO], sum(truncated) / len(truncated), rel_tol=1e-12
        )
        assert entry["value_counts"][keys.CLIP_FRACTION] == len(clip)
        assert (entry["rollout_steps"], entry["optimizer_updates"]) == (20, 40)
        assert entry["rollout_step_range"] == [steps[0], steps[-1]]


def test_frozen_runs_are_numeric_json_without_config(exported):
    out, result = exported
    for run in result.manifest["runs"]:
        path = out / run["frozen_file"]
        doc = json.loads(path.read_text())  # plain JSON
        assert doc["schema_version"] == 1 and len(doc["history"]) == 100
        assert list(iter_frozen(path)) == doc["history"]
        assert all(isinstance(v, (int, float)) for row in doc["history"] for v in row.values())
        assert (
            b"wandb_key" not in path.read_bytes()
            and b"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" not in path.read_bytes()
        )


def test_manifest_hashes_match_the_files(exported):
    out, result = exported
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"]["kind"] == "offline"
    assert "plots/train_entropy_loss.png" in manifest["files"]
    for name, entry in manifest["files"].items():
        data = (out / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name
    assert (out / "plots" / "train_grad_norm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_has_the_per_round_table(exported):
    out, _ = exported
    report = (out / "report.md").read_text()
    assert (
        "| Round | Rollout steps | Updates | Entropy | Clip fraction | Gradient norm | Actor tokens/s |"
        in report
    )
    assert "ordinals: 66, 70, 82, 116, 140, 142, 156, 160." in report
    assert "the update ordinal is `train/step - 1` and its rollout step `floor(train/step / 2)`" in report


def test_cli_export_and_unknown_group(exported, wandb_offline_module, tmp_path):
    env = wandb_offline_module
    args = ["export", "--offline-dir", str(env.wandb_dir), "--out", str(tmp_path / "o"), "--no-plots"]
    result = CliRunner().invoke(wandb_group, [*args, "--group", GROUPS[0], "--group", GROUPS[1]])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        f"exported 2 run(s): 40 rollout steps, 80 optimizer updates -> {tmp_path / 'o'}"
    )
    result = CliRunner().invoke(wandb_group, [*args, "--group", "nope"])
    assert result.exit_code == 1
    assert f"Error: no runs of group 'nope' in offline source {env.wandb_dir}" in result.output
    with pytest.raises(ExportError, match="a group is given twice"):
        export_history(["a", "a"], OfflineHistorySource([env.wandb_dir]), tmp_path / "x")


def test_a_run_without_history_rows_is_exported_with_zero_rows(wandb_offline, tmp_path):
    # A stage that finished cleanly before logging anything (e.g. an analysis with no input) has an
    # offline run with 0 history rows; it must not break the export of its group.
    settings = WandbSettings.from_env(overrides={"enabled": True, "group": "g-empty"})
    with StageLogger(tmp_path / "runs" / "empty", stage="analysis", settings=settings):
        pass
    with StageLogger(tmp_path / "runs" / "full", stage="train", settings=settings) as log:
        log.log({"rollout/step": 0, "rollout/raw_reward": 0.5})
    out = tmp_path / "out"
    result = export_history(["g-empty"], OfflineHistorySource([wandb_offline.wandb_dir]), out, plots=False)
    rows = sorted(run["history_rows"] for run in result.manifest["runs"])
    assert rows == [0, 1]
    for run in result.manifest["runs"]:
        frozen = json.loads((out / run["frozen_file"]).read_text())
        assert len(frozen["history"]) == run["history_rows"]
    assert [row["rollout/raw_reward"] for row in _csv(out / "rollout_steps.csv")] == ["0.5"]


def test_cli_export_into_a_read_only_directory_is_one_line(exported, wandb_offline_module, read_only_dir):
    out, cause = read_only_dir
    args = ["export", "--offline-dir", str(wandb_offline_module.wandb_dir), "--out", str(out), "--no-plots"]
    result = CliRunner().invoke(wandb_group, [*args, "--group", GROUPS[0]])
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith(f"Error: cannot write {out}/runs/R0_") and line.endswith(f".json: {cause}")


def test_slimes_three_offline_runs_of_one_id_export_as_one_run(wandb_offline, tmp_path):
    """slime offline = the driver's, the RolloutManager's and actor rank 0's run under ONE id
    (tests/slime_offline_runs.py). Keyed by run id only, all three were frozen to one file and read back
    three times: 0 rollout steps and the train rows tripled. Each source is frozen on its own and the
    histories of one id are read as one run, merged by rollout step."""
    from slime_offline_runs import (
        ROLLOUTS,
        UPDATES_PER_ROLLOUT,
        actor_rollout_row,
        rollout_manager_row,
        train_row,
        write_slime_offline_runs,
    )

    files = write_slime_offline_runs(wandb_offline.wandb_dir, "slime-round-000")
    run_id = files[0].stem.removeprefix("run-")
    result = export_history(["slime-round-000"], OfflineHistorySource([wandb_offline.wandb_dir]), tmp_path / "out",
                            updates_per_rollout=UPDATES_PER_ROLLOUT, plots=False)  # fmt: skip
    assert result.summary["totals"] == {"rollout_steps": ROLLOUTS, "optimizer_updates": ROLLOUTS * UPDATES_PER_ROLLOUT}
    assert result.summary["axis_check"]["updates_outside_run_rollout_steps"] == 0
    assert result.summary["axis_check"]["rollout_merge_conflicts"] == 0
    assert result.summary["rounds"][0]["run_ids"] == [run_id]
    rollouts = _csv(tmp_path / "out" / "rollout_steps.csv")
    for step, row in enumerate(rollouts):
        expected = {**rollout_manager_row(step), **actor_rollout_row(step)}
        assert {k: float(row[k]) for k in expected if k != "rollout/step"} == {
            k: float(v) for k, v in expected.items() if k != "rollout/step"}
        assert row["run_id"] == run_id and int(row["rollout_step"]) == step
    updates = _csv(tmp_path / "out" / "optimizer_updates.csv")
    assert [float(row["train/loss"]) for row in updates] == [train_row(s)["train/loss"] for s in range(len(updates))]
    # Every source directory stays in the record, each frozen once.
    sources = [entry["source"] for entry in result.manifest["runs"]]
    assert sources == [str(f) for f in files]
    assert len({entry["frozen_file"] for entry in result.manifest["runs"]}) == 3

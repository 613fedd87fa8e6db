"""`shopsimrl eval` end to end on tiny real checkpoints: report, determinism, resume, refusals, W&B, compare."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shopsimrl.errors import ConfigError
from shopsimrl.evaluation.config import load_eval_config
from shopsimrl.evaluation.stage import EPISODES_FILE, PLAN_FILE, run_eval
from shopsimrl.storage import read_jsonl
from shopsimrl.tracking import WandbSettings
from shopsimrl.tracking.offline_reader import read_offline_run

REPO = Path(__file__).resolve().parents[2]


def _quiet(_line: str) -> None:
    return None


def test_report_counts_every_planned_episode_and_a_second_run_gives_identical_numbers(eval_config, tiny_checkpoints):
    path = eval_config()
    first = run_eval(load_eval_config(path, {"name": "first"}), echo=_quiet)
    second = run_eval(load_eval_config(path, {"name": "second"}), echo=_quiet)
    report = first.report
    # The parent's latest checkpoint was evaluated.
    assert report["plan"]["checkpoint"] == str(tiny_checkpoints / "rollout-0001")
    assert report["plan"]["rollout_id"] == 1
    assert report["episodes"] == {"planned": 6, "final": 6, "scored": 6, "unscorable": 0, "tasks_scored": 3}
    assert report["outcomes"]["success"]["episodes"] == 6
    assert sum(report["stop_reasons"].values()) == 6
    records = read_jsonl(first.eval_dir / EPISODES_FILE).records
    assert sorted(r["episode_id"] for r in records) == sorted(f"{t}/s{s}" for t in {r["task_id"] for r in records}
                                                              for s in (0, 1))
    assert all(r["kind"] == "eval_episode" and r["model_tokens"] > 0 for r in records)
    # A random tiny model never succeeds: every episode is a classified failure.
    assert sum(report["failure_modes"].values()) == 6
    # Two separate runs of one checkpoint and plan: the same episodes, the same report bytes.
    assert (first.eval_dir / "eval_report.json").read_bytes() == (second.eval_dir / "eval_report.json").read_bytes()
    hashes = lambda d: sorted(r["response_sha256"] for r in read_jsonl(d / EPISODES_FILE).records)  # noqa: E731
    assert hashes(first.eval_dir) == hashes(second.eval_dir)


def test_a_killed_evaluation_resumes_to_the_same_report_and_a_changed_plan_is_refused(eval_config):
    config = load_eval_config(eval_config())
    whole = run_eval(config, echo=_quiet)
    report_bytes = (whole.eval_dir / "eval_report.json").read_bytes()
    episodes = whole.eval_dir / EPISODES_FILE
    lines = episodes.read_text(encoding="utf-8").splitlines(keepends=True)
    # As a kill leaves it: two whole lines and a torn third; no report yet.
    episodes.write_text("".join(lines[:2]) + lines[2][:25], encoding="utf-8")
    (whole.eval_dir / "eval_report.json").unlink()
    said: list[str] = []
    resumed = run_eval(config, echo=said.append)
    assert any("2 already final, 4 to run" in line for line in said)
    assert (resumed.eval_dir / "eval_report.json").read_bytes() == report_bytes

    with pytest.raises(ConfigError) as refused:
        run_eval(load_eval_config(eval_config(), {"seeds": 3}), echo=_quiet)
    assert "seeds: stored 2, now 3" in str(refused.value) and PLAN_FILE in str(refused.value)


def test_bad_inputs_are_refused_before_any_episode(eval_config, tmp_path):
    with pytest.raises(ConfigError) as unknown:
        run_eval(load_eval_config(eval_config(mask=["no-such-chunk"])), echo=_quiet)
    assert "mask: no-such-chunk not active in" in str(unknown.value)
    with pytest.raises(ConfigError) as missing:
        run_eval(load_eval_config(eval_config(checkpoint=str(tmp_path / "nowhere"))), echo=_quiet)
    assert "nowhere: not a directory" in str(missing.value)
    empty = tmp_path / "empty-parent"
    empty.mkdir()
    with pytest.raises(ConfigError) as no_latest:
        run_eval(load_eval_config(eval_config(checkpoint=str(empty))), echo=_quiet)
    assert "latest_checkpointed_iteration.txt: not found" in str(no_latest.value)
    with pytest.raises(ConfigError, match="mask 'full' needs a skillbank"):
        load_eval_config(eval_config(skillbank=None))
    assert not (tmp_path / "runs").exists()


def test_corrupt_files_of_an_evaluation_are_refused_naming_them(eval_config):
    config = load_eval_config(eval_config())
    result = run_eval(config, echo=_quiet)
    episodes = result.eval_dir / EPISODES_FILE
    lines = episodes.read_text(encoding="utf-8").splitlines(keepends=True)
    # A damaged line in the middle is not an interrupted append: refused, nothing appended after it.
    episodes.write_text(lines[0] + "{not json\n" + "".join(lines[1:]), encoding="utf-8")
    before = episodes.read_bytes()
    with pytest.raises(ConfigError) as torn:
        run_eval(config, echo=_quiet)
    assert f"{episodes}:2: unreadable JSONL record" in str(torn.value)
    assert episodes.read_bytes() == before
    (result.eval_dir / PLAN_FILE).write_text("{broken", encoding="utf-8")
    with pytest.raises(ConfigError) as plan:
        run_eval(config, echo=_quiet)
    assert str(result.eval_dir / PLAN_FILE) in str(plan.value)


def test_no_skills_and_a_chunk_list_change_the_prompt_not_the_seeds(eval_config):
    path = eval_config()
    none = run_eval(load_eval_config(path, {"mask": "none", "name": "none"}), echo=_quiet)
    some = run_eval(load_eval_config(path, {"mask": "search-with-filters", "name": "one"}), echo=_quiet)
    assert none.report["plan"]["skills"] == [] and some.report["plan"]["skills"] == ["search-with-filters"]
    seeds = lambda d: {r["episode_id"]: r["sampling_seed"] for r in read_jsonl(d / EPISODES_FILE).records}  # noqa: E731
    assert seeds(none.eval_dir) == seeds(some.eval_dir)  # paired episode by episode


def test_eval_metrics_reach_an_offline_wandb_run(eval_config, wandb_offline):
    config = load_eval_config(eval_config())
    settings = WandbSettings.from_env(overrides={"enabled": True, "group": "round-000", "project": "shopsimrl-test"})
    result = run_eval(config, settings=settings, echo=_quiet)
    status = json.loads((result.eval_dir / "wandb_status.json").read_text())
    run = read_offline_run(status["run_file"])
    assert (run.info.group, run.info.job_type, run.exit_code) == ("round-000", "eval", 0)
    row = run.history[0]
    assert row["eval/step"] == 2  # rollout-0001: two rollouts trained, slime's eval step
    assert row["eval/shopsim_validation"] == pytest.approx(result.report["outcomes"]["reward"]["mean"], abs=1e-9)
    assert row["eval/shopsim_validation/success_rate"] == 0.0
    low, high = result.report["outcomes"]["success"]["wilson_ci"]
    assert (row["eval/shopsim_validation/success_ci_low"], row["eval/shopsim_validation/success_ci_high"]) == (low, high)
    assert [a.name for a in run.artifacts if a.type == "eval"] == ["shopsimrl-eval"]


def test_cli_evaluates_and_compares_two_checkpoints_on_the_same_episodes(eval_config, tiny_checkpoints, tmp_path):
    path = eval_config()
    cli = [sys.executable, "-m", "shopsimrl.cli", "eval", str(path), "--no-wandb"]
    before = subprocess.run([*cli, "--checkpoint", str(tiny_checkpoints / "rollout-0000"), "--name", "before"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert before.returncode == 0, before.stderr
    assert "success" in before.stdout and "report:" in before.stdout
    before_dir = tmp_path / "runs" / "round-000" / "eval" / "before"
    after = subprocess.run([*cli, "--name", "after", "--compare", str(before_dir)],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert after.returncode == 0, after.stderr
    assert "compare (after - before, same episodes)" in after.stdout
    comparison = json.loads((tmp_path / "runs" / "round-000" / "eval" / "after" / "comparison_vs_before.json").read_text())
    assert comparison["outcomes"]["success"]["episodes"] == 6
    assert comparison["before"]["checkpoint_sha256"] != comparison["after"]["checkpoint_sha256"]
    # A different plan cannot be paired: refused with the difference named.
    other = subprocess.run([*cli, "--name", "other", "--seeds", "1", "--compare", str(before_dir)],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert other.returncode == 1 and "plan.seeds: 2 vs 1" in other.stderr
    assert not (tmp_path / "runs" / "round-000" / "eval" / "other").exists()  # refused before any episode
    # A damaged baseline is one clear error line, not a traceback.
    (before_dir / "eval_report.json").write_text("{broken", encoding="utf-8")
    damaged = subprocess.run([*cli, "--name", "after", "--compare", str(before_dir)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert damaged.returncode == 1 and "Traceback" not in damaged.stderr
    assert str(before_dir / "eval_report.json") in damaged.stderr


def test_eval_help_names_the_outputs():
    result = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "eval", "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and "eval_report.json" in result.stdout and "--compare" in result.stdout


def test_unscorable_episodes_beyond_the_threshold_leave_no_report_until_a_rerun_scores_them(eval_config,
                                                                                           tiny_checkpoints):
    sys.path.insert(0, str(REPO / "tests" / "rollout"))
    from sglang_fake_server import fake_sglang, ok_reply

    from shopsimrl.errors import StageIncomplete

    fail = lambda request: (500, {"error": "engine overloaded"})  # noqa: E731
    generator = {"backend": "sglang", "concurrency": 1, "max_attempts": 1, "abort_after_consecutive_failures": 5}
    checkpoint = tiny_checkpoints / "rollout-0000"
    with fake_sglang([fail] * 2 + [ok_reply([258], [-0.5])]) as server:
        config = load_eval_config(eval_config(checkpoint=str(checkpoint), generator={**generator, "url": server.url}))
        with pytest.raises(StageIncomplete) as excinfo:
            run_eval(config, echo=_quiet)
    assert str(excinfo.value).startswith("eval incomplete: 2 of 6 episodes unscorable, more than "
                                         "generator.max_unscorable_fraction 0.10 (first: {'kind': 'model_service'")
    assert str(excinfo.value).endswith("; no report written")
    assert not (config.eval_dir / "eval_report.json").exists()
    with fake_sglang([ok_reply([258], [-0.5])]) as server:
        config = load_eval_config(eval_config(checkpoint=str(checkpoint), generator={**generator, "url": server.url}))
        result = run_eval(config, echo=_quiet)
    assert result.report["episodes"]["unscorable"] == 0


def test_an_evaluation_of_a_round_on_another_catalog_is_refused_before_any_episode(eval_config, tmp_path):
    """One source of the held-out set. The round's run directory records the shop it trained
    on; an eval in that group with another catalog (size or level) would score other held-out tasks."""
    round_dir = tmp_path / "runs" / "round-000"
    round_dir.mkdir(parents=True)
    record = round_dir / "train_config.yaml"
    record.write_text("shopsim:\n  catalog: {seed: 0, num_products: 1000, level: medium}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as excinfo:
        run_eval(load_eval_config(eval_config(catalog={"num_products": 200})), echo=_quiet)
    assert excinfo.value.problems == [
        f"catalog: not the catalog round round-000 trained on ({record}): level 'full' vs 'medium', num_products "
        "200 vs 1000; its held-out tasks would differ from the ones the Analyst's firewall protected"]  # fmt: skip
    assert not (round_dir / "eval").exists()
    record.write_text("shopsim:\n  catalog: {seed: 0, num_products: 200, level: full}\n", encoding="utf-8")
    assert run_eval(load_eval_config(eval_config(catalog={"num_products": 200}), {"tasks": 1, "seeds": 1}),
                    echo=_quiet).report["episodes"]["final"] == 1  # fmt: skip

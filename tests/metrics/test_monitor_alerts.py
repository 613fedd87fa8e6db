"""`shopsimrl monitor check` on hand-written metrics.jsonl files (library and real CLI)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from shopsimrl.cli import main
from shopsimrl.metrics.alerts import AlertConfig, AlertRule, check_run
from shopsimrl.storage import append_jsonl

P = "rollout/shopsim/"


def _healthy_row(step):
    # 16 completed groups, 8 skill-free (q = 0.5), 8 assisted; c1 in 4 of 8 (rho 0.5), c2 in 2 of 8 (rho 0.2).
    return {
        "rollout/step": step, P + "q": 0.5, P + "completed_group_count": 16, P + "skill_free_group_rate": 0.5,
        P + "assisted_group_count": 8, P + "chunk/c1/target_rho": 0.5, P + "chunk/c1/inclusion_rate": 0.5,
        P + "chunk/c2/target_rho": 0.2, P + "chunk/c2/inclusion_rate": 0.25,
        P + "scored_rate": 1.0, P + "technical_group_drop_count": 0, P + "all_wrong_group_rate": 0.1,
        P + "full_skill_retry_success_rate": 0.2, P + "pending_analysis_rate": 0.0,
    }


def _write(run_dir, rows, torn=False):
    path = run_dir / "train" / "metrics.jsonl"
    for row in rows:
        append_jsonl(path, row)
        append_jsonl(path, {"train/step": row["rollout/step"], "train/loss": 0.1})  # other axis: ignored
    if torn:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write('{"rollout/step": 99, "rollout/shopsim/q"')
    return path


def test_healthy_run_has_no_findings(tmp_path):
    _write(tmp_path, [_healthy_row(s) for s in range(10)])
    report = check_run(tmp_path)
    assert report.steps == list(range(10))
    assert report.findings == []


def test_technical_drops_and_unscorable_name_their_steps(tmp_path):
    rows = [_healthy_row(s) for s in range(5)]
    rows[3][P + "technical_group_drop_count"] = 2
    rows[3][P + "scored_rate"] = 0.9375
    _write(tmp_path, rows)
    findings = check_run(tmp_path).findings
    assert [f.render() for f in findings] == [
        "[technical_drops] technical_group_drop_count > 0: 2 group(s) dropped for technical failures; read the "
        "training traces for environment, parser or model-service errors (not policy failures) (steps: 3)",
        "[unscorable] scored_rate < 1 (lowest 0.9375): completed generations hold unscorable trajectories; "
        "check technical errors and resampling (steps: 3)",
    ]


@pytest.mark.parametrize(("window", "flagged"), [(2, False), (3, True), (10, True)])
def test_skill_free_drift_needs_a_pooled_window(tmp_path, window, flagged):
    # Every step: 12 of 16 groups skill-free vs 8 expected; one step: z = 4 / sqrt(16*.25) = 2 (noise).
    # window 2: 24 vs 16, z = 8 / sqrt(8) = 2.83 < 3;  window 3: 36 vs 24, z = 12 / sqrt(12) = 3.46 > 3.
    rows = [{**_healthy_row(s), P + "skill_free_group_rate": 0.75} for s in range(6)]
    _write(tmp_path, rows)
    findings = check_run(tmp_path, AlertConfig(window=window)).findings
    assert [f.rule for f in findings] == ([AlertRule.SKILL_FREE_DRIFT] * (6 // window if window < 6 else 1) if flagged else [])
    if window == 10:
        assert findings[0].render() == (
            "[skill_free_drift] skill-free groups drift from q: 72 of 96 groups vs 48.0 expected (z=+4.90, "
            "|z| > 3); check curriculum identity, group key and mask (steps: 0, 1, 2, 3, 4, 5)"
        )


def test_inclusion_drift_per_chunk(tmp_path):
    # c1 included in 7 of 8 assisted groups per step vs rho 0.5: 70 of 80 vs 40, z = 30 / sqrt(20) = 6.7.
    # c2: 2 of 8 vs rho 0.2 -> 20 of 80 vs 16, z = 4 / sqrt(12.8) = 1.1: noise, not flagged.
    rows = [{**_healthy_row(s), P + "chunk/c1/inclusion_rate": 0.875} for s in range(10)]
    _write(tmp_path, rows)
    findings = check_run(tmp_path).findings
    assert [f.render() for f in findings] == [
        "[inclusion_drift] chunk c1 inclusion drifts from target_rho: 70 of 80 groups vs 40.0 expected "
        "(z=+6.71, |z| > 3); check curriculum identity, group key and mask (steps: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)",
    ]


def test_all_wrong_rising_while_retries_succeed(tmp_path):
    rows = [_healthy_row(s) for s in range(10)]
    for row in rows[5:]:
        row[P + "all_wrong_group_rate"] = 0.3  # halves: 0.1 -> 0.3, a rise of 0.2
    _write(tmp_path, rows)
    assert check_run(tmp_path).findings == []  # retries succeed only 20%: no evidence yet
    for row in rows:
        row[P + "full_skill_retry_success_rate"] = 0.8
    (tmp_path / "train" / "metrics.jsonl").unlink()
    _write(tmp_path, rows)
    [finding] = check_run(tmp_path).findings
    assert finding.rule is AlertRule.ALL_WRONG_WITH_RETRY_SUCCESS
    assert finding.message.startswith("all_wrong_group_rate rose by 0.200 while full-skill retries succeeded 80%")


def test_pending_analysis_rising_without_candidates(tmp_path):
    rows = [{**_healthy_row(s), P + "pending_analysis_rate": 0.0 if s < 5 else 0.5} for s in range(10)]
    _write(tmp_path, rows)
    [finding] = check_run(tmp_path).findings
    assert finding.rule is AlertRule.PENDING_ANALYSIS_WITHOUT_CANDIDATES
    assert "(no analysis/metrics.jsonl yet)" in finding.message
    append_jsonl(tmp_path / "analysis" / "metrics.jsonl", {"analysis/candidates": 2, "analysis/eligible_cards": 3})
    assert check_run(tmp_path).findings == []


def test_cli_exit_codes_and_output(tmp_path):
    runner = CliRunner()
    _write(tmp_path / "ok", [_healthy_row(s) for s in range(3)], torn=True)
    result = runner.invoke(main, ["monitor", "check", str(tmp_path / "ok")])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "no findings"
    assert "unreadable JSONL record (no newline at end (torn write))" in result.stderr

    bad = [_healthy_row(s) for s in range(3)]
    bad[1][P + "technical_group_drop_count"] = 1
    _write(tmp_path / "bad", bad)
    result = runner.invoke(main, ["monitor", "check", str(tmp_path / "bad" / "train")])  # the stage dir works too
    assert result.exit_code == 1
    assert result.stdout.splitlines()[-1] == "1 finding(s)"

    result = runner.invoke(main, ["monitor", "check", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert f"no metrics.jsonl in {tmp_path / 'missing'} or {tmp_path / 'missing' / 'train'}" in result.stderr


def test_cli_help_has_an_example():
    result = CliRunner().invoke(main, ["monitor", "check", "--help"])
    assert result.exit_code == 0
    assert "Example: shopsimrl monitor check runs/qwen35-4b-round-000" in result.output


def test_bad_window_is_a_clear_error(tmp_path):
    _write(tmp_path, [_healthy_row(0)])
    result = CliRunner().invoke(main, ["monitor", "check", str(tmp_path), "--window", "1"])
    assert result.exit_code == 2
    assert "window must be >= 2 steps, got 1" in result.stderr
    assert json.loads((tmp_path / "train" / "metrics.jsonl").read_text().splitlines()[0])["rollout/step"] == 0

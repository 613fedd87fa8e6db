"""PPO's alert rules: negative explained variance for N rollout steps in a row, a non-finite critic
loss; through `monitor check` on a real metrics.jsonl and live through a StageLogger listener."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from shopsimrl.metrics import names as m
from shopsimrl.metrics.alerts import AlertConfig, AlertRule, check_run
from shopsimrl.metrics.commands import monitor
from shopsimrl.metrics.live_alerts import ALERTS_FILE, LiveAlerts
from shopsimrl.storage import append_jsonl, read_jsonl
from shopsimrl.tracking import StageLogger, WandbSettings

EV = m.PPO_EXPLAINED_VARIANCE.name


def _write(path: Path, explained: list[float | None], critic_losses: list[float]) -> Path:
    for step, value in enumerate(explained):
        append_jsonl(path, {m.ROLLOUT_STEP.name: step, m.PERF_ROLLOUT_TIME.name: 1.0})
        append_jsonl(path, {m.ROLLOUT_STEP.name: step, m.ROLLOUT_VALUES.name: 0.1,
                            **({EV: value} if value is not None else {})})  # fmt: skip
    for step, loss in enumerate(critic_losses):
        append_jsonl(path, {m.TRAIN_STEP.name: step, m.TRAIN_CRITIC_VALUE_LOSS.name: loss})
    return path


def _rules(findings: list[Any]) -> dict[AlertRule, list[tuple[int, ...]]]:
    out: dict[AlertRule, list[tuple[int, ...]]] = {}
    for f in findings:
        out.setdefault(f.rule, []).append(f.steps)
    return out


def test_negative_explained_variance_fires_after_n_steps_in_a_row(tmp_path: Path) -> None:
    # steps 0-2 negative (3 < 5), 3 positive, 4-9 negative with an undefined step 6 skipped: 5 defined in a row
    values = [-0.1, -0.2, -0.3, 0.4, -0.5, -0.1, None, -0.2, -0.9, -0.3]
    path = _write(tmp_path / "metrics.jsonl", values, [0.1])
    report = check_run(tmp_path, AlertConfig(window=10, negative_ev_steps=5))
    assert _rules(report.findings) == {AlertRule.EXPLAINED_VARIANCE_NEGATIVE: [(4, 5, 7, 8, 9)]}
    assert "lowest -0.9" in report.findings[0].message
    # one step short of the threshold: nothing
    assert check_run(tmp_path, AlertConfig(window=10, negative_ev_steps=6)).findings == []
    # the CLI option reaches the rule
    result = CliRunner().invoke(monitor, ["check", str(path.parent), "--negative-ev-steps", "3"])
    assert result.exit_code == 1
    assert result.output.count("[explained_variance_negative]") == 2  # steps 0-2 and 4-9


def test_non_finite_critic_loss_fires_with_its_train_steps(tmp_path: Path) -> None:
    _write(tmp_path / "metrics.jsonl", [0.5, 0.5], [0.2, math.nan, 0.1, math.inf])
    findings = check_run(tmp_path).findings
    assert _rules(findings) == {AlertRule.CRITIC_LOSS_NON_FINITE: [(1, 3)]}
    assert "(nan, inf)" in findings[0].message


def test_grpo_records_fire_neither_ppo_rule(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    for step in range(12):
        append_jsonl(path, {m.ROLLOUT_STEP.name: step, m.PERF_ROLLOUT_TIME.name: 1.0})
        append_jsonl(path, {m.TRAIN_STEP.name: step, m.TRAIN_LOSS.name: math.nan})  # not a critic row
    assert check_run(tmp_path).findings == []


def test_live_alerts_fire_both_rules_while_the_stage_logs(tmp_path: Path) -> None:
    stage_dir = tmp_path / "train"
    logger = StageLogger(stage_dir, stage="train", settings=WandbSettings(enabled=False), handle_sigterm=False)
    live = LiveAlerts(stage_dir, AlertConfig(window=10, negative_ev_steps=3))
    logger.add_listener(live)
    fired_after: list[int] = []
    for step in range(4):
        logger.log({m.ROLLOUT_STEP.name: step, EV: -0.2})
        logger.log({m.TRAIN_STEP.name: step, m.TRAIN_CRITIC_VALUE_LOSS.name: math.nan if step >= 1 else 0.3})
        fired_after.append(live.fired)
    live.on_finish(logger)
    alerts = read_jsonl(stage_dir / ALERTS_FILE).records
    assert [(a["rule"], a["level"], a["steps"]) for a in alerts] == [
        ("critic_loss_non_finite", "ERROR", [1]),
        ("explained_variance_negative", "WARN", [0, 1, 2]),
    ]
    assert fired_after == [0, 1, 2, 2]  # once per rule per window, as soon as the evidence is there

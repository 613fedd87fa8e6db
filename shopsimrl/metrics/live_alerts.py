"""The alert rules of `monitor check`, evaluated live while a stage logs (docs/metrics.md, "Live alerts").

    logger.add_listener(LiveAlerts(stage_dir))      # a StageLogger listener

Rows carrying `rollout/step` are merged per step into the current window of `AlertConfig.window`
steps (the same window `monitor check` pools). Per window, each rule fires at most once:

* point rules (`technical_drops`, `unscorable`, PPO's `explained_variance_negative`) as soon as a step
  of the window shows them; `critic_loss_non_finite` as soon as a `train/critic-*` row shows it;
* window rules (drift, rising rates) when the window is full, or at the end of the stage for the
  last, partial window — as `monitor check` evaluates a partial last window.

A firing appends one line to `<stage_dir>/alerts.jsonl` (always, atomically: one line per write) and
asks the logger for W&B's own alert (`run.alert`), which it sends only when the run is online.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from shopsimrl.metrics import names as m
from shopsimrl.metrics.alerts import (
    METRICS_FILE,
    AlertConfig,
    AlertRule,
    AnalysisProgress,
    Finding,
    critic_loss_findings,
    evaluate_alerts,
    read_analysis_progress,
)
from shopsimrl.storage import append_jsonl
from shopsimrl.storage.jsonl import is_finite_number

ALERTS_FILE = "alerts.jsonl"
ALERT_SCHEMA_VERSION = 1
POINT_RULES = frozenset(
    {AlertRule.TECHNICAL_DROPS, AlertRule.UNSCORABLE, AlertRule.EXPLAINED_VARIANCE_NEGATIVE}
)
_LEVELS = {AlertRule.TECHNICAL_DROPS: "ERROR", AlertRule.UNSCORABLE: "ERROR",
           AlertRule.CRITIC_LOSS_NON_FINITE: "ERROR"}  # the rest: WARN  # fmt: skip


class AlertingLogger(Protocol):
    """What the live rules need from the logger (`shopsimrl.tracking.StageLogger` has it)."""

    stage: str

    def alert(self, title: str, text: str, level: str = "WARN") -> Any: ...


class LiveAlerts:
    """A `StageLogger` listener: evaluates the alert rules per window while the stage runs."""

    def __init__(self, stage_dir: str | os.PathLike[str], config: AlertConfig | None = None) -> None:
        self.stage_dir = Path(stage_dir)
        self.config = config or AlertConfig()
        self.log_path = self.stage_dir / ALERTS_FILE
        self.window_index = 0
        self.fired = 0  # alerts fired so far (all windows)
        self._rows: dict[int, dict[str, Any]] = {}  # the current window's rows, merged per step
        self._fired_rules: set[AlertRule] = set()  # rules already fired in the current window
        self._window_rules_done = False

    # ---- StageLogger listener -------------------------------------------------------------------
    def on_log(self, logger: AlertingLogger, metrics: Mapping[str, Any]) -> None:
        step = metrics.get(m.ROLLOUT_STEP.name)
        if not is_finite_number(step):
            # train/* rows have their own axis; of them only the critic's loss has a rule
            findings = critic_loss_findings([dict(metrics)]) if m.TRAIN_STEP.name in metrics else []
            if findings and AlertRule.CRITIC_LOSS_NON_FINITE not in self._fired_rules:
                self._fire(logger, AlertRule.CRITIC_LOSS_NON_FINITE, findings)
            return
        step = int(step)
        if step not in self._rows and len(self._rows) >= self.config.window:
            self._close_window(logger)
        self._rows.setdefault(step, {}).update(metrics)
        full = len(self._rows) >= self.config.window
        self._evaluate(logger, window_rules=full and not self._window_rules_done)
        if full:
            self._window_rules_done = True

    def on_finish(self, logger: AlertingLogger) -> None:
        if self._rows and not self._window_rules_done:
            self._evaluate(logger, window_rules=True)

    # ---- internals ------------------------------------------------------------------------------
    def _close_window(self, logger: AlertingLogger) -> None:
        if not self._window_rules_done:
            self._evaluate(logger, window_rules=True)
        self._rows = {}
        self._fired_rules = set()
        self._window_rules_done = False
        self.window_index += 1

    def _evaluate(self, logger: AlertingLogger, *, window_rules: bool) -> None:
        # The Analyst's counters matter to a window rule only; a point-rule pass skips the file read.
        analysis = (
            read_analysis_progress(self.stage_dir / METRICS_FILE) if window_rules else AnalysisProgress(None)
        )
        by_rule: dict[AlertRule, list[Finding]] = {}
        for finding in evaluate_alerts(self._rows, analysis, self.config):
            if finding.rule in self._fired_rules or (finding.rule not in POINT_RULES and not window_rules):
                continue
            by_rule.setdefault(finding.rule, []).append(finding)
        for rule, findings in by_rule.items():
            self._fire(logger, rule, findings)

    def _fire(self, logger: AlertingLogger, rule: AlertRule, findings: list[Finding]) -> None:
        self._fired_rules.add(rule)
        self.fired += 1
        steps = sorted({s for f in findings for s in f.steps})
        level = _LEVELS.get(rule, "WARN")
        title = f"shopsimrl {logger.stage}: {rule.value} (window {self.window_index})"
        text = "\n".join(f.render() for f in findings)
        delivery = logger.alert(title, text, level)
        append_jsonl(
            self.log_path,
            {
                "schema_version": ALERT_SCHEMA_VERSION,
                "kind": "alert",
                "time": time.time(),
                "stage": logger.stage,
                "rule": rule.value,
                "level": level,
                "window_index": self.window_index,
                "window_size": self.config.window,
                "steps": steps,
                "title": title,
                "text": text,
                "wandb": str(delivery),  # a StrEnum: its value
            },
        )

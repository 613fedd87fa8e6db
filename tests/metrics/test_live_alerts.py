"""Live alerts: monitor check's rules evaluated while a stage logs; local alert log and W&B's run.alert."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shopsimrl.local.config import run_config_from_mapping
from shopsimrl.local.run import run_training
from shopsimrl.metrics import names as m
from shopsimrl.metrics.alerts import AlertConfig, check_run
from shopsimrl.metrics.live_alerts import ALERTS_FILE, LiveAlerts
from shopsimrl.storage import read_jsonl
from shopsimrl.tracking import StageLogger, WandbSettings
from shopsimrl.tracking.logger import LoggerState
from shopsimrl.tracking.settings import WandbMode

SKILLBANK = str(Path(__file__).resolve().parents[2] / "configs" / "skillbank.example.json")


class RecordingRun:
    """Stands in for an online `wandb.Run`: the two methods the logger calls, recorded."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.alerts: list[dict[str, Any]] = []

    def log(self, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def alert(self, title: str, text: str, level: str | None = None, wait_duration: Any = None) -> None:
        self.alerts.append({"title": title, "text": text, "level": level})


def _online_logger(stage_dir: Path, run: RecordingRun) -> StageLogger:
    settings = WandbSettings(enabled=True, mode=WandbMode.ONLINE, dir=stage_dir.parent / "wandb")
    logger = StageLogger(stage_dir, stage="train", settings=settings, handle_sigterm=False)
    logger.run = run  # what a successful online wandb.init leaves behind
    logger.state = LoggerState.RUNNING
    return logger


def test_online_alert_is_sent_once_per_rule_per_window_with_the_evidence(tmp_path: Path) -> None:
    run = RecordingRun()
    logger = _online_logger(tmp_path / "train", run)
    live = LiveAlerts(logger.stage_dir, AlertConfig(window=3))
    logger.add_listener(live)
    drops = {0: 1, 1: 2, 4: 1}  # windows of 3 steps: {0,1,2} fires once, {3,4,5} once, {6} never
    for step in range(7):
        logger.log({m.ROLLOUT_STEP.name: step, m.TECHNICAL_GROUP_DROP_COUNT.name: drops.get(step, 0),
                    m.SCORED_RATE.name: 1.0})  # fmt: skip
        logger.log({m.ROLLOUT_STEP.name: step, m.PERF_STEP_TIME.name: 1.0})  # a second row of the step
        logger.log({m.TRAIN_STEP.name: step, m.TRAIN_LOSS.name: 0.5})  # another axis: ignored
    live.on_finish(logger)

    assert [a["title"] for a in run.alerts] == [
        "shopsimrl train: technical_drops (window 0)",
        "shopsimrl train: technical_drops (window 1)",
    ]
    assert [a["level"] for a in run.alerts] == ["ERROR", "ERROR"]
    # fired on the first step that showed it, with that evidence
    assert run.alerts[0]["text"].startswith("[technical_drops] technical_group_drop_count > 0: 1 group(s)")
    assert run.alerts[0]["text"].endswith("(steps: 0)")
    assert run.alerts[1]["text"].endswith("(steps: 4)")
    log = read_jsonl(logger.stage_dir / ALERTS_FILE).records
    assert [(r["rule"], r["window_index"], r["steps"], r["wandb"]) for r in log] == [
        ("technical_drops", 0, [0], "sent"),
        ("technical_drops", 1, [4], "sent"),
    ]
    assert [r["text"] for r in log] == [a["text"] for a in run.alerts]
    assert len(run.rows) == 21  # every row still reached W&B


def test_window_rule_fires_when_the_window_is_full_and_the_last_partial_window_at_finish(
    tmp_path: Path,
) -> None:
    run = RecordingRun()
    logger = _online_logger(tmp_path / "train", run)
    live = LiveAlerts(logger.stage_dir, AlertConfig(window=4))
    logger.add_listener(live)
    # q = 0.5 but every group is skill-free: z = (n - n/2) / sqrt(n/4) = sqrt(n) > 3 once n >= 10
    for step in range(6):
        logger.log({m.ROLLOUT_STEP.name: step, m.Q.name: 0.5, m.SKILL_FREE_GROUP_RATE.name: 1.0,
                    m.COMPLETED_GROUP_COUNT.name: 4.0})  # fmt: skip
        if step == 2:
            assert run.alerts == []  # 3 of 4 steps: a partial window is not judged while it fills
    assert [a["title"] for a in run.alerts] == ["shopsimrl train: skill_free_drift (window 0)"]
    assert "16 of 16 groups vs 8.0 expected (z=+4.00" in run.alerts[0]["text"]
    live.on_finish(logger)  # window 1 holds 2 steps, 8 groups: z = 2.83 < 3, so nothing more
    assert len(run.alerts) == 1
    logger.log({m.ROLLOUT_STEP.name: 6, m.Q.name: 0.5, m.SKILL_FREE_GROUP_RATE.name: 1.0,
                m.COMPLETED_GROUP_COUNT.name: 4.0})  # fmt: skip
    live.on_finish(logger)  # 3 steps, 12 groups: z = 3.46
    assert [a["title"] for a in run.alerts][-1] == "shopsimrl train: skill_free_drift (window 1)"


def test_a_rule_firing_during_a_local_run_with_wandb_offline_writes_the_alert_log(
    tmp_path: Path, wandb_offline
) -> None:
    config = run_config_from_mapping(
        {
            "run": {"group": "test-round-000", "runs_root": str(tmp_path / "runs"), "mode": "train"},
            "model": {"name": "tiny", "seed": 0},
            "driver": {
                "num_rollout": 2,
                "rollout_batch_size": 1,
                "n_samples_per_prompt": 2,
                "over_sampling_batch_size": 1,
                "global_batch_size": 2,
                "rollout_max_response_len": 8,
                "lr": 1e-3,
                "rollout_seed": 7,
            },  # fmt: skip
            "shopsim": {
                "skillbank": SKILLBANK,
                "q": {"start": 0.3},
                "max_turns": 2,
                "max_new_tokens_per_turn": 8,
                "catalog": {"num_products": 200},
                "full_skill_retry": False,
            },  # fmt: skip
        },
        "test",
    )
    settings = WandbSettings.from_env(
        {"USE_WANDB": "1", "WANDB_MODE": "offline", "WANDB_DIR": str(wandb_offline.wandb_dir)}
    )
    # A tiny z threshold makes the curriculum's honest sampling noise a drift: q = 0.3 over whole
    # groups can never match its expectation exactly, so skill_free_drift must fire in window 0.
    alert_config = AlertConfig(window=2, z_threshold=1e-6)
    result = run_training(config, settings=settings, echo=lambda _line: None, alert_config=alert_config)

    log = read_jsonl(result.stage_dir / ALERTS_FILE).records
    rules = [r["rule"] for r in log]
    assert "skill_free_drift" in rules
    assert len(rules) == len(set(rules))  # one window, each rule at most once
    assert all(r["wandb"] == "offline" and r["window_index"] == 0 and set(r["steps"]) <= {0, 1} for r in log)
    drift = log[rules.index("skill_free_drift")]
    assert drift["steps"] == [0, 1]
    assert drift["text"].startswith("[skill_free_drift] skill-free groups drift from q: ")
    # live and after the fact agree: `monitor check` with the same rules finds the same rules
    offline = check_run(result.stage_dir, alert_config)
    assert sorted({f.rule.value for f in offline.findings}) == sorted(rules)

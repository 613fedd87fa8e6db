"""The alert rules of docs/metrics.md ("Alert rules"), evaluated on a stage's `metrics.jsonl`.

Rules, each reported with the rollout steps involved:

* technical_drops: `technical_group_drop_count > 0` in a step;
* unscorable: `scored_rate < 1` in a step;
* skill_free_drift / inclusion_drift: over a window of steps the pooled skill-free (or chunk-included)
  group count differs from its expectation sum(q_i * n_i) (or sum(rho_i * n_i)) by more than
  `z_threshold` binomial standard deviations, sqrt(sum(n_i * p_i * (1 - p_i))); a single step is
  too noisy to judge (spec 3.2), a pooled window is not;
* all_wrong_with_retry_success: all-wrong rate rising across a window (second-half mean minus
  first-half mean >= min_rise) while full-skill retries mostly succeed (mean >= retry_success);
* pending_analysis_without_candidates: pending-analysis rate rising across a window while the
  Failure Analyst has produced no eligible card and no candidate;
* explained_variance_negative (PPO): `rollout/ppo/explained_variance < 0` in `negative_ev_steps`
  rollout steps in a row (steps where it is undefined are skipped): the critic predicts the returns
  worse than their mean, so its advantages are noise;
* critic_loss_non_finite (PPO): a `train/critic-value_loss` row that is NaN or infinite; its steps
  are `train/step` values.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from shopsimrl.metrics import names as m
from shopsimrl.storage import read_jsonl
from shopsimrl.storage.jsonl import is_finite_number
from shopsimrl.storage.layout import ANALYSIS_DIR, METRICS_FILE, TRAIN_DIR


class AlertRule(StrEnum):
    TECHNICAL_DROPS = "technical_drops"
    UNSCORABLE = "unscorable"
    SKILL_FREE_DRIFT = "skill_free_drift"
    INCLUSION_DRIFT = "inclusion_drift"
    ALL_WRONG_WITH_RETRY_SUCCESS = "all_wrong_with_retry_success"
    PENDING_ANALYSIS_WITHOUT_CANDIDATES = "pending_analysis_without_candidates"
    EXPLAINED_VARIANCE_NEGATIVE = "explained_variance_negative"
    CRITIC_LOSS_NON_FINITE = "critic_loss_non_finite"


@dataclass(frozen=True)
class AlertConfig:
    window: int = 10  # rollout steps pooled per test
    z_threshold: float = 3.0
    min_rise: float = 0.05  # absolute rise of a rate between the halves of a window
    retry_success: float = 0.5
    # PPO: rollout steps in a row with negative explained variance. Live alerts see one window at a
    # time, so there a longer run than `window` never fires; `monitor check` sees the whole run.
    negative_ev_steps: int = 5

    def __post_init__(self) -> None:
        problems = []
        if self.negative_ev_steps < 1:
            problems.append(f"negative_ev_steps must be >= 1, got {self.negative_ev_steps}")
        if self.window < 2:
            problems.append(f"window must be >= 2 steps, got {self.window}")
        if self.z_threshold <= 0:
            problems.append(f"z_threshold must be > 0, got {self.z_threshold}")
        if not 0 <= self.retry_success <= 1:
            problems.append(f"retry_success must be in [0, 1], got {self.retry_success}")
        if problems:
            raise ValueError("; ".join(problems))


@dataclass(frozen=True)
class Finding:
    rule: AlertRule
    message: str
    steps: tuple[int, ...]

    def render(self) -> str:
        return f"[{self.rule.value}] {self.message} (steps: {', '.join(str(s) for s in self.steps)})"


@dataclass
class AnalysisProgress:
    source: str | None  # the file read, None when the Analyst has written nothing yet
    eligible_cards: float = 0.0
    candidates: float = 0.0


@dataclass
class CheckReport:
    metrics_path: Path
    steps: list[int]
    findings: list[Finding] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # torn tail, unreadable rows


def load_train_rows(path: Path) -> list[dict[str, Any]]:
    """Rows carrying `train/step` (optimizer steps), in file order; unreadable rows are skipped here
    (`load_rollout_steps` reports them)."""
    read = read_jsonl(path, strict_middle=False)
    return [row for row in read.records if isinstance(row, dict) and m.TRAIN_STEP.name in row]


def find_metrics_file(run_dir: str | os.PathLike[str]) -> Path:
    """`RUN_DIR/metrics.jsonl`, else `RUN_DIR/train/metrics.jsonl` (RUN_DIR is a round directory)."""
    root = Path(run_dir)
    for candidate in (root / METRICS_FILE, root / TRAIN_DIR / METRICS_FILE):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no {METRICS_FILE} in {root} or {root / 'train'}")


def load_rollout_steps(path: Path) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Rows carrying `rollout/step`, merged per step (later rows win); problems are reported."""
    read = read_jsonl(path, strict_middle=False)
    problems = [str(p) for p in read.problems]
    steps: dict[int, dict[str, Any]] = {}
    for number, row in enumerate(read.records, start=1):
        if not isinstance(row, dict):
            problems.append(f"{path}: record {number} is not a JSON object")
            continue
        step = row.get(m.ROLLOUT_STEP.name)
        if step is None:
            continue  # train/* rows have their own axis
        if not is_finite_number(step):
            problems.append(f"{path}: record {number}: rollout/step is {step!r}")
            continue
        steps.setdefault(int(step), {}).update(row)
    return dict(sorted(steps.items())), problems


def read_analysis_progress(metrics_path: Path) -> AnalysisProgress:
    """The Analyst's counters from the round's `analysis/metrics.jsonl` (max over its rows)."""
    stage_dir = metrics_path.parent
    path = stage_dir.parent / ANALYSIS_DIR / METRICS_FILE
    if not path.is_file():
        return AnalysisProgress(source=None)
    progress = AnalysisProgress(source=str(path))
    for row in read_jsonl(path, strict_middle=False).records:
        if not isinstance(row, dict):
            continue
        for key, attr in (
            (m.ANALYSIS_ELIGIBLE_CARDS.name, "eligible_cards"),
            (m.ANALYSIS_CANDIDATES.name, "candidates"),
        ):
            if is_finite_number(row.get(key)):
                setattr(progress, attr, max(getattr(progress, attr), float(row[key])))
    return progress


def _windows(steps: Sequence[int], size: int) -> list[list[int]]:
    return [list(steps[i : i + size]) for i in range(0, len(steps), size)]


def _numbers(row: dict[str, Any], *keys: str) -> list[float] | None:
    values = [row.get(k) for k in keys]
    return [float(v) for v in values] if all(is_finite_number(v) for v in values) else None


def _pooled_z(points: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """points: (observed rate, groups n, target p) -> (observed count, expected count, z)."""
    observed = sum(round(rate * n) for rate, n, _ in points)
    expected = sum(p * n for _, n, p in points)
    variance = sum(n * p * (1 - p) for _, n, p in points)
    if variance == 0:
        z = 0.0 if math.isclose(observed, expected) else math.inf
    else:
        z = (observed - expected) / math.sqrt(variance)
    return observed, expected, z


def _drift(
    rows: dict[int, dict[str, Any]],
    config: AlertConfig,
    rate_key: str,
    count_key: str,
    target_key: str,
    rule: AlertRule,
    label: str,
) -> list[Finding]:
    usable = [s for s in rows if _numbers(rows[s], rate_key, count_key, target_key) is not None]
    findings = []
    for window in _windows(usable, config.window):
        points = []
        for s in window:
            rate, n, target = _numbers(rows[s], rate_key, count_key, target_key) or []
            points.append((rate, n, target))
        observed, expected, z = _pooled_z(points)
        if abs(z) > config.z_threshold:
            groups = int(sum(n for _, n, _ in points))
            findings.append(
                Finding(
                    rule,
                    (
                        f"{label}: {observed:.0f} of {groups} groups vs {expected:.1f} expected "
                        f"(z={z:+.2f}, |z| > {config.z_threshold:g}); check curriculum identity, group key and mask"
                    ),
                    tuple(window),
                )
            )
    return findings


def _rising(values: list[float], min_rise: float) -> float | None:
    """Second-half mean minus first-half mean when >= min_rise, else None."""
    if len(values) < 2:
        return None
    half = len(values) // 2
    rise = sum(values[half:]) / len(values[half:]) - sum(values[:half]) / half
    return rise if rise >= min_rise else None


def critic_loss_findings(train_rows: Sequence[dict[str, Any]]) -> list[Finding]:
    """critic_loss_non_finite over optimizer-step rows (a row without the key is not a critic step)."""
    key = m.TRAIN_CRITIC_VALUE_LOSS.name
    bad = [(row.get(m.TRAIN_STEP.name), row[key]) for row in train_rows if key in row and not is_finite_number(row[key])]
    if not bad:
        return []
    return [
        Finding(
            AlertRule.CRITIC_LOSS_NON_FINITE,
            f"{key} is not finite ({', '.join(repr(v) for _, v in bad)}): the critic diverged or its inputs are "
            "broken; its values and the actor's advantages are meaningless from here (steps are train/step)",
            tuple(int(s) for s, _ in bad if is_finite_number(s)),
        )
    ]


def _negative_explained_variance(rows: dict[int, dict[str, Any]], config: AlertConfig) -> list[Finding]:
    key = m.PPO_EXPLAINED_VARIANCE.name
    defined = [(s, rows[s][key]) for s in rows if is_finite_number(rows[s].get(key))]
    findings, run = [], []
    for step, value in [*defined, (None, 0.0)]:  # a sentinel closes the last run
        if step is not None and value < 0:
            run.append((step, value))
            continue
        if len(run) >= config.negative_ev_steps:
            worst = min(v for _, v in run)
            findings.append(
                Finding(
                    AlertRule.EXPLAINED_VARIANCE_NEGATIVE,
                    f"{key} < 0 in {len(run)} rollout steps in a row (lowest {worst:.3g}, threshold "
                    f"{config.negative_ev_steps}): the critic predicts returns worse than their mean; check the "
                    "critic's learning rate, value_clip and critic-only warm-up (num_critic_only_steps)",
                    tuple(s for s, _ in run),
                )
            )
        run = []
    return findings


def evaluate_alerts(
    rows: dict[int, dict[str, Any]],
    analysis: AnalysisProgress,
    config: AlertConfig | None = None,
    train_rows: Sequence[dict[str, Any]] = (),
) -> list[Finding]:
    """Every rule on rollout rows merged per step; `train_rows` (optimizer steps) feed the critic rule."""
    config = config or AlertConfig()
    findings: list[Finding] = []

    drops = [
        (s, r[m.TECHNICAL_GROUP_DROP_COUNT.name])
        for s, r in rows.items()
        if is_finite_number(r.get(m.TECHNICAL_GROUP_DROP_COUNT.name))
        and r[m.TECHNICAL_GROUP_DROP_COUNT.name] > 0
    ]
    if drops:
        total = sum(c for _, c in drops)
        findings.append(
            Finding(
                AlertRule.TECHNICAL_DROPS,
                (
                    f"technical_group_drop_count > 0: {total:g} group(s) dropped for technical failures; read the "
                    "training traces for environment, parser or model-service errors (not policy failures)"
                ),
                tuple(s for s, _ in drops),
            )
        )

    unscorable = [
        (s, r[m.SCORED_RATE.name])
        for s, r in rows.items()
        if is_finite_number(r.get(m.SCORED_RATE.name)) and r[m.SCORED_RATE.name] < 1
    ]
    if unscorable:
        worst = min(v for _, v in unscorable)
        findings.append(
            Finding(
                AlertRule.UNSCORABLE,
                (
                    f"scored_rate < 1 (lowest {worst:.4g}): completed generations hold unscorable trajectories; "
                    "check technical errors and resampling"
                ),
                tuple(s for s, _ in unscorable),
            )
        )

    findings += _drift(
        rows,
        config,
        m.SKILL_FREE_GROUP_RATE.name,
        m.COMPLETED_GROUP_COUNT.name,
        m.Q.name,
        AlertRule.SKILL_FREE_DRIFT,
        "skill-free groups drift from q",
    )
    chunk_ids = sorted(
        {
            key[len(m.SHOPSIM_PREFIX + "chunk/") : -len("/inclusion_rate")]
            for row in rows.values()
            for key in row
            if m.spec_for_key(key) is m.CHUNK_INCLUSION_RATE
        }
    )
    for chunk_id in chunk_ids:
        findings += _drift(
            rows,
            config,
            m.chunk_inclusion_rate_key(chunk_id),
            m.ASSISTED_GROUP_COUNT.name,
            m.chunk_target_rho_key(chunk_id),
            AlertRule.INCLUSION_DRIFT,
            f"chunk {chunk_id} inclusion drifts from target_rho",
        )

    all_wrong_steps = [s for s in rows if is_finite_number(rows[s].get(m.ALL_WRONG_GROUP_RATE.name))]
    for window in _windows(all_wrong_steps, config.window):
        rise = _rising([rows[s][m.ALL_WRONG_GROUP_RATE.name] for s in window], config.min_rise)
        retry = [
            rows[s][m.FULL_SKILL_RETRY_SUCCESS_RATE.name]
            for s in window
            if is_finite_number(rows[s].get(m.FULL_SKILL_RETRY_SUCCESS_RATE.name))
        ]
        if rise is not None and retry and sum(retry) / len(retry) >= config.retry_success:
            findings.append(
                Finding(
                    AlertRule.ALL_WRONG_WITH_RETRY_SUCCESS,
                    (
                        f"all_wrong_group_rate rose by {rise:.3f} while full-skill retries succeeded "
                        f"{sum(retry) / len(retry):.0%} of the time: evidence the model has not internalised the skills"
                    ),
                    tuple(window),
                )
            )

    pending_steps = [s for s in rows if is_finite_number(rows[s].get(m.PENDING_ANALYSIS_RATE.name))]
    if analysis.eligible_cards == 0 and analysis.candidates == 0:
        source = analysis.source or "no analysis/metrics.jsonl yet"
        for window in _windows(pending_steps, config.window):
            rise = _rising([rows[s][m.PENDING_ANALYSIS_RATE.name] for s in window], config.min_rise)
            if rise is not None:
                findings.append(
                    Finding(
                        AlertRule.PENDING_ANALYSIS_WITHOUT_CANDIDATES,
                        (
                            f"pending_analysis_rate rose by {rise:.3f} while eligible cards and candidates are 0 "
                            f"({source}): check the Analyst's counterfactual trial, firewall and compiler output"
                        ),
                        tuple(window),
                    )
                )
    findings += _negative_explained_variance(rows, config)
    findings += critic_loss_findings(train_rows)
    return findings


def check_run(run_dir: str | os.PathLike[str], config: AlertConfig | None = None) -> CheckReport:
    """Evaluate every alert rule on a run directory's metrics.jsonl."""
    path = find_metrics_file(run_dir)
    rows, problems = load_rollout_steps(path)
    report = CheckReport(metrics_path=path, steps=list(rows), problems=problems)
    report.findings = evaluate_alerts(rows, read_analysis_progress(path), config, load_train_rows(path))
    return report

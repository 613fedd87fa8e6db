"""The smoke acceptance report: each criterion of a minimal round, checked on the run's own record.

Criteria (spec 002 "GRPO smoke" and spec 000 section 8), evaluated from `<stage_dir>/metrics.jsonl`
(the audit record, not in-memory state) and the start-up summary line:

| criterion                       | required | passes when                                                           |
| ------------------------------- | -------- | --------------------------------------------------------------------- |
| startup_summary                 | yes      | the line shows mode=smoke, dtype, groups, total_batches and devices   |
| optimizer_step_completed        | yes      | at least one `train/step` row                                         |
| valid_group_every_step          | yes      | every rollout step trained on at least one accepted group            |
| slime_native_rollout_keys       | yes      | slime's `rollout/*` keys are in every rollout row                     |
| shopsim_rollout_keys            | yes      | `rollout/shopsim/*` keys are in every rollout row                     |
| first_batch_keys                | yes      | after the first batch: q, reward_mean, skill_free_group_rate and each |
|                                 |          | active chunk's target_rho and inclusion_rate                          |
| in_group_reward_difference      | no       | some group had different sibling rewards; all-equal rewards are a     |
|                                 |          | WARNING (no GRPO signal yet), not an infrastructure failure           |

With `driver.advantage_estimator: ppo` the PPO criteria of local/ppo_smoke.py are added (required),
and `observations` (explained variance, reward spread) sit beside them without deciding `passed`.

`passed` is true when every required criterion passes; the CLI exits non-zero otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from shopsimrl.local.ppo_smoke import ppo_criteria, ppo_observations
from shopsimrl.metrics import names as m
from shopsimrl.storage import atomic_write_json, read_jsonl
from shopsimrl.storage.layout import METRICS_FILE, SMOKE_REPORT_FILE

SMOKE_SCHEMA_VERSION = 1
SLIME_NATIVE_ROLLOUT_KEYS = (
    m.ROLLOUT_STEP.name,
    m.ROLLOUT_RAW_REWARD.name,
    m.ROLLOUT_RESPONSE_LEN_MEAN.name,
    m.ROLLOUT_RESPONSE_LEN_MEDIAN.name,
    m.ROLLOUT_RESPONSE_LEN_MAX.name,
    m.ROLLOUT_RESPONSE_LEN_MIN.name,
    m.ROLLOUT_TRUNCATED_RATIO.name,
    m.PERF_ROLLOUT_TIME.name,
)
_SUMMARY_FIELDS = ("mode", "dtype", "groups", "total_batches", "devices")


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"


@dataclass(frozen=True)
class Criterion:
    name: str
    required: bool
    status: Status
    evidence: str


@dataclass(frozen=True)
class SmokeReport:
    run_dir: str
    summary_line: str
    criteria: list[Criterion]
    observations: dict[str, Any] | None = None  # reported beside the verdict, never part of it (PPO)

    @property
    def passed(self) -> bool:
        return all(c.status is not Status.FAIL for c in self.criteria if c.required)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SMOKE_SCHEMA_VERSION,
            "run_dir": self.run_dir,
            "passed": self.passed,
            "summary_line": self.summary_line,
            "criteria": [{**asdict(c), "status": c.status.value} for c in self.criteria],
            **({"observations": self.observations} if self.observations is not None else {}),
        }


def _check(name: str, ok: bool, evidence: str, *, required: bool = True, soft: bool = False) -> Criterion:
    status = Status.PASS if ok else (Status.WARN if soft else Status.FAIL)
    return Criterion(name=name, required=required, status=status, evidence=evidence)


def parse_summary_line(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", line))


def evaluate_smoke(
    stage_dir: Path,
    summary_line: str,
    *,
    active_chunks: Sequence[str],
    in_group_reward_difference: bool,
    ppo: bool = False,
) -> SmokeReport:
    """Check every criterion on `<stage_dir>/metrics.jsonl`; nothing here trusts in-memory results."""
    read = read_jsonl(stage_dir / METRICS_FILE)
    rows = [r for r in read.records if isinstance(r, dict)]
    train_rows = [r for r in rows if m.TRAIN_STEP.name in r]
    rollout_rows = [r for r in rows if m.ROLLOUT_STEP.name in r and m.PERF_ROLLOUT_TIME.name in r]
    criteria: list[Criterion] = []

    fields = parse_summary_line(summary_line)
    missing_fields = [f for f in _SUMMARY_FIELDS if f not in fields]
    criteria.append(
        _check(
            "startup_summary",
            not missing_fields and fields.get("mode") == "smoke",
            summary_line if not missing_fields else f"{summary_line!r} lacks {missing_fields}",
        )
    )
    criteria.append(
        _check(
            "optimizer_step_completed",
            bool(train_rows),
            f"{len(train_rows)} optimizer step(s): train/step = {[r[m.TRAIN_STEP.name] for r in train_rows]}",
        )
    )
    per_step = []
    for row in rollout_rows:
        accepted = row.get(m.TRAIN_GROUP_COUNT.name, 0)
        per_step.append(f"rollout/step {row[m.ROLLOUT_STEP.name]}: {accepted:g} accepted group(s)")
    criteria.append(
        _check(
            "valid_group_every_step",
            bool(rollout_rows) and all(r.get(m.TRAIN_GROUP_COUNT.name, 0) >= 1 for r in rollout_rows),
            "; ".join(per_step) or "no rollout row in metrics.jsonl",
        )
    )
    missing_native = sorted({k for r in rollout_rows for k in SLIME_NATIVE_ROLLOUT_KEYS if k not in r})
    criteria.append(
        _check(
            "slime_native_rollout_keys",
            bool(rollout_rows) and not missing_native,
            f"missing: {missing_native}"
            if missing_native
            else f"present in {len(rollout_rows)} row(s): " + ", ".join(SLIME_NATIVE_ROLLOUT_KEYS),
        )
    )
    shopsim_counts = [sum(1 for k in r if k.startswith(m.SHOPSIM_PREFIX)) for r in rollout_rows]
    criteria.append(
        _check(
            "shopsim_rollout_keys",
            bool(rollout_rows) and all(shopsim_counts),
            f"rollout/shopsim/* keys per rollout row: {shopsim_counts}",
        )
    )
    first = rollout_rows[0] if rollout_rows else {}
    wanted = [m.Q.name, m.REWARD_MEAN.name, m.SKILL_FREE_GROUP_RATE.name]
    for chunk in active_chunks:
        wanted += [m.chunk_target_rho_key(chunk), m.chunk_inclusion_rate_key(chunk)]
    absent = [k for k in wanted if k not in first]
    criteria.append(
        _check(
            "first_batch_keys",
            bool(first) and not absent,
            f"missing after the first batch: {absent}"
            if absent
            else "present: " + ", ".join(f"{k}={first[k]:g}" for k in wanted),
        )
    )
    criteria.append(
        _check(
            "in_group_reward_difference",
            in_group_reward_difference,
            "some group had different sibling rewards"
            if in_group_reward_difference
            else "WARNING: every group's sibling rewards were equal; the infrastructure works but "
            + ("the rewards carried no signal (PPO's advantages here are the critic's errors alone)" if ppo
               else "GRPO had no advantage")  # fmt: skip
            + ". Get at least one in-group reward difference before a formal run",
            required=False,
            soft=True,
        )
    )
    observations = None
    if ppo:
        criteria += [_check(name, ok, evidence) for name, ok, evidence in ppo_criteria(rows)]
        observations = ppo_observations(rows, in_group_reward_difference)
    if read.problems:
        criteria.append(_check("metrics_file_readable", False, "; ".join(str(p) for p in read.problems)))
    return SmokeReport(
        run_dir=str(stage_dir), summary_line=summary_line, criteria=criteria, observations=observations
    )


def write_smoke_report(report: SmokeReport, stage_dir: Path) -> Path:
    return atomic_write_json(stage_dir / SMOKE_REPORT_FILE, report.to_dict())

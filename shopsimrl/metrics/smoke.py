"""The smoke acceptance report, one implementation for both backends: criteria on a run's metric rows.

The rows are the run's own record: the local backend's `<stage_dir>/metrics.jsonl`
(shopsimrl/local/smoke.py) or slime's job log read back into the same rows (shopsimrl/ops/slime_log.py,
shopsimrl/ops/slime_smoke.py). Each backend adds its start-up summary line and where its record was
unreadable; the criteria on the rows are these:

| criterion                       | required | passes when                                                           |
| ------------------------------- | -------- | --------------------------------------------------------------------- |
| startup_summary                 | yes      | the line shows mode=smoke and the backend's fields (local: dtype,     |
|                                 |          | groups, total_batches, devices; slime: groups, rollouts, gpus)       |
| optimizer_step_completed        | yes      | at least one actor `train/step` row (no `train/critic-*` key)         |
| actor_loss_finite               | yes      | slime GRPO: every actor step's train/loss ... grad_norm is finite     |
| valid_group_every_step          | yes      | every rollout step trained on at least one accepted group            |
| slime_native_rollout_keys       | yes      | slime's `rollout/*` keys are in every rollout row                     |
| shopsim_rollout_keys            | yes      | `rollout/shopsim/*` keys are in every rollout row                     |
| first_batch_keys                | yes      | after the first batch: q, reward_mean, skill_free_group_rate and each |
|                                 |          | active chunk's target_rho and inclusion_rate                          |
| in_group_reward_difference      | no       | some group had different sibling rewards; all-equal rewards are a     |
|                                 |          | WARNING (no GRPO signal yet), not an infrastructure failure           |

Under PPO the criteria of metrics/ppo_smoke.py are added (required; they include the actor's finite
losses), and `observations` (explained variance, reward spread) sit beside them without deciding
`passed`. `passed` is true when every required criterion passes; the CLIs exit non-zero otherwise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from shopsimrl.metrics import names as m
from shopsimrl.metrics.ppo_records import REQUIRED_ACTOR_KEYS, actor_problems, split_rows
from shopsimrl.metrics.ppo_smoke import finite_criterion, ppo_criteria, ppo_observations
from shopsimrl.storage import atomic_write_json
from shopsimrl.storage.layout import SMOKE_REPORT_FILE

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


def check(name: str, ok: bool, evidence: str, *, required: bool = True, soft: bool = False) -> Criterion:
    status = Status.PASS if ok else (Status.WARN if soft else Status.FAIL)
    return Criterion(name=name, required=required, status=status, evidence=evidence)


def parse_summary_line(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", line))


def startup_summary_criterion(summary_line: str, fields: Sequence[str]) -> Criterion:
    """The start-up summary line shows mode=smoke and every one of the backend's `fields`."""
    found = parse_summary_line(summary_line)
    missing = [f for f in fields if f not in found]
    return check(
        "startup_summary",
        not missing and found.get("mode") == "smoke",
        summary_line if not missing else f"{summary_line!r} lacks {missing}",
    )


def actor_loss_criterion(rows: Sequence[Mapping[str, Any]], *, source: str) -> Criterion:
    """Every actor step's loss keys are finite (under PPO, ppo_actor_loss_finite says the same)."""
    split = split_rows(rows)
    return check(*finite_criterion("actor_loss_finite", actor_problems(split), split.actor_rows,
                                   REQUIRED_ACTOR_KEYS[:2], m.TRAIN_STEP.name, source))  # fmt: skip


def row_criteria(
    rows: Sequence[Mapping[str, Any]],
    *,
    active_chunks: Sequence[str],
    in_group_reward_difference: bool,
    ppo: bool,
    source: str = "metrics.jsonl",
) -> tuple[list[Criterion], dict[str, Any] | None]:
    """Every criterion on the rows (table above, after startup_summary), and the PPO observations.

    A rollout row has `rollout/step` and `perf/rollout_time`; a train row has `train/step`.
    """
    actor_rows = split_rows(rows).actor_rows
    rollout_rows = [r for r in rows if m.ROLLOUT_STEP.name in r and m.PERF_ROLLOUT_TIME.name in r]
    criteria = [
        check(
            "optimizer_step_completed",
            bool(actor_rows),
            f"{len(actor_rows)} optimizer step(s): train/step = {[r[m.TRAIN_STEP.name] for r in actor_rows]}",
        )
    ]
    per_step = []
    for row in rollout_rows:
        accepted = row.get(m.TRAIN_GROUP_COUNT.name, 0)
        per_step.append(f"rollout/step {row[m.ROLLOUT_STEP.name]}: {accepted:g} accepted group(s)")
    criteria.append(
        check(
            "valid_group_every_step",
            bool(rollout_rows) and all(r.get(m.TRAIN_GROUP_COUNT.name, 0) >= 1 for r in rollout_rows),
            "; ".join(per_step) or f"no rollout row in {source}",
        )
    )
    missing_native = sorted({k for r in rollout_rows for k in SLIME_NATIVE_ROLLOUT_KEYS if k not in r})
    criteria.append(
        check(
            "slime_native_rollout_keys",
            bool(rollout_rows) and not missing_native,
            f"missing: {missing_native}"
            if missing_native
            else f"present in {len(rollout_rows)} row(s): " + ", ".join(SLIME_NATIVE_ROLLOUT_KEYS),
        )
    )
    shopsim_counts = [sum(1 for k in r if k.startswith(m.SHOPSIM_PREFIX)) for r in rollout_rows]
    criteria.append(
        check(
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
        check(
            "first_batch_keys",
            bool(first) and not absent,
            f"missing after the first batch: {absent}"
            if absent
            else "present: " + ", ".join(f"{k}={first[k]:g}" for k in wanted),
        )
    )
    criteria.append(
        check(
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
    if not ppo:
        return criteria, None
    criteria += [check(name, ok, evidence) for name, ok, evidence in ppo_criteria(rows, source=source)]
    return criteria, ppo_observations(rows, in_group_reward_difference)


def write_smoke_report(report: SmokeReport, stage_dir: Path) -> Path:
    return atomic_write_json(stage_dir / SMOKE_REPORT_FILE, report.to_dict())


def report_lines(report: SmokeReport, path: Path) -> list[str]:
    """What the smoke commands print: each criterion with its evidence, the observations beside the
    verdict (never part of it), where the report is, and the verdict as one JSON line."""
    lines = [
        f"{criterion.status.value.upper():4}  {criterion.name}: {criterion.evidence}"
        for criterion in report.criteria
    ]
    if report.observations is not None:
        lines.append("observations (not part of pass): " + json.dumps(report.observations, sort_keys=True))
    lines += [f"smoke report: {path}", json.dumps({"passed": report.passed})]
    return lines

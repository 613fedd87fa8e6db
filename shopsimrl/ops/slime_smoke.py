"""The slime smoke's acceptance report: the local smoke's criteria, checked on slime's job log.

`scripts/run_shopsimrl_slime.sh` in smoke mode (RUN_MODE=smoke) keeps the job's output in
`<run_dir>/slime_job.log`, its own summary line first, and after the job runs
`shopsimrl slime smoke-report`, which calls `evaluate_slime_smoke` and writes
`<run_dir>/smoke_report.json`. The criteria are shared with the local backend
(shopsimrl/metrics/smoke.py, PPO's in shopsimrl/metrics/ppo_smoke.py); on slime:

- startup_summary reads the launcher's line (`mode=smoke ... groups=... rollouts=... gpus=...`);
- actor_loss_finite is added under GRPO (PPO's ppo_actor_loss_finite checks the same keys);
- in_group_reward_difference (a warning only) is `rollout/shopsim/zero_std_group_rate` < 1 in some rollout;
- slime_log_readable fails on a metric line that could not be read (ops/slime_log.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from shopsimrl.metrics import names as m
from shopsimrl.metrics.ppo_records import is_finite_number
from shopsimrl.metrics.smoke import (
    SmokeReport,
    actor_loss_criterion,
    check,
    row_criteria,
    startup_summary_criterion,
)
from shopsimrl.ops.slime_log import metric_rows, read_slime_log

SUMMARY_FIELDS = ("mode", "groups", "rollouts", "gpus")


def evaluate_slime_smoke(log_path: Path, *, ppo: bool, active_chunks: Sequence[str] = ()) -> SmokeReport:
    """Every criterion on the job log at `log_path`; the report's run_dir is the log's directory."""
    log = read_slime_log(log_path)
    rows = metric_rows(log)
    zero_std = [r[m.ZERO_STD_GROUP_RATE.name] for r in rows if is_finite_number(r.get(m.ZERO_STD_GROUP_RATE.name))]
    criteria, observations = row_criteria(
        rows,
        active_chunks=active_chunks,
        in_group_reward_difference=any(rate < 1 for rate in zero_std),
        ppo=ppo,
        source=log_path.name,
    )
    summary = log.summary_line or ""
    startup = startup_summary_criterion(summary, SUMMARY_FIELDS)
    if log.summary_line is None:
        startup = check("startup_summary", False, f"no line starting 'run_shopsimrl_slime.sh: mode=' in {log_path}")
    criteria.insert(0, startup)
    if not ppo:
        criteria.insert(2, actor_loss_criterion(rows, source=log_path.name))
    read = f"{len(log.metric_lines)} metric line(s) of slime among {log.line_count} line(s) of {log_path.name}"
    criteria.append(check("slime_log_readable", not log.problems, "; ".join(log.problems) or read))
    return SmokeReport(run_dir=str(log_path.parent), summary_line=summary, criteria=criteria,
                       observations=observations)  # fmt: skip

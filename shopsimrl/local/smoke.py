"""The local smoke's acceptance report: each criterion of a minimal round, checked on the run's own record.

The criteria are shared with the slime smoke (shopsimrl/metrics/smoke.py has the table; PPO's in
shopsimrl/metrics/ppo_smoke.py). Here they are evaluated from `<stage_dir>/metrics.jsonl` (spec 002
"GRPO smoke" and spec 000 section 8: the audit record, not in-memory state) and the start-up summary
line, which must show mode=smoke, dtype, groups, total_batches and devices. An unreadable
metrics.jsonl line adds the failing criterion `metrics_file_readable`.

`passed` is true when every required criterion passes; the CLI exits non-zero otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from shopsimrl.metrics.smoke import (
    Criterion,
    SmokeReport,
    Status,
    check,
    parse_summary_line,
    row_criteria,
    startup_summary_criterion,
    write_smoke_report,
)
from shopsimrl.storage import read_jsonl
from shopsimrl.storage.layout import METRICS_FILE

__all__ = ["Criterion", "SmokeReport", "Status", "evaluate_smoke", "parse_summary_line", "write_smoke_report"]

SUMMARY_FIELDS = ("mode", "dtype", "groups", "total_batches", "devices")


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
    criteria, observations = row_criteria(
        rows, active_chunks=active_chunks, in_group_reward_difference=in_group_reward_difference, ppo=ppo
    )
    criteria.insert(0, startup_summary_criterion(summary_line, SUMMARY_FIELDS))
    if read.problems:
        criteria.append(check("metrics_file_readable", False, "; ".join(str(p) for p in read.problems)))
    return SmokeReport(
        run_dir=str(stage_dir), summary_line=summary_line, criteria=criteria, observations=observations
    )

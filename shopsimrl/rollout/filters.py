"""The dynamic sampling filter (`--dynamic-sampling-filter-path`), slime v0.3.1 semantics.

Decision per completed group, in this order:

1. a diagnostic full-skill retry never trains: drop, never kept when insufficient;
2. a technical failure in any sibling: drop, never kept when insufficient (slime resamples it);
3. zero-std (the scorable siblings' rewards, one per trajectory, all equal; reward key from the
   options): drop with `keep_when_insufficient=True`, so slime keeps it when it has no slack left;
4. otherwise keep.

Reasons become slime's counters `rollout/dynamic_filter/drop_<reason>`; the metrics read them back.
docs/dynamic_sampling_filter.md explains waves, `remaining` and when a zero-std group is really lost.
"""

from __future__ import annotations

from typing import Any

from shopsimrl.config.options import options_from_args
from shopsimrl.contract import DynamicFilterOutput
from shopsimrl.metrics.groups import GroupSummary, summarize_group

REASON_TECHNICAL = "technical_error"
REASON_RETRY = "diagnostic_retry"
ZERO_STD_REASON_PREFIX = "zero_std_"


def zero_std_reason(reward: float) -> str:
    """slime's spelling: `zero_std_<first reward rounded to 1 decimal>`."""
    return f"{ZERO_STD_REASON_PREFIX}{round(reward, 1)}"


def filter_decision(summary: GroupSummary, reward_key: str) -> DynamicFilterOutput:
    """The pure decision on a summarised group (shared by the hook, the local driver and the metrics)."""
    if summary.is_retry:
        return DynamicFilterOutput(keep=False, reason=REASON_RETRY, keep_when_insufficient=False)
    if summary.has_technical_error:
        return DynamicFilterOutput(keep=False, reason=REASON_TECHNICAL, keep_when_insufficient=False)
    if summary.is_zero_std(reward_key):
        first = summary.scorable_rewards(reward_key)[0]
        return DynamicFilterOutput(keep=False, reason=zero_std_reason(first), keep_when_insufficient=True)
    return DynamicFilterOutput(keep=True)


def dynamic_sampling_filter(args: Any, samples: list[Any], **kwargs: Any) -> DynamicFilterOutput:
    """slime hook: `fn(args, samples, **kwargs) -> DynamicFilterOutput`; `samples` may be fan-out lists."""
    options = options_from_args(args)
    return filter_decision(summarize_group(samples), options.reward_key)

"""Metric names declared once (`names`), the units they count (`groups`) and the pure computation.

    names.py         every key we log, with unit, denominator and direction
    groups.py        group and trajectory summaries of finished samples
    compute.py       the `rollout/shopsim/*` metrics of one rollout step
    slime_native.py  slime's own `rollout/*` and `perf/*` metrics, recomputed by the CPU backend
    ppo_records.py   the keys a PPO run must leave in its records, and the check of a run's rows
    ppo_spread.py    PPO value/return/advantage spreads and explained variance, one definition for both backends
    resources.py     host and accelerator memory, checkpoint size and time per batch of a training process
    smoke.py         the smoke acceptance report: criteria on a run's rows, shared by both backends
    ppo_smoke.py     the PPO smoke's criteria and observations (used by smoke.py)
    alerts.py, live_alerts.py, commands.py   alert rules on a run's metrics and `shopsimrl metrics`

The slime hooks that log these (`shopsimrl.slime_metrics`) sit above records and rollout, so they
live at the top of the package beside `shopsimrl.slime_hooks`, not here.
"""

from shopsimrl.metrics.compute import RetryOutcome, RolloutMetricsInput, TriageCounts, compute_shopsim_metrics
from shopsimrl.metrics.groups import (
    GroupSummary,
    TrajectorySummary,
    flatten_group,
    group_samples_by_index,
    summarize_group,
)
from shopsimrl.metrics.names import (
    DYNAMIC_FILTER_DROP_PREFIX,
    REGISTRY,
    SHOPSIM_PREFIX,
    Direction,
    MetricSpec,
    chunk_inclusion_rate_key,
    chunk_target_rho_key,
    dynamic_filter_drop_key,
    shopsim_specs,
    spec_for_key,
)

__all__ = [
    "DYNAMIC_FILTER_DROP_PREFIX",
    "REGISTRY",
    "SHOPSIM_PREFIX",
    "Direction",
    "GroupSummary",
    "MetricSpec",
    "RetryOutcome",
    "RolloutMetricsInput",
    "TrajectorySummary",
    "TriageCounts",
    "chunk_inclusion_rate_key",
    "chunk_target_rho_key",
    "compute_shopsim_metrics",
    "dynamic_filter_drop_key",
    "flatten_group",
    "group_samples_by_index",
    "shopsim_specs",
    "spec_for_key",
    "summarize_group",
]

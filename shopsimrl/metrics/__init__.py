"""Metric names declared once (`names`), the units they count (`groups`) and the pure computation."""

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

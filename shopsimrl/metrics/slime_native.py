"""slime's own rollout-side metrics, computed from the trained samples as slime computes them.

`compute_metrics_from_samples` and `compute_perf_metrics_from_samples` of slime's rollout logging
(slime v0.3.1's `log_rollout_data`; docs/metrics.md, "slime-native names"): statistics over the *flattened kept batch* (every segment is a
sample, as in slime), so they keep slime's denominators, not ours. Keys returned here are complete
(`rollout/...`, `perf/...`). Not reproduced: `repetition_frac`, speculative-decoding, prefix-cache
and SGLang request timings (no such data on the CPU backend).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from shopsimrl.contract import Sample
from shopsimrl.metrics import names as m


def effective_response_length(sample: Any) -> int:
    """slime's property: loss-masked tokens, or the whole response without a mask."""
    return int(sum(sample.loss_mask)) if sample.loss_mask is not None else int(sample.response_length)


def sample_metrics(args: Any, samples: Sequence[Any]) -> dict[str, float]:
    """`rollout/response_len/*`, `rollout/zero_std/count_<r>`, `rollout/truncated_ratio`."""
    if not samples:
        raise ValueError("no samples: slime logs rollout metrics only for a non-empty batch")
    lengths = [effective_response_length(s) for s in samples]
    out: dict[str, float] = {
        m.ROLLOUT_RESPONSE_LEN_MEAN.name: float(statistics.fmean(lengths)),
        m.ROLLOUT_RESPONSE_LEN_MEDIAN.name: float(statistics.median(lengths)),
        m.ROLLOUT_RESPONSE_LEN_MAX.name: float(max(lengths)),
        m.ROLLOUT_RESPONSE_LEN_MIN.name: float(min(lengths)),
    }
    # slime's `_compute_zero_std_metrics` returns nothing for ppo. A namespace without the estimator
    # (a hook test's) means slime's default, grpo.
    if getattr(args, "advantage_estimator", "grpo") != "ppo":
        out.update(zero_std_counts(args, samples))
    out[m.ROLLOUT_TRUNCATED_RATIO.name] = sum(
        1 for s in samples if s.status == Sample.Status.TRUNCATED
    ) / len(samples)
    return out


def zero_std_counts(args: Any, samples: Sequence[Any]) -> dict[str, float]:
    """Kept groups (by group_index) whose sample rewards are all equal, keyed by the first reward."""
    by_group: dict[Any, list[float]] = defaultdict(list)
    for sample in samples:
        by_group[sample.group_index].append(float(sample.get_reward_value(args)))
    counts: dict[str, float] = defaultdict(float)
    for rewards in by_group.values():
        if max(rewards) - min(rewards) == 0:
            counts[m.zero_std_count_key(rewards[0])] += 1
    return dict(counts)


def perf_metrics(samples: Sequence[Any], rollout_time: float, rollout_num_gpus: int = 1) -> dict[str, float]:
    """`perf/rollout_time` and slime's token throughputs (one device on the CPU backend)."""
    raw = [int(s.response_length) for s in samples]
    effective = [effective_response_length(s) for s in samples]
    safe_time = rollout_time if rollout_time > 0 else float("inf")
    return {
        m.PERF_ROLLOUT_TIME.name: rollout_time,
        m.PERF_TOKENS_PER_GPU_PER_SEC.name: sum(raw) / safe_time / rollout_num_gpus,
        m.PERF_LONGEST_SAMPLE_TOKENS_PER_SEC.name: max(raw) / safe_time,
        m.PERF_EFFECTIVE_TOKENS_PER_GPU_PER_SEC.name: sum(effective) / safe_time / rollout_num_gpus,
        m.PERF_LONGEST_EFFECTIVE_SAMPLE_TOKENS_PER_SEC.name: max(effective) / safe_time,
    }


def train_side_rollout_metrics(
    samples: Sequence[Any], raw_rewards: Sequence[float], rewards: Sequence[float]
) -> dict[str, float]:
    """slime's train-side `rollout/<field>` means: raw_reward (per sample), rewards, lengths."""
    n = len(samples)
    out = {
        m.ROLLOUT_RAW_REWARD.name: sum(float(r) for r in raw_rewards) / n,
        m.ROLLOUT_REWARDS.name: sum(float(r) for r in rewards) / n,
        m.ROLLOUT_RESPONSE_LENGTHS.name: sum(int(s.response_length) for s in samples) / n,
        m.ROLLOUT_TOTAL_LENGTHS.name: sum(len(s.tokens) for s in samples) / n,
    }
    trained = [
        (lp, mask)
        for s in samples
        if s.rollout_log_probs is not None
        for lp, mask in zip(s.rollout_log_probs, s.loss_mask or [1] * s.response_length, strict=True)
    ]
    masked = [lp for lp, mask in trained if mask]
    if masked:
        out[m.ROLLOUT_ROLLOUT_LOG_PROBS.name] = sum(masked) / len(masked)
    return out

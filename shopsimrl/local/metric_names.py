"""slime-native metric names the local backend logs that `shopsimrl.metrics.names` does not declare.

Same declaration shape as the registry (MetricSpec: unit, denominator, direction); names, axes and
meaning from reference/slime.md section 8. `LOCAL_SPECS` lists them for docs and tests.
"""

from __future__ import annotations

from shopsimrl.metrics.names import Direction, MetricSpec

_D = Direction

TRAIN_KL_LOSS = MetricSpec(
    "train/kl_loss",
    "nats",
    "loss-masked tokens",
    _D.INFORMATIONAL,
    "KL to the reference model (with use_kl_loss)",
)
TRAIN_GLOBAL_BATCH_SIZE = MetricSpec(
    "train/global_batch_size", "trajectories", "-", _D.INFORMATIONAL, "trajectories in this optimizer step"
)
TRAIN_LR_PG0 = MetricSpec(
    "train/lr-pg_0", "learning rate", "-", _D.INFORMATIONAL, "learning rate of parameter group 0"
)
PERF_LOG_PROBS_TIME = MetricSpec(
    "perf/log_probs_time", "s", "-", _D.LOWER_IS_BETTER, "old log-probs of the rollout batch"
)
PERF_REF_LOG_PROBS_TIME = MetricSpec(
    "perf/ref_log_probs_time",
    "s",
    "-",
    _D.LOWER_IS_BETTER,
    "reference log-probs of the rollout batch (with use_kl_loss)",
)
PERF_ACTOR_TRAIN_TIME = MetricSpec(
    "perf/actor_train_time", "s", "-", _D.LOWER_IS_BETTER, "optimizer steps of the rollout"
)
PERF_TRAIN_TIME = MetricSpec(
    "perf/train_time", "s", "-", _D.LOWER_IS_BETTER, "log-probs + optimizer steps of the rollout"
)
PERF_TOKENS_PER_GPU_PER_SEC = MetricSpec(
    "perf/tokens_per_gpu_per_sec",
    "tokens/s",
    "-",
    _D.HIGHER_IS_BETTER,
    "generated response tokens / rollout time (one device here)",
)
PERF_LONGEST_SAMPLE_TOKENS_PER_SEC = MetricSpec(
    "perf/longest_sample_tokens_per_sec", "tokens/s", "-", _D.INFORMATIONAL, "longest response / rollout time"
)
PERF_EFFECTIVE_TOKENS_PER_GPU_PER_SEC = MetricSpec(
    "perf/effective_tokens_per_gpu_per_sec",
    "tokens/s",
    "-",
    _D.HIGHER_IS_BETTER,
    "loss-masked response tokens / rollout time",
)
PERF_LONGEST_EFFECTIVE_SAMPLE_TOKENS_PER_SEC = MetricSpec(
    "perf/longest_effective_sample_tokens_per_sec",
    "tokens/s",
    "-",
    _D.INFORMATIONAL,
    "longest loss-masked response / rollout time",
)
ZERO_STD_COUNT = MetricSpec(
    "rollout/zero_std/count_<r>",
    "groups",
    "-",
    _D.INFORMATIONAL,
    "kept groups whose sample rewards are all equal (r: first reward, 1 decimal)",
)
PERF_STEP_TIME = MetricSpec(
    "perf/step_time", "s", "-", _D.LOWER_IS_BETTER, "rollout + training of one rollout step"
)
ROLLOUT_REWARDS = MetricSpec(
    "rollout/rewards",
    "advantage",
    "samples",
    _D.INFORMATIONAL,
    "mean post-processed reward (GRPO advantage) of the trained samples",
)
ROLLOUT_RESPONSE_LENGTHS = MetricSpec(
    "rollout/response_lengths",
    "tokens",
    "samples",
    _D.INFORMATIONAL,
    "mean response length (all response tokens) of the trained samples",
)
ROLLOUT_TOTAL_LENGTHS = MetricSpec(
    "rollout/total_lengths",
    "tokens",
    "samples",
    _D.INFORMATIONAL,
    "mean prompt + response length of the trained samples",
)
ROLLOUT_ROLLOUT_LOG_PROBS = MetricSpec(
    "rollout/rollout_log_probs",
    "nats",
    "loss-masked tokens",
    _D.INFORMATIONAL,
    "mean rollout log-prob of the trained tokens",
)

LOCAL_SPECS = (
    TRAIN_KL_LOSS,
    TRAIN_GLOBAL_BATCH_SIZE,
    TRAIN_LR_PG0,
    PERF_LOG_PROBS_TIME,
    PERF_REF_LOG_PROBS_TIME,
    PERF_ACTOR_TRAIN_TIME,
    PERF_TRAIN_TIME,
    PERF_TOKENS_PER_GPU_PER_SEC,
    PERF_LONGEST_SAMPLE_TOKENS_PER_SEC,
    PERF_EFFECTIVE_TOKENS_PER_GPU_PER_SEC,
    PERF_LONGEST_EFFECTIVE_SAMPLE_TOKENS_PER_SEC,
    ZERO_STD_COUNT,
    PERF_STEP_TIME,
    ROLLOUT_REWARDS,
    ROLLOUT_RESPONSE_LENGTHS,
    ROLLOUT_TOTAL_LENGTHS,
    ROLLOUT_ROLLOUT_LOG_PROBS,
)


def zero_std_count_key(first_reward: float) -> str:
    """slime's spelling: `rollout/zero_std/count_<first reward rounded to 1 decimal>`."""
    return ZERO_STD_COUNT.name.replace("<r>", str(round(first_reward, 1)))

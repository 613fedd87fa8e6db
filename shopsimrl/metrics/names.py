"""Every metric name we log, declared once with its unit, denominator and direction.

Code that logs or reads a metric imports the name from here; no key string is spelled elsewhere.
Two families:

* `rollout/shopsim/*`: our rollout metrics (docs/metrics.md, "`rollout/shopsim/*`"). Unless the
  name starts with `train_`, a metric covers every completed generation of the step: kept, dropped
  and surplus groups. Units: a *trajectory* is a unique (group_index, rollout_id); a *completed
  group* is a group whose siblings all finished; *accepted* groups entered the trainer.
* slime-native names (slime v0.3.1's; docs/metrics.md, "slime-native names") that the local backend logs with slime's step
  semantics, so every downstream tool works on both backends.

A rate whose denominator is 0 in a step is *absent* from that step's dict (never a made-up 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

SHOPSIM_PREFIX = "rollout/shopsim/"
DYNAMIC_FILTER_DROP_PREFIX = "rollout/dynamic_filter/drop_"
ZERO_STD_COUNT_PREFIX = "rollout/zero_std/count_"


class Direction(StrEnum):
    """How to read a metric: which way is good, or that it is compared with a target."""

    HIGHER_IS_BETTER = "higher_is_better"
    LOWER_IS_BETTER = "lower_is_better"
    MATCH_TARGET = "match_target"  # compare with a configured value (q, rho)
    INFORMATIONAL = "informational"  # a setting, a count or a step axis


@dataclass(frozen=True)
class MetricSpec:
    name: str
    unit: str
    denominator: str  # "-" for values that are not ratios
    direction: Direction
    description: str

    def key(self, chunk_id: str | None = None) -> str:
        """The logged key; templated names (containing `<id>`) need the chunk id."""
        if "<id>" in self.name:
            if chunk_id is None:
                raise ValueError(f"metric {self.name} needs a chunk id")
            return self.name.replace("<id>", chunk_id)
        if chunk_id is not None:
            raise ValueError(f"metric {self.name} takes no chunk id")
        return self.name


REGISTRY: dict[str, MetricSpec] = {}


def _declare(name: str, unit: str, denominator: str, direction: Direction, description: str) -> MetricSpec:
    if name in REGISTRY:
        raise ValueError(f"metric {name} declared twice")
    spec = MetricSpec(name, unit, denominator, direction, description)
    REGISTRY[name] = spec
    return spec


_D = Direction
_S = SHOPSIM_PREFIX

# ---- rollout/shopsim/*: every completed generation of the step --------------------------------
Q = _declare(_S + "q", "probability", "-", _D.INFORMATIONAL, "configured skill-free probability of this step")
REWARD_MEAN = _declare(
    _S + "reward_mean",
    "reward in [0, 1]",
    "scorable trajectories",
    _D.HIGHER_IS_BETTER,
    "mean partial-credit reward",
)
STRICT_REWARD_MEAN = _declare(
    _S + "strict_reward_mean",
    "reward in {0, 1}",
    "scorable trajectories",
    _D.HIGHER_IS_BETTER,
    "mean all-or-nothing reward",
)
SUCCESS_RATE = _declare(
    _S + "success_rate",
    "fraction",
    "scorable trajectories",
    _D.HIGHER_IS_BETTER,
    "trajectories whose outcome is a success",
)
SCORED_RATE = _declare(
    _S + "scored_rate",
    "fraction",
    "completed trajectories",
    _D.HIGHER_IS_BETTER,
    "scorable trajectories (no technical error); should be 1",
)
SKILL_FREE_GROUP_RATE = _declare(
    _S + "skill_free_group_rate",
    "fraction",
    "completed groups",
    _D.MATCH_TARGET,
    "skill-free groups; compare with q",
)
CHUNK_TARGET_RHO = _declare(
    _S + "chunk/<id>/target_rho",
    "probability",
    "-",
    _D.INFORMATIONAL,
    "configured inclusion probability of the chunk",
)
CHUNK_INCLUSION_RATE = _declare(
    _S + "chunk/<id>/inclusion_rate",
    "fraction",
    "assisted + assisted-empty completed groups",
    _D.MATCH_TARGET,
    "groups whose mask includes the chunk; compare with target_rho",
)
ALL_WRONG_GROUP_RATE = _declare(
    _S + "all_wrong_group_rate",
    "fraction",
    "completed groups",
    _D.LOWER_IS_BETTER,
    "groups in which every sibling is scorable and none succeeded",
)
ZERO_STD_GROUP_RATE = _declare(
    _S + "zero_std_group_rate",
    "fraction",
    "completed groups",
    _D.LOWER_IS_BETTER,
    "occurrence: groups whose scorable sibling rewards are all equal",
)
ZERO_STD_GROUP_DROP_RATE = _declare(
    _S + "zero_std_group_drop_rate",
    "ratio",
    "accepted groups",
    _D.INFORMATIONAL,
    "zero-std groups really dropped by the dynamic filter",
)
TECHNICAL_GROUP_DROP_COUNT = _declare(
    _S + "technical_group_drop_count",
    "groups",
    "-",
    _D.LOWER_IS_BETTER,
    "groups dropped for a technical failure; should be 0",
)
TECHNICAL_GROUP_DROP_RATE = _declare(
    _S + "technical_group_drop_rate",
    "ratio",
    "accepted groups",
    _D.LOWER_IS_BETTER,
    "groups dropped for a technical failure",
)
RUNTIME_ERROR_GROUP_RATE = _declare(
    _S + "runtime_error_group_rate",
    "fraction",
    "completed groups",
    _D.LOWER_IS_BETTER,
    "groups with a triaged technical error in training or diagnostic retry",
)
FULL_SKILL_RETRY_SUCCESS_RATE = _declare(
    _S + "full_skill_retry_success_rate",
    "fraction",
    "scorable diagnostic retries finished since the last log",
    _D.INFORMATIONAL,
    "all-wrong tasks solved when every active chunk is included",
)
PENDING_ANALYSIS_RATE = _declare(
    _S + "pending_analysis_rate",
    "fraction",
    "triaged all-wrong groups of this round",
    _D.LOWER_IS_BETTER,
    "triaged all-wrong groups without a failure card yet",
)
COMPLETED_GROUP_COUNT = _declare(
    _S + "completed_group_count",
    "groups",
    "-",
    _D.INFORMATIONAL,
    "completed groups of the step (denominator of the group rates)",
)
ASSISTED_GROUP_COUNT = _declare(
    _S + "assisted_group_count",
    "groups",
    "-",
    _D.INFORMATIONAL,
    "assisted + assisted-empty completed groups (inclusion denominator)",
)
SOURCE_ALL_SAMPLES = _declare(
    _S + "source_all_samples",
    "flag 0/1",
    "-",
    _D.INFORMATIONAL,
    "1: computed over every completed group (all-samples hook ran); "
    "0: fallback to the trainer's accepted samples only",
)

# ---- rollout/shopsim/train_*: accepted groups only ----------------------------------------------
TRAIN_REWARD_MEAN = _declare(
    _S + "train_reward_mean",
    "reward in [0, 1]",
    "scorable trajectories of accepted groups",
    _D.HIGHER_IS_BETTER,
    "mean reward of what GRPO trained on",
)
TRAIN_STRICT_REWARD_MEAN = _declare(
    _S + "train_strict_reward_mean",
    "reward in {0, 1}",
    "scorable trajectories of accepted groups",
    _D.HIGHER_IS_BETTER,
    "mean strict reward of what GRPO trained on",
)
TRAIN_SUCCESS_RATE = _declare(
    _S + "train_success_rate",
    "fraction",
    "scorable trajectories of accepted groups",
    _D.HIGHER_IS_BETTER,
    "success rate of what GRPO trained on",
)
TRAIN_GROUP_COUNT = _declare(
    _S + "train_group_count", "groups", "-", _D.INFORMATIONAL, "accepted groups (entered the trainer)"
)

# ---- slime-native names (docs/metrics.md, "slime-native names") --------------------------------
ROLLOUT_STEP = _declare("rollout/step", "step", "-", _D.INFORMATIONAL, "x-axis of rollout/*, perf/*")
ROLLOUT_RAW_REWARD = _declare(
    "rollout/raw_reward",
    "reward",
    "samples of the batch",
    _D.HIGHER_IS_BETTER,
    "mean raw reward of the trained batch (per sample, as slime)",
)
ROLLOUT_RESPONSE_LEN_MEAN = _declare(
    "rollout/response_len/mean",
    "tokens",
    "samples",
    _D.INFORMATIONAL,
    "mean effective (loss-masked) response length",
)
ROLLOUT_RESPONSE_LEN_MEDIAN = _declare(
    "rollout/response_len/median", "tokens", "samples", _D.INFORMATIONAL, "median effective response length"
)
ROLLOUT_RESPONSE_LEN_MAX = _declare(
    "rollout/response_len/max", "tokens", "-", _D.INFORMATIONAL, "longest effective response length"
)
ROLLOUT_RESPONSE_LEN_MIN = _declare(
    "rollout/response_len/min", "tokens", "-", _D.INFORMATIONAL, "shortest effective response length"
)
ROLLOUT_TRUNCATED_RATIO = _declare(
    "rollout/truncated_ratio", "fraction", "samples", _D.LOWER_IS_BETTER, "samples with status TRUNCATED"
)
TRAIN_STEP = _declare(
    "train/step", "step", "-", _D.INFORMATIONAL, "x-axis of train/*: rollout_id * steps_per_rollout + step_id"
)
TRAIN_LOSS = _declare("train/loss", "loss", "rollouts of the step", _D.LOWER_IS_BETTER, "total loss")
TRAIN_PG_LOSS = _declare(
    "train/pg_loss", "loss", "rollouts of the step", _D.INFORMATIONAL, "policy-gradient loss"
)
TRAIN_PG_CLIPFRAC = _declare(
    "train/pg_clipfrac", "fraction", "loss-masked tokens", _D.INFORMATIONAL, "tokens whose ratio was clipped"
)
TRAIN_PPO_KL = _declare(
    "train/ppo_kl", "nats", "loss-masked tokens", _D.INFORMATIONAL, "KL between the old and current policy"
)
TRAIN_ENTROPY_LOSS = _declare(
    "train/entropy_loss", "nats", "loss-masked tokens", _D.INFORMATIONAL, "policy entropy"
)
TRAIN_GRAD_NORM = _declare(
    "train/grad_norm", "L2 norm", "-", _D.INFORMATIONAL, "gradient norm before clipping"
)
TRAIN_ROLLOUT_LOGPROB_ABS_DIFF = _declare(
    "train/train_rollout_logprob_abs_diff",
    "nats",
    "loss-masked tokens",
    _D.LOWER_IS_BETTER,
    "mean absolute difference of training and rollout log-probs",
)
PERF_ACTOR_TRAIN_TOK_PER_S = _declare(
    "perf/actor_train_tok_per_s",
    "tokens/s",
    "-",
    _D.HIGHER_IS_BETTER,
    "tokens of the rollout batch / actor train time",
)
PERF_ROLLOUT_TIME = _declare(
    "perf/rollout_time", "s", "-", _D.LOWER_IS_BETTER, "generation start to rollout logging"
)
DYNAMIC_FILTER_DROP = _declare(
    DYNAMIC_FILTER_DROP_PREFIX + "<reason>",
    "groups",
    "-",
    _D.INFORMATIONAL,
    "groups really dropped by the dynamic filter, per reason (slime's counter)",
)

# ---- more slime-native names the local backend logs (docs/metrics.md) ----------------------------
TRAIN_KL_LOSS = _declare(
    "train/kl_loss",
    "nats",
    "loss-masked tokens",
    _D.INFORMATIONAL,
    "KL to the reference model (with use_kl_loss)",
)
TRAIN_GLOBAL_BATCH_SIZE = _declare(
    "train/global_batch_size", "trajectories", "-", _D.INFORMATIONAL, "trajectories in this optimizer step"
)
TRAIN_LR_PG0 = _declare(
    "train/lr-pg_0", "learning rate", "-", _D.INFORMATIONAL, "learning rate of parameter group 0"
)
PERF_LOG_PROBS_TIME = _declare(
    "perf/log_probs_time", "s", "-", _D.LOWER_IS_BETTER, "old log-probs of the rollout batch"
)
PERF_REF_LOG_PROBS_TIME = _declare(
    "perf/ref_log_probs_time",
    "s",
    "-",
    _D.LOWER_IS_BETTER,
    "reference log-probs of the rollout batch (with use_kl_loss)",
)
PERF_ACTOR_TRAIN_TIME = _declare(
    "perf/actor_train_time", "s", "-", _D.LOWER_IS_BETTER, "optimizer steps of the rollout"
)
PERF_TRAIN_TIME = _declare(
    "perf/train_time", "s", "-", _D.LOWER_IS_BETTER, "log-probs + optimizer steps of the rollout"
)
PERF_TOKENS_PER_GPU_PER_SEC = _declare(
    "perf/tokens_per_gpu_per_sec",
    "tokens/s",
    "-",
    _D.HIGHER_IS_BETTER,
    "generated response tokens / rollout time (one device here)",
)
PERF_LONGEST_SAMPLE_TOKENS_PER_SEC = _declare(
    "perf/longest_sample_tokens_per_sec", "tokens/s", "-", _D.INFORMATIONAL, "longest response / rollout time"
)
PERF_EFFECTIVE_TOKENS_PER_GPU_PER_SEC = _declare(
    "perf/effective_tokens_per_gpu_per_sec",
    "tokens/s",
    "-",
    _D.HIGHER_IS_BETTER,
    "loss-masked response tokens / rollout time",
)
PERF_LONGEST_EFFECTIVE_SAMPLE_TOKENS_PER_SEC = _declare(
    "perf/longest_effective_sample_tokens_per_sec",
    "tokens/s",
    "-",
    _D.INFORMATIONAL,
    "longest loss-masked response / rollout time",
)
ZERO_STD_COUNT = _declare(
    ZERO_STD_COUNT_PREFIX + "<r>",
    "groups",
    "-",
    _D.INFORMATIONAL,
    "kept groups whose sample rewards are all equal (r: first reward, 1 decimal)",
)
PERF_STEP_TIME = _declare(
    "perf/step_time", "s", "-", _D.LOWER_IS_BETTER, "rollout + training of one rollout step"
)
ROLLOUT_REWARDS = _declare(
    "rollout/rewards",
    "advantage",
    "samples",
    _D.INFORMATIONAL,
    "mean post-processed reward (GRPO advantage) of the trained samples",
)
ROLLOUT_RESPONSE_LENGTHS = _declare(
    "rollout/response_lengths",
    "tokens",
    "samples",
    _D.INFORMATIONAL,
    "mean response length (all response tokens) of the trained samples",
)
ROLLOUT_TOTAL_LENGTHS = _declare(
    "rollout/total_lengths",
    "tokens",
    "samples",
    _D.INFORMATIONAL,
    "mean prompt + response length of the trained samples",
)
ROLLOUT_ROLLOUT_LOG_PROBS = _declare(
    "rollout/rollout_log_probs",
    "nats",
    "loss-masked tokens",
    _D.INFORMATIONAL,
    "mean rollout log-prob of the trained tokens",
)

# ---- PPO (advantage_estimator: ppo): slime's own keys, then ours (docs/metrics.md, "PPO") --------
# slime v0.3.1 logs these itself: `log_rollout_data` (megatron_utils/data.py) the per-rollout means of
# the actor's rollout data, and the critic's `train()` (megatron_utils/model.py) its loss dict with the
# role tag `critic-`; the reducer is the loss's (`sum_of_sample_mean`: each trajectory's token mean,
# averaged over trajectories).
ROLLOUT_VALUES = _declare(
    "rollout/values", "return", "trajectories (token mean each)", _D.INFORMATIONAL,
    "mean critic value at the response tokens, before the critic's update",
)
ROLLOUT_RETURNS = _declare(
    "rollout/returns", "return", "trajectories (token mean each)", _D.INFORMATIONAL,
    "mean GAE return (advantage + value): the critic's target",
)
ROLLOUT_ADVANTAGES = _declare(
    "rollout/advantages", "advantage", "trajectories (token mean each)", _D.INFORMATIONAL,
    "mean GAE advantage the actor trains on (after --normalize-advantages, when set)",
)
TRAIN_CRITIC_VALUE_LOSS = _declare(
    "train/critic-value_loss", "squared return", "rollouts of the step", _D.LOWER_IS_BETTER,
    "clipped value loss max((V_clip - R)^2, (V - R)^2), no 1/2 factor (slime's value_loss_function)",
)
TRAIN_CRITIC_VALUE_CLIPFRAC = _declare(
    "train/critic-value_clipfrac", "fraction", "loss-masked tokens", _D.INFORMATIONAL,
    "tokens whose value moved more than value_clip from the old value",
)
TRAIN_CRITIC_GRAD_NORM = _declare(
    "train/critic-grad_norm", "L2 norm", "-", _D.INFORMATIONAL, "critic gradient norm before clipping"
)
TRAIN_CRITIC_LR_PG0 = _declare(
    "train/critic-lr-pg_0", "learning rate", "-", _D.INFORMATIONAL, "critic learning rate of parameter group 0"
)
TRAIN_CRITIC_GLOBAL_BATCH_SIZE = _declare(
    "train/critic-global_batch_size", "trajectories", "-", _D.INFORMATIONAL,
    "trajectories in this critic optimizer step",
)
# Ours: slime logs no spread of values, returns or advantages and no explained variance. Pooled over the
# loss-masked response tokens of the rollout's trained samples (every token counts once), as verl's
# `compute_data_metrics`; one function for both backends (metrics/ppo_spread.py; on slime the
# rollout-data hook, reduced exactly over the data-parallel ranks). Explained variance is absent while
# the returns' std is at most 1e-3: below that the returns differ only by slime's float32 GAE rounding.
PPO_PREFIX = "rollout/ppo/"
PPO_VALUES_STD = _declare(
    PPO_PREFIX + "values_std", "return", "loss-masked tokens", _D.INFORMATIONAL,
    "standard deviation of the critic's values (population std)",
)
PPO_RETURNS_STD = _declare(
    PPO_PREFIX + "returns_std", "return", "loss-masked tokens", _D.INFORMATIONAL,
    "standard deviation of the GAE returns (population std)",
)
PPO_ADVANTAGES_STD = _declare(
    PPO_PREFIX + "advantages_std", "advantage", "loss-masked tokens", _D.INFORMATIONAL,
    "standard deviation of the advantages the actor trains on (population std)",
)
PPO_EXPLAINED_VARIANCE = _declare(
    PPO_PREFIX + "explained_variance", "fraction (<= 1)", "loss-masked tokens", _D.HIGHER_IS_BETTER,
    "1 - Var(returns - values) / Var(returns) with the values before the critic's update; < 0: the critic "
    "predicts the returns worse than their mean",
)

# ---- resources (docs/metrics.md, "Resources"): ours; slime v0.3.1 logs no memory, no checkpoint size and
# no time per optimizer step (only per-rollout timers). Memory in GiB (2^30 bytes, as slime's
# memory_utils prints it), read after the rollout's training, so a peak covers every step so far.
PERF_HOST_PEAK_RSS_GIB = _declare(
    "perf/host_peak_rss_gib", "GiB", "-", _D.LOWER_IS_BETTER,
    "peak resident set of the training process since its start (getrusage ru_maxrss)",
)
PERF_HOST_RSS_GIB = _declare(
    "perf/host_rss_gib", "GiB", "-", _D.LOWER_IS_BETTER,
    "resident set of the training process at the end of the rollout step (/proc/self/statm)",
)
PERF_GPU_PEAK_ALLOCATED_GIB = _declare(
    "perf/gpu_peak_allocated_gib", "GiB", "-", _D.LOWER_IS_BETTER,
    "peak memory allocated by tensors on the training device since the process started "
    "(torch.cuda.max_memory_allocated); absent on a CPU",
)
PERF_GPU_PEAK_RESERVED_GIB = _declare(
    "perf/gpu_peak_reserved_gib", "GiB", "-", _D.LOWER_IS_BETTER,
    "peak memory reserved by PyTorch's caching allocator on the training device since the process "
    "started (torch.cuda.max_memory_reserved); absent on a CPU",
)
PERF_CHECKPOINT_BYTES = _declare(
    "perf/checkpoint_bytes", "bytes", "-", _D.INFORMATIONAL,
    "size of the checkpoint saved after this rollout: the sum of its manifest's file sizes",
)
PERF_ACTOR_STEP_TIME_MEAN = _declare(
    "perf/actor_step_time_mean", "s", "actor optimizer steps of the rollout", _D.LOWER_IS_BETTER,
    "mean wall time of one actor optimizer step: its micro-batches, gradient clip and optimizer step",
)
PERF_ACTOR_STEP_TIME_MAX = _declare(
    "perf/actor_step_time_max", "s", "-", _D.LOWER_IS_BETTER,
    "wall time of the rollout's slowest actor optimizer step",
)
PERF_ACTOR_MICRO_BATCH_TIME_MEAN = _declare(
    "perf/actor_micro_batch_time_mean", "s", "actor micro-batches of the rollout", _D.LOWER_IS_BETTER,
    "mean wall time of one actor micro-batch: forward, loss and backward",
)

# ---- analysis/* (docs/analyst.md, "Metrics"), read by `shopsimrl monitor check` -----------------
ANALYSIS_ELIGIBLE_CARDS = _declare(
    "analysis/eligible_cards", "cards", "-", _D.INFORMATIONAL, "failure cards that yield a proposal"
)
ANALYSIS_CANDIDATES = _declare(
    "analysis/candidates",
    "interventions",
    "-",
    _D.INFORMATIONAL,
    "candidate interventions compiled by the Failure Analyst",
)
ANALYSIS_TRIAGE_GROUPS = _declare(
    "analysis/triage_groups", "groups", "-", _D.INFORMATIONAL, "triage records of the round (all-wrong and technical)"
)
ANALYSIS_ANALYZED_CARDS = _declare(
    "analysis/analyzed_cards", "cards", "-", _D.INFORMATIONAL, "failure cards that got a lesson"
)
ANALYSIS_PROPOSAL_HISTORY_RECORDS = _declare(
    "analysis/proposal_history_records",
    "ledger entries",
    "-",
    _D.INFORMATIONAL,
    "lines of the round's proposal ledger after the compile",
)
ANALYSIS_EVIDENCE_ONLY_CARDS = _declare(
    "analysis/evidence_only_cards",
    "cards",
    "-",
    _D.INFORMATIONAL,
    "failure cards whose counterfactual trial did not succeed",
)

# ---- gate/* (docs/gate.md, "W&B"): logged once per gate invocation, at completion or abort --------
# An incomplete gate logs only GATE_COVERAGE and GATE_COMPLETE = 0 (docs/gate.md).
GATE_COVERAGE = _declare(
    "gate/coverage", "fraction", "planned evaluations", _D.HIGHER_IS_BETTER, "finished evaluations / planned"
)
GATE_COMPLETE = _declare(
    "gate/complete", "0/1", "-", _D.HIGHER_IS_BETTER, "1 when every planned evaluation finished (coverage = 1)"
)
GATE_BARE_REWARD = _declare(
    "gate/bare_reward", "reward", "scored episodes without a candidate", _D.INFORMATIONAL,
    "mean reward of episodes that ran the current skillbank alone",
)
GATE_MASKED_REWARD = _declare(
    "gate/masked_reward", "reward", "scored episodes with >= 1 candidate", _D.INFORMATIONAL,
    "mean reward of episodes with at least one candidate switched on",
)
GATE_DELTA_REWARD = _declare(
    "gate/delta_reward", "reward", "scored pairs with one bare arm", _D.INFORMATIONAL,
    "mean paired difference masked - bare (descriptive; the selection uses the regression)",
)
GATE_BARE_SUCCESS_RATE = _declare(
    "gate/bare_success_rate", "fraction", "scored episodes without a candidate", _D.INFORMATIONAL,
    "success rate of episodes that ran the current skillbank alone",
)
GATE_MASKED_SUCCESS_RATE = _declare(
    "gate/masked_success_rate", "fraction", "scored episodes with >= 1 candidate", _D.INFORMATIONAL,
    "success rate of episodes with at least one candidate switched on",
)
GATE_DELTA_SUCCESS_RATE = _declare(
    "gate/delta_success_rate", "fraction", "scored pairs with one bare arm", _D.INFORMATIONAL,
    "mean paired success difference masked - bare (descriptive)",
)
GATE_SELECTED_COUNT = _declare(
    "gate/selected_count", "interventions", "-", _D.INFORMATIONAL, "candidates the selection rule selected"
)
GATE_CANDIDATES = _declare(
    "gate/candidates", "interventions", "-", _D.INFORMATIONAL, "candidate interventions the gate evaluated"
)
# A W&B Table, not a scalar: one row per intervention (columns in shopsimrl.gate.outputs.TABLE_COLUMNS).
GATE_CHUNK_CONTRIBUTIONS_TABLE = "gate/chunk_contributions"


# ---- eval/* (`shopsim eval`, slime's eval namespace): one row per evaluation, x-axis eval/step --------
# `<id>` is the split (validation, test); slime logs `eval/<dataset>` = mean reward and
# `eval/<dataset>-truncated_ratio` (slime/ray/rollout.py), so the first two keep its shape.
EVAL_STEP = _declare(
    "eval/step", "step", "-", _D.INFORMATIONAL, "x-axis of eval/*: GRPO rollouts trained into the checkpoint (rollout id + 1; 0 before GRPO)"
)
EVAL_REWARD = _declare(
    "eval/shopsim_<id>", "reward in [0, 1]", "scored episodes", _D.HIGHER_IS_BETTER,
    "mean partial-credit reward of the evaluation (slime's eval/<dataset>)",
)
EVAL_TRUNCATED_RATIO = _declare(
    "eval/shopsim_<id>-truncated_ratio", "fraction", "scored episodes", _D.LOWER_IS_BETTER,
    "episodes that ended on max_new_tokens or the context limit",
)
EVAL_SUCCESS_RATE = _declare(
    "eval/shopsim_<id>/success_rate", "fraction", "scored episodes", _D.HIGHER_IS_BETTER, "strict success rate"
)
EVAL_SUCCESS_CI_LOW = _declare(
    "eval/shopsim_<id>/success_ci_low", "fraction", "scored episodes", _D.INFORMATIONAL,
    "lower end of the 95% Wilson interval of the success rate",
)
EVAL_SUCCESS_CI_HIGH = _declare(
    "eval/shopsim_<id>/success_ci_high", "fraction", "scored episodes", _D.INFORMATIONAL,
    "upper end of the 95% Wilson interval of the success rate",
)
EVAL_STRICT_REWARD = _declare(
    "eval/shopsim_<id>/strict_reward", "reward in {0, 1}", "scored episodes", _D.HIGHER_IS_BETTER,
    "mean strict reward",
)
EVAL_TURNS_MEAN = _declare(
    "eval/shopsim_<id>/turns_mean", "turns", "scored episodes", _D.INFORMATIONAL, "assistant turns per episode"
)
EVAL_MODEL_TOKENS_MEAN = _declare(
    "eval/shopsim_<id>/model_tokens_mean", "tokens", "scored episodes", _D.INFORMATIONAL,
    "model-generated tokens per episode (loss-mask 1)",
)
EVAL_UNSCORABLE = _declare(
    "eval/shopsim_<id>/unscorable", "episodes", "-", _D.LOWER_IS_BETTER,
    "planned episodes that hit a technical failure on every attempt",
)

# ---- rounds/* (`shopsimrl training rounds`): the chain's summary run, one row per round, x-axis rounds/index ----
ROUNDS_INDEX = _declare("rounds/index", "round", "-", _D.INFORMATIONAL, "x-axis of rounds/*: the round's index (-round-NNN)")
ROUNDS_FINAL_REWARD = _declare(
    "rounds/final_reward_mean", "reward in [0, 1]", "scorable trajectories", _D.HIGHER_IS_BETTER,
    "the round's last rollout step's rollout/shopsim/reward_mean",
)
ROUNDS_FINAL_SUCCESS = _declare(
    "rounds/final_success_rate", "fraction", "scorable trajectories", _D.HIGHER_IS_BETTER,
    "the round's last rollout step's rollout/shopsim/success_rate",
)
ROUNDS_WARM_START_STEPS = _declare(
    "rounds/warm_start_steps", "optimizer steps", "-", _D.INFORMATIONAL, "supervised steps before GRPO in the round"
)
ROUNDS_CANDIDATES = _declare(
    "rounds/candidates", "interventions", "-", _D.INFORMATIONAL, "the round's analysis/candidates"
)
ROUNDS_SELECTED = _declare(
    "rounds/selected", "interventions", "-", _D.INFORMATIONAL, "candidate edits the round's gate selected"
)
# With the round config's boundary_eval: the held-out evaluation at the round's end (round/boundary.py).
# `<id>` of the paired differences is `previous` (the round before; the chain's start for its first
# round) or `start` (the chain's first round's start policy): after - before on the same episodes.
ROUNDS_HELDOUT_SUCCESS = _declare(
    "rounds/heldout_success_rate", "fraction", "scored held-out episodes", _D.HIGHER_IS_BETTER,
    "success rate of the round's final checkpoint with the skillbank it hands on (the chain's fixed plan)",
)
ROUNDS_HELDOUT_SUCCESS_CI_LOW = _declare(
    "rounds/heldout_success_ci_low", "fraction", "scored held-out episodes", _D.INFORMATIONAL,
    "lower end of the 95% Wilson interval of rounds/heldout_success_rate",
)
ROUNDS_HELDOUT_SUCCESS_CI_HIGH = _declare(
    "rounds/heldout_success_ci_high", "fraction", "scored held-out episodes", _D.INFORMATIONAL,
    "upper end of the 95% Wilson interval of rounds/heldout_success_rate",
)
ROUNDS_HELDOUT_REWARD = _declare(
    "rounds/heldout_reward_mean", "reward in [0, 1]", "scored held-out episodes", _D.HIGHER_IS_BETTER,
    "mean partial-credit reward of the same evaluation",
)
ROUNDS_HELDOUT_START_SUCCESS = _declare(
    "rounds/heldout_start_success_rate", "fraction", "scored held-out episodes", _D.INFORMATIONAL,
    "success rate of the chain's start policy on the same plan (logged on the first round's row)",
)
ROUNDS_HELDOUT_DELTA = _declare(
    "rounds/heldout_success_delta_<id>", "fraction", "held-out episodes scored in both", _D.HIGHER_IS_BETTER,
    "paired success difference, this round's final - <id>",
)
ROUNDS_HELDOUT_DELTA_CI_LOW = _declare(
    "rounds/heldout_success_delta_<id>_ci_low", "fraction", "held-out episodes scored in both", _D.INFORMATIONAL,
    "lower end of the 95% task-cluster bootstrap interval of the paired difference",
)
ROUNDS_HELDOUT_DELTA_CI_HIGH = _declare(
    "rounds/heldout_success_delta_<id>_ci_high", "fraction", "held-out episodes scored in both", _D.INFORMATIONAL,
    "upper end of the 95% task-cluster bootstrap interval of the paired difference",
)
ROUNDS_HELDOUT_DELTA_P = _declare(
    "rounds/heldout_success_delta_<id>_p", "probability", "tasks with a non-zero difference", _D.INFORMATIONAL,
    "two-sided sign-flip permutation p of the paired difference (per-task means)",
)
ROUNDS_SUMMARY_TABLE = "rounds/summary"  # a W&B Table: one row per round


def chunk_target_rho_key(chunk_id: str) -> str:
    return CHUNK_TARGET_RHO.key(chunk_id)


def chunk_inclusion_rate_key(chunk_id: str) -> str:
    return CHUNK_INCLUSION_RATE.key(chunk_id)


def dynamic_filter_drop_key(reason: str) -> str:
    """slime's key for a drop counter: `rollout/dynamic_filter/drop_<reason>`."""
    if not reason:
        raise ValueError("a drop reason must be a non-empty string")
    return DYNAMIC_FILTER_DROP_PREFIX + reason


def zero_std_count_key(first_reward: float) -> str:
    """slime's spelling: `rollout/zero_std/count_<first reward rounded to 1 decimal>`."""
    return ZERO_STD_COUNT.name.replace("<r>", str(round(first_reward, 1)))


def shopsim_specs() -> list[MetricSpec]:
    """The `rollout/shopsim/*` declarations, in declaration order."""
    return [spec for spec in REGISTRY.values() if spec.name.startswith(SHOPSIM_PREFIX)]


def spec_for_key(key: str) -> MetricSpec | None:
    """The declaration behind a logged key (templated chunk keys and drop counters included)."""
    if key in REGISTRY:
        return REGISTRY[key]
    if key.startswith(DYNAMIC_FILTER_DROP_PREFIX):
        return DYNAMIC_FILTER_DROP
    if key.startswith(ZERO_STD_COUNT_PREFIX):
        return ZERO_STD_COUNT
    chunk_prefix = _S + "chunk/"
    if key.startswith(chunk_prefix):
        for suffix, spec in (("/target_rho", CHUNK_TARGET_RHO), ("/inclusion_rate", CHUNK_INCLUSION_RATE)):
            if key.endswith(suffix) and len(key) > len(chunk_prefix) + len(suffix):
                return spec
    return None

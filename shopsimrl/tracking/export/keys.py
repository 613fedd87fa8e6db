"""The slime metric names the history export summarises and plots (declared once, here).

Names and axes follow slime v0.3.1 (`reference/slime.md` §8): `train/*` per optimizer update
against `train/step`; `rollout/*` and `perf/*` per rollout batch against `rollout/step`.
"""

from __future__ import annotations

from dataclasses import dataclass

from shopsimrl.tracking.axes import ROLLOUT_STEP, TRAIN_STEP

ENTROPY = "train/entropy_loss"
CLIP_FRACTION = "train/pg_clipfrac"
GRAD_NORM = "train/grad_norm"
PPO_KL = "train/ppo_kl"
LOGPROB_ABS_DIFF = "train/train_rollout_logprob_abs_diff"
ACTOR_TOKENS_PER_S = "perf/actor_train_tok_per_s"
RESPONSE_LEN_MEAN = "rollout/response_len/mean"
TRUNCATED_RATIO = "rollout/truncated_ratio"
ROLLOUT_TIME = "perf/rollout_time"
RAW_REWARD = "rollout/raw_reward"


@dataclass(frozen=True)
class SummaryMetric:
    key: str
    label: str  # column title in the report
    axis: str  # which export table holds it


# Per-round means in summary.json and the report, in the report's column order.
ROUND_MEANS: tuple[SummaryMetric, ...] = (
    SummaryMetric(ENTROPY, "Entropy", TRAIN_STEP),
    SummaryMetric(CLIP_FRACTION, "Clip fraction", TRAIN_STEP),
    SummaryMetric(GRAD_NORM, "Gradient norm", TRAIN_STEP),
    SummaryMetric(ACTOR_TOKENS_PER_S, "Actor tokens/s", ROLLOUT_STEP),
    SummaryMetric(RESPONSE_LEN_MEAN, "Response length", ROLLOUT_STEP),
    SummaryMetric(TRUNCATED_RATIO, "Truncated ratio", ROLLOUT_STEP),
    SummaryMetric(ROLLOUT_TIME, "Rollout time (s)", ROLLOUT_STEP),
)

# Curves drawn as PNGs (each against its own x-axis).
PLOTTED: tuple[SummaryMetric, ...] = (
    *ROUND_MEANS,
    SummaryMetric(PPO_KL, "PPO KL (old - current, sampled tokens)", TRAIN_STEP),
    SummaryMetric(LOGPROB_ABS_DIFF, "|train - rollout| log-prob", TRAIN_STEP),
    SummaryMetric(RAW_REWARD, "Raw reward", ROLLOUT_STEP),
)

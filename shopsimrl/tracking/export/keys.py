"""Which slime metrics the history export summarises and plots, with their labels and axes.

The names themselves are declared once, in `shopsimrl.metrics.names`; this module only picks them.

Names and axes follow slime v0.3.1 (docs/metrics.md, "slime-native names"): `train/*` per optimizer update
against `train/step`; `rollout/*` and `perf/*` per rollout batch against `rollout/step`.
"""

from __future__ import annotations

from dataclasses import dataclass

from shopsimrl.metrics import names as m
from shopsimrl.tracking.axes import ROLLOUT_STEP, TRAIN_STEP

ENTROPY = m.TRAIN_ENTROPY_LOSS.name
CLIP_FRACTION = m.TRAIN_PG_CLIPFRAC.name
GRAD_NORM = m.TRAIN_GRAD_NORM.name
PPO_KL = m.TRAIN_PPO_KL.name
LOGPROB_ABS_DIFF = m.TRAIN_ROLLOUT_LOGPROB_ABS_DIFF.name
ACTOR_TOKENS_PER_S = m.PERF_ACTOR_TRAIN_TOK_PER_S.name
RESPONSE_LEN_MEAN = m.ROLLOUT_RESPONSE_LEN_MEAN.name
TRUNCATED_RATIO = m.ROLLOUT_TRUNCATED_RATIO.name
ROLLOUT_TIME = m.PERF_ROLLOUT_TIME.name
RAW_REWARD = m.ROLLOUT_RAW_REWARD.name


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

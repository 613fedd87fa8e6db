"""Step axes: which x-axis each metric namespace is plotted against (slime's `define_metric` calls)."""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase

from shopsimrl.metrics import names as m

ROLLOUT_STEP = m.ROLLOUT_STEP.name  # the axis names are metrics too, declared in metrics/names.py
TRAIN_STEP = m.TRAIN_STEP.name
EVAL_STEP = m.EVAL_STEP.name
WANDB_STEP = "_step"  # W&B's own row counter: the fallback axis of every other key

# slime v0.3.1 `_init_wandb_common`: pattern -> step metric.
SLIME_STEP_AXES: dict[str, str] = {
    "train/*": TRAIN_STEP,
    "rollout/*": ROLLOUT_STEP,
    "multi_turn/*": ROLLOUT_STEP,
    "passrate/*": ROLLOUT_STEP,
    "perf/*": ROLLOUT_STEP,
    "eval/*": EVAL_STEP,
}


def merged_axes(extra: Mapping[str, str] | None) -> dict[str, str]:
    """slime's axes plus the caller's; a caller pattern replaces slime's for the same pattern."""
    axes = dict(SLIME_STEP_AXES)
    axes.update(extra or {})
    return axes


def axis_for(key: str, axes: Mapping[str, str]) -> str:
    """The step metric `key` is plotted against; an axis metric and unmatched keys use `_step`.

    The most specific (longest) matching pattern wins, so `analysis/*` set by a caller beats `*`.
    """
    if key in axes.values():
        return WANDB_STEP
    best: tuple[int, str] | None = None
    for pattern, axis in axes.items():
        if fnmatchcase(key, pattern) and (best is None or len(pattern) > best[0]):
            best = (len(pattern), axis)
    return best[1] if best else WANDB_STEP

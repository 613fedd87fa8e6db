"""Megatron's linear learning-rate warm-up, as slime sets it up, for the local optimizers.

slime v0.3.1 (`slime/backends/megatron_utils/model.py`, `get_optimizer_param_scheduler`) gives
Megatron's `OptimizerParamScheduler` a warm-up of `lr_warmup_fraction x lr_decay_steps` *samples*
(DriverConfig.lr_warmup_samples says how many). The scheduler sets the lr when it is built, with 0
samples seen, so the first optimizer step runs at `lr_warmup_init` (Megatron's default 0.0). After
every optimizer step it adds the step's samples and sets the lr again:
`init + (lr - init) x seen / warm-up` while `seen <= warm-up`, then `lr` (the launcher passes
`--lr-decay-style constant`). slime logs `train/lr-pg_0` after that update, so the logged lr of a
step is the one the *next* step runs at.

Why a round wants it: every round starts a fresh Adam (slime's hand-off loads weights only), and
Adam's first update moves every weight by about the lr whatever the gradient's size. At lr 1e-4 that
first step broke the medium-level policy (docs/local_backend.md, "The medium level"). Warm-up from
0 makes the first step fill Adam's moments without moving a weight, and ramps the step size after.
"""

from __future__ import annotations

import torch

WARMUP_INIT_LR = 0.0  # Megatron's --lr-warmup-init default; the launcher does not pass the flag


class LinearWarmup:
    """Sets an optimizer's lr from the samples it has trained on; `step` after each optimizer step."""

    def __init__(self, optimizer: torch.optim.Optimizer, *, lr: float, warmup_samples: float):
        if warmup_samples < 0:
            raise ValueError(f"warmup_samples must be >= 0, got {warmup_samples}")
        self.optimizer = optimizer
        self.max_lr = float(lr)
        self.warmup_samples = float(warmup_samples)
        self.samples_seen = 0
        self._apply()

    def lr(self) -> float:
        """The lr the next optimizer step runs at."""
        if self.warmup_samples > 0 and self.samples_seen <= self.warmup_samples:
            return WARMUP_INIT_LR + (self.max_lr - WARMUP_INIT_LR) * self.samples_seen / self.warmup_samples
        return self.max_lr

    def step(self, samples: int) -> None:
        """After an optimizer step that trained on `samples` samples (slime's per-step global batch size)."""
        self.samples_seen += int(samples)
        self._apply()

    def _apply(self) -> None:
        value = self.lr()
        for group in self.optimizer.param_groups:
            group["lr"] = value

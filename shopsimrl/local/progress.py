"""tqdm progress bars for a local round, driven by the driver's and the warm start's events."""

from __future__ import annotations

from typing import Any

from tqdm import tqdm

from shopsimrl.local.config import RunConfig
from shopsimrl.metrics import names as m


class ProgressPrinter:
    def __init__(self, config: RunConfig, *, enabled: bool = True):
        self.config = config
        self.enabled = enabled
        self._warm: tqdm | None = None
        self._train: tqdm | None = None
        self._last: dict[str, str] = {}  # the last rollout's reward, kept beside the phase
        self._groups = 0  # groups finished in the rollout under way

    def on_event(self, name: str, data: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if name == "warm_start_step":
            if self._warm is None:
                self._warm = tqdm(total=self.config.warm_start.max_steps, desc="warm start", unit="step")
            self._warm.update(1)
            probe = data.get("probe")
            postfix = {"loss": f"{data['loss']:.3f}"}
            if probe is not None:
                postfix["probe_reward"] = f"{probe.mean_reward:.2f}"
            self._warm.set_postfix(postfix)
        elif name in ("wave", "group", "micro_batch", "train_step", "rollout_logged"):
            if self._warm is not None:
                self._warm.close()
                self._warm = None
            if self._train is None:
                d = self.config.driver
                self._train = tqdm(total=d.num_rollout * d.num_steps_per_rollout, desc=d.advantage_estimator.upper(), unit="step")
            if name == "group":
                self._groups += 1
                self._train.set_postfix({**self._last, "rollout": f"{self._groups} groups"})
            elif name == "micro_batch":
                self._groups = 0
                self._train.set_postfix({**self._last, "update": f"{data['done']}/{data['total']} micro-batches"})
            elif name == "rollout_logged":
                row = data["row"]
                if m.REWARD_MEAN.name in row:
                    self._last = {"reward": f"{row[m.REWARD_MEAN.name]:.3f}"}
                    self._train.set_postfix(self._last)
            elif name == "train_step":
                self._train.update(1)

    def close(self) -> None:
        for bar in (self._warm, self._train):
            if bar is not None:
                bar.close()

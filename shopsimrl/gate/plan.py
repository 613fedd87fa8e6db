"""The gate's plan: its budget (power.py), its pre-registered design (design.py) and its looks (sequential.py).

A pure function of (design config, validation tasks, candidates), so a resumed gate plans the same
pairs and takes its interim decisions at the same points.

* fixed gate (`looks: 1`): tasks x replicates pairs in task order (with `replicates: power`, the power
  budget rounded up to whole replicates); one analysis at `alpha`;
* sequential gate (`looks` > 1): the budget's pairs in replicate order (design.py), analysed at
  `looks` equal shares of them, each at the alpha its spending rule allows (sequential.py).

    plan = plan_gate(DesignConfig(), task_ids, ["i1", "i2", "i3", "i4"])
    plan.design.pairs[: plan.looks[0].pairs]     # what the first look analyses
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from shopsimrl.errors import ConfigError
from shopsimrl.gate.config import DesignConfig
from shopsimrl.gate.design import Design, build_design
from shopsimrl.gate.power import pairs_for_power, planned_pairs
from shopsimrl.gate.sequential import Look, look_plan


@dataclass(frozen=True)
class GatePlan:
    design: Design
    looks: tuple[Look, ...]

    @property
    def sequential(self) -> bool:
        return len(self.looks) > 1


def plan_gate(config: DesignConfig, task_ids: Sequence[str], candidates: Sequence[str]) -> GatePlan:
    """The design and looks of a gate; ConfigError when no budget reaches the power target."""
    try:
        pairs = planned_pairs(config, candidates=len(candidates), tasks=len(task_ids))
    except ValueError as exc:
        raise ConfigError("design", [f"replicates: power: {exc}"]) from None
    sequential = config.looks > 1
    design = build_design(
        task_ids,
        candidates=candidates,
        replicates=max(1, math.ceil(pairs / len(task_ids))) if task_ids else 1,
        pairing=config.pairing,
        seed=config.seed,
        order="replicate" if sequential else "task",
        pairs=pairs or None,
    )
    looks = look_plan(pairs=len(design.pairs), looks=config.looks, alpha=config.alpha, rho=config.spending_rho,
                      candidates=len(candidates), trend_futility=config.futility_trend)
    return GatePlan(design, looks)


def power_budget(config: DesignConfig, *, candidates: int, tasks: int) -> int | None:
    """The pairs the power target needs with this config's looks and levels (None: out of reach)."""
    if candidates == 0:
        return 0
    try:
        return pairs_for_power(candidates=candidates, tasks=tasks, pairing=config.pairing, alpha=config.alpha,
                               min_effect=config.min_effect_for(config.outcome), looks=config.looks,
                               rho=config.spending_rho, futility=config.futility,
                               futility_trend=config.futility_trend)
    except ValueError:
        return None

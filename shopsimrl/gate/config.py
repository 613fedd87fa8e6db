"""The gate's configuration: one YAML file (configs/trace2skill_online_gate.yaml), validated once.

Every problem of a file is reported together (`ConfigError`). The defaults of `DesignConfig` are the
design bench/bench_gate.py validates (docs/gate.md, "Power analysis"); a smaller design is allowed
(the demo runs one) but the gate says so in its summary.

    config = load_gate_config("configs/trace2skill_online_gate.yaml", {"design.tasks": 8})
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from shopsimrl.config.base import StrictModel, load_config
from shopsimrl.evaluation.episode_config import (  # re-exported: the gate's YAML sections
    CatalogConfig,
    EpisodeConfig,
    GeneratorConfig,
    generator_problems,
)
from shopsimrl.shop.tasks import MAX_HELD_OUT
from shopsimrl.storage.layout import RunLayout

GATE_CONFIG_SCHEMA_VERSION = 1


class Pairing(StrEnum):
    """What the second episode of a pair runs (docs/gate.md, "Design")."""

    COMPLEMENT = "complement"  # the complement of the first episode's mask (fold-over): 4x the information
    BARE = "bare"  # the current skillbank without any candidate (the costliest variant)


class Outcome(StrEnum):
    SUCCESS = "success"  # strict success, 0/1: what the selection rule decides on by default
    REWARD = "reward"  # partial-credit reward in [0, 1]


class InputsConfig(StrictModel):
    checkpoint: str = Field(..., description="HF model directory of the fixed checkpoint, or 'demo'")
    candidate_pool: str = Field(..., description="the Analyst's candidate_pool.json")
    skillbank: str = Field(..., description="the skillbank of the round the candidates were written against")
    proposal_ledger: str | None = Field(None, description="the Analyst's proposal_ledger.jsonl (copied, then appended)")
    tokenizer: str | None = Field(None, description="tokenizer directory; default: the checkpoint")


class DesignConfig(StrictModel):
    tasks: int = Field(200, ge=1, le=MAX_HELD_OUT, description="validation tasks (the first N of the split)")
    replicates: Annotated[int, Field(ge=1)] | Literal["power"] = Field(
        "power", description="pairs per task, each with its own sampling seed and masks; 'power': the fewest pairs "
        "whose power at +min_effect reaches 0.8 for this K (shopsimrl/gate/power.py)"
    )
    # The sequential gate (shopsimrl/gate/sequential.py, docs/gate.md "Sequential gate"); looks: 1 = a fixed gate.
    looks: int = Field(5, ge=1, le=20, description="analyses at equal shares of the planned pairs, the last at the end")
    spending_rho: float = Field(2.0, gt=0, le=10, description="alpha spent by share t of the pairs: alpha * t**rho")
    futility: float = Field(
        0.4, ge=0, lt=1, description="an undecided candidate whose conditional power is below this no longer holds "
        "the gate open (0 = off; never decides anything)"
    )
    futility_trend: float = Field(
        0.05, ge=0, lt=1, description="from look 2, an undecided candidate whose conditional power under its current "
        "estimate is below this no longer holds the gate open either (0 = off; never decides anything)"
    )
    pairing: Pairing = Pairing.COMPLEMENT
    seed: int = Field(0, ge=0, description="seeds the masks and the per-pair sampling seeds")
    split: Literal["validation"] = "validation"  # never seen by the Analyst (it reads train triage only)
    outcome: Outcome = Outcome.SUCCESS
    alpha: float = Field(
        0.025, gt=0, lt=0.5, description="one-sided family-wise error rate of each decision (Holm); 0.025 = a 95% interval"
    )
    # One rejection bound per outcome: a +0.10 edit on strict success moves partial-credit reward by a
    # different amount, so one number cannot serve both (docs/gate.md, "Selection rule").
    min_effect_success: float = Field(0.10, gt=0, le=1, description="smallest success effect worth keeping")
    min_effect_reward: float = Field(0.10, gt=0, le=1, description="smallest reward effect worth keeping")
    min_effect: float | None = Field(
        None, gt=0, le=1, exclude=True, description="older form: one bound for both outcomes (folded into the two above)"
    )

    @model_validator(mode="after")
    def _one_min_effect_form(self) -> DesignConfig:
        """Fold the older single `min_effect` into the per-outcome bounds; refuse two forms that disagree."""
        if self.min_effect is None:
            return self
        given = {"min_effect_success": self.min_effect_success, "min_effect_reward": self.min_effect_reward}
        conflicts = [f"{name} {value:g}" for name, value in given.items()
                     if name in self.model_fields_set and value != self.min_effect]  # fmt: skip
        if conflicts:
            raise ValueError(
                f"min_effect {self.min_effect:g} (the older form: one bound for both outcomes) conflicts with "
                f"{' and '.join(conflicts)}: give either min_effect or min_effect_success and min_effect_reward"
            )
        self.min_effect_success = self.min_effect_reward = self.min_effect
        self.min_effect = None  # one source of truth from here on
        return self

    def min_effect_for(self, outcome: Outcome | str) -> float:
        return self.min_effect_success if Outcome(outcome) is Outcome.SUCCESS else self.min_effect_reward

    @property
    def episodes(self) -> int | None:
        """Planned episodes of an explicit budget; None with `replicates: power` (it depends on K)."""
        return None if self.replicates == "power" else self.tasks * self.replicates * 2


class GateConfig(StrictModel):
    schema_version: Literal[1] = GATE_CONFIG_SCHEMA_VERSION
    round: str = Field(..., min_length=1, description="the round's W&B group, e.g. qwen35-4b-round-000")
    runs_root: str = "runs"
    inputs: InputsConfig
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    design: DesignConfig = Field(default_factory=DesignConfig)
    episode: EpisodeConfig = Field(default_factory=EpisodeConfig)
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)

    @model_validator(mode="after")
    def _backend_needs(self) -> GateConfig:
        problems = generator_problems(self.generator, self.inputs.checkpoint)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def gate_dir(self) -> Path:
        return RunLayout(Path(self.runs_root) / self.round).gate_dir


def load_gate_config(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None) -> GateConfig:
    """Read, apply dotted `overrides` (e.g. {"design.tasks": 8}), validate; every problem at once."""
    return load_config(path, GateConfig, overrides)

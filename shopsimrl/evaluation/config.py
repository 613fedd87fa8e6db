"""What `shopsimrl eval` evaluates: one YAML file (configs/local/eval.yaml, configs/eval.yaml) plus flags.

    config = load_eval_config("configs/local/eval.yaml", {"tasks": 20, "mask": "none"})

`mask` says which skill chunks the prompt carries: `full` (every active chunk of the skillbank),
`none` (no skill text), or a list of chunk ids. `checkpoint` is an HF model directory, a parent
directory of our checkpoints (its latest one is used: `latest_checkpointed_iteration.txt`), or
`demo` (the demo model as shipped). Every problem of a file is reported together (`ConfigError`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from shopsimrl.config.base import StrictModel, load_config
from shopsimrl.evaluation.episode_config import (
    CatalogConfig,
    EpisodeConfig,
    GeneratorConfig,
    generator_problems,
)
from shopsimrl.shop.tasks import MAX_HELD_OUT
from shopsimrl.storage.layout import EVAL_DIR

EVAL_CONFIG_SCHEMA_VERSION = 1
MaskSpec = Literal["full", "none"] | list[str]


class EvalConfig(StrictModel):
    schema_version: Literal[1] = EVAL_CONFIG_SCHEMA_VERSION
    checkpoint: str = Field(..., min_length=1, description="HF model directory, a checkpoints parent, or 'demo'")
    tokenizer: str | None = Field(None, description="tokenizer directory; default: the checkpoint")
    # train: how often the policy solves the tasks it trains on (not held out; the demo profile's check)
    split: Literal["validation", "test", "train"] = "validation"
    tasks: int = Field(50, ge=1, le=MAX_HELD_OUT, description="the first N tasks of the split")
    seeds: int = Field(2, ge=1, description="episodes per task, each with its own sampling and environment seed")
    seed: int = Field(0, ge=0, description="seeds every episode's seeds: same seed, same episodes")
    skillbank: str | None = Field(None, description="the skillbank the mask draws from (none: no skills)")
    mask: MaskSpec = "full"
    name: str | None = Field(None, description="the evaluation's name (its directory); default from the inputs")
    runs_root: str = "runs"
    group: str = Field("eval", min_length=1, description="runs/<group>/eval/<name>/; the W&B group unless given")
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    episode: EpisodeConfig = Field(default_factory=EpisodeConfig)
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    bootstrap_samples: int = Field(2000, ge=100, description="resamples of the task-cluster bootstrap")

    @field_validator("mask", mode="before")
    @classmethod
    def _mask_from_text(cls, value: Any) -> Any:
        # `--mask a,b` and `--set mask=a,b` arrive as one string: a comma list of chunk ids.
        if isinstance(value, str) and value not in ("full", "none"):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value):
            raise ValueError(f"{value!r}: letters, digits, '.', '_' and '-' only (it names a directory)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EvalConfig:
        problems = generator_problems(self.generator, self.checkpoint)
        if self.mask != "none" and self.skillbank is None:
            problems.append(f"mask {self.mask!r} needs a skillbank (or mask: none)")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def mask_label(self) -> str:
        return self.mask if isinstance(self.mask, str) else "+".join(self.mask)

    @property
    def eval_name(self) -> str:
        if self.name:
            return self.name
        checkpoint = "demo" if self.checkpoint == "demo" else Path(self.checkpoint).resolve().name
        label = self.mask_label if len(self.mask_label) <= 40 else f"{len(self.mask)}-chunks"
        return re.sub(r"[^A-Za-z0-9._-]", "_", f"{checkpoint}-{self.split}-{label}")

    @property
    def eval_dir(self) -> Path:
        return Path(self.runs_root) / self.group / EVAL_DIR / self.eval_name


def load_eval_config(path: str | os.PathLike[str] | None, overrides: dict[str, Any] | None = None) -> EvalConfig:
    """Read the YAML (or start empty), apply dotted `overrides`, validate; every problem at once."""
    return load_config(path, EvalConfig, overrides, source=None if path is not None else "eval flags")

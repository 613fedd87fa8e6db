"""Options of our slime hooks.

slime drops unknown command-line flags, so plugin options travel the supported way: a YAML file
given with `--custom-config-path`, whose top-level keys slime sets as attributes of `args`. All our
options sit under one top-level key, `shopsim`, so they never collide with slime's own arguments:

    shopsim:
      run_dir: runs/qwen35-4b-round-000/train
      skillbank: configs/skillbank.example.json
      round_seed: 1234
      q: {start: 0.5}
      ...

`options_from_args(args)` validates once per process (cached on the args object) and reports
every problem together, each with its location.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from shopsimrl.config.base import StrictModel
from shopsimrl.config.files import load_yaml_file
from shopsimrl.errors import ConfigError
from shopsimrl.shop.catalog import Catalog, ToolOffer, generate_catalog
from shopsimrl.shop.levels import DEFAULT_LEVEL, LEVELS, unknown_level_message

OPTIONS_KEY = "shopsim"
_CACHE_ATTR = "_shopsim_options"


class QSchedule(StrictModel):
    """Probability that a group is skill-free: constant (`start`) or linear from `start` to `end`."""

    start: float = Field(0.5, ge=0.0, le=1.0)
    end: float | None = Field(None, ge=0.0, le=1.0)
    steps: int = Field(1, ge=1, description="rollout steps over which q moves from start to end")

    def at(self, rollout_step: int) -> float:
        if self.end is None:
            return self.start
        fraction = min(max(rollout_step, 0), self.steps) / self.steps
        return self.start + (self.end - self.start) * fraction


class CatalogOptions(StrictModel):
    """The shop a stage runs on. Training, the gate and eval share this one definition (the gate's
    and eval's `catalog:` sections), so a round names its difficulty level once, in training's."""

    seed: int = 0
    num_products: int = Field(2000, ge=50, description="catalog size; default: the level's (full: 2000)")
    level: str = Field(DEFAULT_LEVEL, description=f"difficulty level, one of: {', '.join(LEVELS)}")
    tools: ToolOffer = Field(
        "dynamic",
        description="the tools the system prompt lists: dynamic (production: those usable in the current "
        "state; a change starts a new segment) or all (every tool from the first turn: one segment per "
        "episode, about a third of the tokens to score on the CPU demo; docs/environment.md)",
    )

    @model_validator(mode="before")
    @classmethod
    def _size_from_level(cls, data: Any) -> Any:
        # Each level has its own default catalog size; an explicit num_products always wins.
        if isinstance(data, dict) and "num_products" not in data and data.get("level") in LEVELS:
            return {**data, "num_products": LEVELS[data["level"]].num_products}
        return data

    @field_validator("level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value not in LEVELS:
            # a custom error type: pydantic would prefix a ValueError's text with "Value error, "
            raise PydanticCustomError("unknown_level", unknown_level_message(value))
        return value

    def build(self) -> Catalog:
        """The catalog these options name (deterministic: the same options give the same shop)."""
        return generate_catalog(seed=self.seed, num_products=self.num_products, level=self.level, tools=self.tools)


class ShopSimOptions(StrictModel):
    run_dir: str = Field(..., description="stage directory, e.g. runs/<group>/train")
    skillbank: str | None = Field(None, description="skillbank JSON; null trains skill-free only")
    round_seed: int = 0
    q: QSchedule = Field(default_factory=QSchedule)
    default_rho: float = Field(0.5, ge=0.0, le=1.0)
    rho: dict[str, float] = Field(default_factory=dict, description="logical_chunk_id -> target rho")
    reward_key: Literal["reward", "strict_reward"] = Field(
        "reward", description="outcome field used for the zero-std test and for GRPO"
    )
    catalog: CatalogOptions = Field(default_factory=CatalogOptions)
    split: Literal["train"] = "train"
    tool_call_format: Literal["xml", "json"] = Field(
        "xml", description="xml: Qwen3.5's chat template (production); json: Qwen3's <tool_call> JSON form"
    )
    max_turns: int = Field(12, ge=1)
    max_new_tokens_per_turn: int = Field(256, ge=1)
    max_context_tokens: int = Field(8192, ge=256)
    full_skill_retry: bool = True
    sglang_timeout_s: float = Field(120.0, gt=0)

    @field_validator("rho")
    @classmethod
    def _rho_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [f"rho[{k!r}]={v} is outside [0, 1]" for k, v in value.items() if not 0.0 <= v <= 1.0]
        if bad:
            raise ValueError("; ".join(bad))
        return value

    @model_validator(mode="after")
    def _skillbank_exists(self) -> ShopSimOptions:
        if self.skillbank is not None and not Path(self.skillbank).is_file():
            raise ValueError(f"skillbank file not found: {self.skillbank}")
        return self

    def rho_for(self, chunk_id: str) -> float:
        return self.rho.get(chunk_id, self.default_rho)


def _format_errors(error: ValidationError, prefix: str) -> list[str]:
    problems = []
    for item in error.errors():
        location = ".".join(str(part) for part in (prefix, *item["loc"]))
        problems.append(f"{location}: {item['msg']}")
    return problems


def validate_options(raw: Any, source: str) -> ShopSimOptions:
    """Validate a raw mapping; every problem is reported at once in a `ConfigError`."""
    if not isinstance(raw, dict):
        raise ConfigError(source, [f"{OPTIONS_KEY}: expected a mapping, got {type(raw).__name__}"])
    try:
        return ShopSimOptions.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(source, _format_errors(exc, OPTIONS_KEY)) from None


def load_options_file(path: str | os.PathLike[str]) -> ShopSimOptions:
    """Read a `--custom-config-path` YAML file and validate its `shopsim` section."""
    data = load_yaml_file(path)
    if not isinstance(data, dict) or OPTIONS_KEY not in data:
        raise ConfigError(str(path), [f"missing top-level key {OPTIONS_KEY!r}"])
    return validate_options(data[OPTIONS_KEY], str(path))


def options_from_args(args: Any) -> ShopSimOptions:
    """Options from slime's `args` (set there by `--custom-config-path`), validated once."""
    cached = getattr(args, _CACHE_ATTR, None)
    if isinstance(cached, ShopSimOptions):
        return cached
    if not hasattr(args, OPTIONS_KEY):
        raise ConfigError(
            "args",
            [
                f"no `{OPTIONS_KEY}` attribute: pass --custom-config-path with a YAML that has a "
                f"top-level `{OPTIONS_KEY}:` section"
            ],
        )
    raw = getattr(args, OPTIONS_KEY)
    options = raw if isinstance(raw, ShopSimOptions) else validate_options(raw, "args.shopsim")
    setattr(args, _CACHE_ATTR, options)
    return options

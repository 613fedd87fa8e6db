"""The per-sample metadata contract, `sample.metadata["shopsim"]` (docs/rollout.md, docs/contracts.md).

Hooks look only here. Key names are fixed; extra keys are allowed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

METADATA_KEY = "shopsim"
SCHEMA_VERSION = 1


class Arm(StrEnum):
    SKILL_FREE = "skill_free"
    ASSISTED = "assisted"
    ASSISTED_EMPTY = "assisted_empty"


class TechnicalErrorInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str
    message: str


class Outcome(BaseModel):
    model_config = ConfigDict(extra="allow")
    reward: float | None = None
    strict_reward: float | None = None
    success: bool | None = None
    scorable: bool = False
    technical_error: TechnicalErrorInfo | None = None


class SegmentInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int = 0
    count: int = 1


class RetryInfo(BaseModel):
    """Marks a diagnostic full-skill retry: never trained on."""

    model_config = ConfigDict(extra="allow")
    kind: str = "full_skill"
    source_group_key: str
    source_group_index: int | None = None
    round_step: int | None = None


class ShopSimMeta(BaseModel):
    model_config = ConfigDict(extra="allow")
    schema_version: int = SCHEMA_VERSION
    task_id: str
    split: str = "train"
    group_key: str
    arm: Arm
    mask: list[str] = Field(default_factory=list)
    q: float
    rho: dict[str, float] = Field(default_factory=dict)
    segment: SegmentInfo = Field(default_factory=SegmentInfo)
    outcome: Outcome = Field(default_factory=Outcome)
    retry: RetryInfo | None = None


def get_meta(sample: Any) -> ShopSimMeta:
    """Parse `sample.metadata["shopsim"]`; raises KeyError naming the sample when it is missing."""
    metadata = sample.metadata or {}
    if METADATA_KEY not in metadata:
        raise KeyError(f"sample index={sample.index} has no metadata[{METADATA_KEY!r}]")
    raw = metadata[METADATA_KEY]
    return raw if isinstance(raw, ShopSimMeta) else ShopSimMeta.model_validate(raw)


def set_meta(sample: Any, meta: ShopSimMeta) -> None:
    """Store as a plain dict so slime's `to_dict` debug dumps and pickling stay simple."""
    if sample.metadata is None:
        sample.metadata = {}
    sample.metadata[METADATA_KEY] = meta.model_dump(mode="json")


def trajectory_key(sample: Any) -> tuple[int | None, int | None]:
    """A trajectory is a unique (group_index, rollout_id)."""
    return (sample.group_index, sample.rollout_id)

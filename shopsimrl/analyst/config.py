"""The Failure Analyst's config (`configs/trace2skill_online_analysis.yaml`): one typed source of defaults.

Every key is documented in configs/archive/trace2skill_online_analysis.example.yaml. `load_analysis_config`
reports every problem of the file at once (`ConfigError`, one line per problem with its location).
"""

from __future__ import annotations

import glob
import os
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field

from shopsimrl.config.base import StrictModel, load_config, read_config, schema_version_check, validate_config
from shopsimrl.config.options import OPTIONS_KEY, ShopSimOptions, validate_options
from shopsimrl.config.precision import ComputeDtype
from shopsimrl.errors import ConfigError
from shopsimrl.storage.layout import ANALYSIS_DIR, RunLayout

ANALYSIS_CONFIG_SCHEMA_VERSION = 1


class LessonBackendName(StrEnum):
    RULES = "rules"  # deterministic lesson per failure mode, no model
    LLM = "llm"  # an OpenAI-compatible chat endpoint (SGLang, vLLM, ...)


class TrialGeneratorName(StrEnum):
    LOCAL = "local"  # a Hugging Face model in this process (CPU backend, tests)
    SGLANG = "sglang"  # the round's policy served by SGLang's /generate (production)


class RunPaths(StrictModel):
    group: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", description="the round")
    runs_root: str = "runs"
    train_dir: str | None = Field(
        None, description="default <runs_root>/<group>/train; a glob picks the newest match (demo runs)"
    )
    analysis_dir: str | None = Field(None, description="default: the train_dir's sibling analysis/")


class LlmSettings(StrictModel):
    base_url: str = "http://127.0.0.1:30000/v1"
    model: str = "default"
    api_key_env: str | None = Field(None, description="name of the variable holding the key; never the key")
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(2, ge=0, le=10)
    concurrency: int = Field(8, ge=1, le=256)
    temperature: float = Field(0.0, ge=0, le=2)
    max_tokens: int = Field(
        1024, ge=16, le=4096, description="room for the JSON answer, and for reasoning if a server thinks anyway"
    )
    enable_thinking: bool | None = Field(
        False,
        description="sent as chat_template_kwargs.enable_thinking (SGLang/vLLM hand it to the chat template; "
        "Qwen3.5's reasons first unless it is false); null sends no chat_template_kwargs",
    )


class LessonSettings(StrictModel):
    backend: LessonBackendName = LessonBackendName.RULES
    llm: LlmSettings = Field(default_factory=LlmSettings)


class TrialSettings(StrictModel):
    enabled: bool = True
    generator: TrialGeneratorName = TrialGeneratorName.LOCAL
    model: str = Field("tiny", description="local: tiny | smollm2 | a Hugging Face model directory")
    model_seed: int = 0
    sglang_url: str | None = None
    tokenizer: str | None = Field(None, description="sglang: the policy's tokenizer directory")
    attempts: int = Field(1, ge=1, le=16, description="episodes per lesson")
    min_successes: int = Field(1, ge=1, description="successful episodes that make a card eligible")
    technical_retries: int = Field(2, ge=0, le=10, description="re-runs of an episode lost to a technical failure")
    temperature: float = Field(0.7, ge=0, le=2)
    seed: int = 0
    max_cards: int | None = Field(None, ge=1, description="trial at most this many cards per run (CPU budget)")
    concurrency: int = Field(1, ge=1, le=256, description="trials in flight at once, each with its attempts concurrent (sglang: many)")
    compute_dtype: ComputeDtype = Field(
        ComputeDtype.FLOAT32, description="generator local: the forwards' precision (bfloat16: autocast; auto: bfloat16 on a CPU with "
        "avx512_bf16 or amx_bf16, else float32)"
    )


class FirewallSettings(StrictModel):
    banned_terms: list[str] = Field(default_factory=list, description="extra terms no candidate may carry")
    shingle_words: int = Field(3, ge=3, le=12, description="content words per shingle of held-out instruction text")


class CompilerSettings(StrictModel):
    max_candidates: int = Field(8, ge=1, le=64)
    min_evidence_cards: int = Field(1, ge=1)
    chunk_id_prefix: str = Field("analyst", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}$")
    text_similarity: float = Field(0.6, gt=0, le=1, description="Jaccard of word sets that joins two lessons")


class LedgerSettings(StrictModel):
    history: list[str] = Field(
        default_factory=list, description="earlier rounds' ledgers (gate/proposal_ledger.jsonl) to honour"
    )


class SidecarSettings(StrictModel):
    poll_interval_s: float = Field(2.0, gt=0, le=600)


class AnalysisConfig(StrictModel):
    schema_version: int = ANALYSIS_CONFIG_SCHEMA_VERSION
    run: RunPaths
    shopsim_config: str = Field(..., description="the training round's YAML with a top-level `shopsim:`")
    lessons: LessonSettings = Field(default_factory=LessonSettings)
    trial: TrialSettings = Field(default_factory=TrialSettings)
    firewall: FirewallSettings = Field(default_factory=FirewallSettings)
    compiler: CompilerSettings = Field(default_factory=CompilerSettings)
    ledger: LedgerSettings = Field(default_factory=LedgerSettings)
    sidecar: SidecarSettings = Field(default_factory=SidecarSettings)

    @property
    def train_dir(self) -> Path:
        """The training stage directory. A glob (the demo gives every run its own directory,
        runs/local-demo-round-000-<UTC time>/train) names the newest match, by name; with no match
        it stays the pattern, which the stage reports as missing."""
        raw = self.run.train_dir or str(RunLayout(Path(self.run.runs_root) / self.run.group).train_dir)
        if glob.has_magic(raw):
            found = sorted(p for p in glob.glob(raw) if Path(p).is_dir())
            return Path(found[-1]) if found else Path(raw)
        return Path(raw)

    @property
    def analysis_dir(self) -> Path:
        # Beside train/: the training metric pending_analysis_rate reads <train_dir>/../analysis/.
        return Path(self.run.analysis_dir) if self.run.analysis_dir else self.train_dir.parent / ANALYSIS_DIR


def _trial_problems(config: AnalysisConfig) -> list[str]:
    trial, problems = config.trial, []
    if trial.min_successes > trial.attempts:
        problems.append(f"trial.min_successes: {trial.min_successes} is more than trial.attempts ({trial.attempts})")
    if trial.generator is TrialGeneratorName.SGLANG and not (trial.sglang_url and trial.tokenizer):
        problems.append("trial: generator sglang needs trial.sglang_url and trial.tokenizer")
    return problems


_CHECKS = (schema_version_check(ANALYSIS_CONFIG_SCHEMA_VERSION), _trial_problems)


def load_analysis_config(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None) -> AnalysisConfig:
    """Read the analysis YAML, apply dotted `overrides` (e.g. {"run.group": "qwen35-4b-round-001"}),
    validate; raises `ConfigError` listing every problem."""
    return load_config(path, AnalysisConfig, overrides, _CHECKS)


def analysis_config_from_mapping(raw: Any, source: str) -> AnalysisConfig:
    """An analysis config from a parsed mapping (the round's `analysis:` section)."""
    return validate_config(raw, AnalysisConfig, source, _CHECKS)


def load_round_options(config: AnalysisConfig) -> ShopSimOptions:
    """The training round's ShopSim options (catalog, turns, tool-call format, skillbank).

    Reads the `shopsim:` section of `shopsim_config`: a slime `--custom-config-path` YAML or a
    local-backend config (top-level `shopsim:`), or a round config (`train.shopsim:`, the demo's
    configs/local/demo_round.yaml); its run_dir defaults to this config's train_dir.
    """
    source = config.shopsim_config
    data = read_config(source)
    train = data.get("train")
    holder = train if OPTIONS_KEY not in data and isinstance(train, dict) else data
    if not isinstance(holder.get(OPTIONS_KEY), dict):
        raise ConfigError(source, [f"missing mapping {OPTIONS_KEY!r} (top level, or train.{OPTIONS_KEY} of a round)"])
    section = {"run_dir": str(config.train_dir), **holder[OPTIONS_KEY]}
    return validate_options(section, source)

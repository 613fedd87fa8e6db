"""The round's config: one YAML that names the round once and holds the three stages' sections.

    config = load_round_config("configs/local/demo_round.yaml")
    config.train_config()                    # RunConfig of the training stage
    config.analysis_config(checkpoint_dir)   # AnalysisConfig, its trial policy = the final checkpoint
    config.gate_config(checkpoint_dir)       # GateConfig on the same fixed checkpoint

`round:` is the one source of the group and the paths; the stage sections may not set them
(`train.run`, `analysis.run`, `analysis.shopsim_config`, `analysis.trial.model`, `gate.round`,
`gate.runs_root`, `gate.inputs`, `gate.catalog`). Every problem of the file, the stages' own
validation included, is reported at once in one `ConfigError`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from shopsimrl.analyst.config import AnalysisConfig, analysis_config_from_mapping
from shopsimrl.config.files import load_yaml_file, validation_problem
from shopsimrl.config.overrides import set_dotted
from shopsimrl.errors import ConfigError
from shopsimrl.gate.config import GateConfig
from shopsimrl.local.config import RunConfig, RunMode, run_config_from_mapping

ROUND_CONFIG_SCHEMA_VERSION = 1
GROUP_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,118}-round-[0-9]{3,}$"
TRAIN_CONFIG_FILE = "train_config.yaml"  # the derived training config, beside train/ (the Analyst reads it)
_PLACEHOLDER_CHECKPOINT = "<final checkpoint>"  # validation only: the real one exists after training

# Keys the round owns: (section, dotted key) -> what sets them instead.
_OWNED = {
    ("train", "run"): "round.group / round.runs_root / round.checkpoints_root / round.mode",
    ("analysis", "run"): "round.group / round.runs_root",
    ("analysis", "shopsim_config"): f"the round's runs/<group>/{TRAIN_CONFIG_FILE}",
    ("analysis", "trial.model"): "the training stage's final checkpoint",
    ("gate", "round"): "round.group",
    ("gate", "runs_root"): "round.runs_root",
    ("gate", "inputs"): "final checkpoint, analysis outputs, the training's skillbank",
    ("gate", "catalog"): "train.shopsim.catalog (the gate must evaluate on the training's shop)",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RoundIdentity(_Strict):
    group: str = Field(
        ..., pattern=GROUP_PATTERN, description="the round and its W&B group, <name>-round-NNN (e.g. qwen35-4b-round-000)"
    )
    runs_root: str = "runs"
    checkpoints_root: str = "checkpoints"
    mode: RunMode = RunMode.TRAIN
    start_checkpoint: str | None = Field(None, description="the previous round's final checkpoint (verified at start)")
    start_checkpoint_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")


class RoundConfig(_Strict):
    schema_version: int = ROUND_CONFIG_SCHEMA_VERSION
    round: RoundIdentity
    train: dict[str, Any] = Field(..., description="a local-backend run config without `run:`")
    analysis: dict[str, Any] = Field(default_factory=dict, description="an analysis config without `run:`")
    gate: dict[str, Any] = Field(default_factory=dict, description="a gate config without round/inputs")
    _source: str = PrivateAttr("<mapping>")

    @property
    def source(self) -> str:
        return self._source

    @property
    def group(self) -> str:
        return self.round.group

    @property
    def round_dir(self) -> Path:
        return Path(self.round.runs_root) / self.round.group

    @property
    def train_config_path(self) -> Path:
        return self.round_dir / TRAIN_CONFIG_FILE

    def train_config(self) -> RunConfig:
        """The training stage's config; it always saves the final checkpoint (the gate's fixed one)."""
        raw = dict(self.train)
        driver = dict(raw.get("driver") or {})
        if driver.get("save_interval") is None and isinstance(driver.get("num_rollout"), int) and driver["num_rollout"] >= 1:
            driver["save_interval"] = driver["num_rollout"]  # slime's rule saves the last rollout anyway
        raw["driver"] = driver
        identity = self.round
        if identity.start_checkpoint is not None:  # the round trains on from the previous round's policy
            raw["model"] = {**(raw.get("model") or {}), "checkpoint": identity.start_checkpoint}
        raw["run"] = {
            "group": identity.group,
            "runs_root": identity.runs_root,
            "checkpoints_root": identity.checkpoints_root,
            "mode": identity.mode.value,
        }
        return run_config_from_mapping(raw, f"{self.source} (train)")

    def analysis_config(self, checkpoint: str | os.PathLike[str]) -> AnalysisConfig:
        raw = dict(self.analysis)
        raw["run"] = {"group": self.group, "runs_root": self.round.runs_root}
        raw["shopsim_config"] = str(self.train_config_path)
        raw["trial"] = {**(raw.get("trial") or {}), "model": str(checkpoint)}
        return analysis_config_from_mapping(raw, f"{self.source} (analysis)")

    def gate_config(self, checkpoint: str | os.PathLike[str]) -> GateConfig:
        shopsim = self.train_config().shopsim
        analysis_dir = self.round_dir / "analysis"
        raw = dict(self.gate)
        raw["round"] = self.group
        raw["runs_root"] = self.round.runs_root
        raw["inputs"] = {
            "checkpoint": str(checkpoint),
            "candidate_pool": str(analysis_dir / "candidate_pool.json"),
            "skillbank": str(shopsim.skillbank),
            "proposal_ledger": str(analysis_dir / "proposal_ledger.jsonl"),
        }
        raw["catalog"] = {"seed": shopsim.catalog.seed, "num_products": shopsim.catalog.num_products}
        # The episode defaults follow the training's, so the gate measures the policy as it was trained.
        raw["episode"] = {
            "tool_call_format": shopsim.tool_call_format,
            "max_turns": shopsim.max_turns,
            "max_new_tokens_per_turn": shopsim.max_new_tokens_per_turn,
            **(raw.get("episode") or {}),
        }
        try:
            return GateConfig.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(f"{self.source} (gate)", [validation_problem(e, "gate") for e in exc.errors()]) from None


def round_config_from_mapping(raw: Any, source: str) -> RoundConfig:
    """Validate the round and derive each stage's config once, so every problem surfaces now."""
    if not isinstance(raw, dict):
        raise ConfigError(source, [f"top level: expected a mapping, got {type(raw).__name__}"])
    try:
        config = RoundConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(source, [validation_problem(e, "") for e in exc.errors()]) from None
    config._source = source
    problems: list[str] = []
    if config.schema_version != ROUND_CONFIG_SCHEMA_VERSION:
        problems.append(f"schema_version: {config.schema_version} is not supported (this version reads "
                        f"{ROUND_CONFIG_SCHEMA_VERSION})")  # fmt: skip
    if (config.round.start_checkpoint is None) != (config.round.start_checkpoint_sha256 is None):
        problems.append("round: start_checkpoint and start_checkpoint_sha256 go together")
    sections = {"train": config.train, "analysis": config.analysis, "gate": config.gate}
    for (section, key), owner in _OWNED.items():
        if _has(sections[section], key):
            problems.append(f"{section}.{key}: set by the round ({owner}); remove it")
    train = None
    try:
        train = config.train_config()
    except ConfigError as exc:
        problems.extend(f"train.{p}" for p in exc.problems)
    if train is not None and not train.shopsim.skillbank:
        problems.append("train.shopsim.skillbank: required (the gate edits the round's skillbank)")
    for stage, derive in (("analysis", config.analysis_config), ("gate", config.gate_config)):
        if stage == "gate" and (train is None or not train.shopsim.skillbank):
            continue  # its inputs come from a training section that is already reported
        try:
            derive(_PLACEHOLDER_CHECKPOINT)
        except ConfigError as exc:
            problems.extend(p if p.startswith(f"{stage}.") else f"{stage}.{p}" for p in exc.problems)
    if problems:
        raise ConfigError(source, list(dict.fromkeys(problems)))
    return config


def load_round_config(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None) -> RoundConfig:
    """Read the YAML, apply dotted `overrides` ({"train.driver.num_rollout": 1}), validate."""
    source = str(path)
    try:
        raw = load_yaml_file(path)
    except FileNotFoundError:
        raise ConfigError(source, ["file not found"]) from None
    except OSError as exc:
        raise ConfigError(source, [f"cannot read file: {exc.strerror or exc}"]) from None
    if not isinstance(raw, dict):
        raise ConfigError(source, [f"top level: expected a mapping, got {type(raw).__name__}"])
    for key, value in (overrides or {}).items():
        set_dotted(raw, key, value, source)
    return round_config_from_mapping(raw, source)


def next_group(group: str) -> str:
    """`qwen35-4b-round-000` -> `qwen35-4b-round-001` (the width of the number is kept)."""
    match = re.fullmatch(r"(.*-round-)([0-9]+)", group)
    if match is None:
        raise ValueError(f"round group {group!r} does not end in -round-NNN")
    number = match.group(2)
    return f"{match.group(1)}{int(number) + 1:0{len(number)}d}"


def _has(mapping: dict[str, Any], dotted: str) -> bool:
    target: Any = mapping
    for part in dotted.split("."):
        if not isinstance(target, dict) or part not in target:
            return False
        target = target[part]
    return True


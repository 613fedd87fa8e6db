"""The round's config: one YAML that names the round once and holds the three stages' sections.

    config = load_round_config("configs/local/demo_round.yaml")
    config.train_config()                    # RunConfig of the training stage (backend local)
    config.shopsim()                         # the training's ShopSim options (either backend)
    config.analysis_config(checkpoint_dir)   # AnalysisConfig, its trial policy = the final checkpoint
    config.gate_config(checkpoint_dir)       # GateConfig on the same fixed checkpoint

`round:` is the one source of the group, the paths, the backend and the base seed; the stage
sections may not set what derives from them (`train.run`, the three seeds of seeds.py,
`analysis.run`, `analysis.shopsim_config`, `analysis.trial.model`, `gate.round`, `gate.runs_root`,
`gate.inputs`, `gate.catalog`). `round.backend` says what `train:` holds: `local`, a local-backend
run config without `run:`; `docker`, the compose service that runs slime (`service: train`) and the
slime plugin options (`shopsim:`, as in configs/shopsim.formal.yaml). `tracking:` (optional) is the
W&B settings of the round when the command line gives none: a next round keeps its predecessor's.
`boundary_eval:` (optional) is the held-out evaluation at every round boundary of a chain
(`shopsimrl training rounds`, boundary.py): one plan, checked at load against the round's catalog.
Every problem of the file, the stages' own validation included, is reported at once in one
`ConfigError`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, model_validator

from shopsimrl.analyst.config import AnalysisConfig, analysis_config_from_mapping
from shopsimrl.config.base import StrictModel, read_config, schema_version_check, validate_config
from shopsimrl.config.files import validation_problems
from shopsimrl.config.options import OPTIONS_KEY, ShopSimOptions, validate_options
from shopsimrl.errors import ConfigError
from shopsimrl.evaluation.config import EvalConfig
from shopsimrl.evaluation.episode_config import DEMO_CHECKPOINT, GeneratorConfig
from shopsimrl.gate.config import GateConfig
from shopsimrl.local.config import ModelName, RunConfig, RunMode, run_config_from_mapping
from shopsimrl.models.checkpoint import WARM_START_DIR
from shopsimrl.round.seeds import RoundSeeds, round_index, round_seeds
from shopsimrl.shop.tasks import MAX_HELD_OUT
from shopsimrl.storage.layout import SHOPSIM_CONFIG_FILE, TRAIN_CONFIG_FILE, RunLayout

ROUND_CONFIG_SCHEMA_VERSION = 1
GROUP_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,118}-round-[0-9]{3,}$"
_PLACEHOLDER_CHECKPOINT = "<final checkpoint>"  # validation only: the real one exists after training
_PLACEHOLDER_SKILLBANK = "<the training's skillbank>"  # validation of gate: when train.shopsim is invalid

# Keys the round owns: (section, dotted key) -> what sets them instead.
_OWNED = {
    ("train", "run"): "round.group / round.runs_root / round.checkpoints_root / round.mode",
    ("train", "driver.rollout_seed"): "round.seed and the round's index (shopsimrl/round/seeds.py)",
    ("train", "shopsim.round_seed"): "round.seed and the round's index (shopsimrl/round/seeds.py)",
    ("train", "shopsim.run_dir"): "round.group / round.runs_root",
    ("gate", "design.seed"): "round.seed and the round's index (shopsimrl/round/seeds.py)",
    ("analysis", "run"): "round.group / round.runs_root",
    ("analysis", "shopsim_config"): f"the round's runs/<group>/{TRAIN_CONFIG_FILE}",
    ("analysis", "trial.model"): "the training stage's final checkpoint",
    ("gate", "round"): "round.group",
    ("gate", "runs_root"): "round.runs_root",
    ("gate", "inputs"): "final checkpoint, analysis outputs, the training's skillbank",
    ("gate", "catalog"): "train.shopsim.catalog (the gate must evaluate on the training's shop)",
}


class RoundIdentity(StrictModel):
    group: str = Field(
        ..., pattern=GROUP_PATTERN, description="the round and its W&B group, <name>-round-NNN (e.g. qwen35-4b-round-000)"
    )
    runs_root: str = "runs"
    checkpoints_root: str = "checkpoints"
    mode: RunMode = RunMode.TRAIN
    backend: Literal["local", "docker"] = Field("local", description="local: in-process CPU; docker: compose services")
    trainer: Literal["local", "slime"] | None = Field(
        None,
        description="what trains: local, the CPU backend (in this process, or in the CPU compose services of "
        "compose.cpu.yaml on backend docker); slime (backend docker only). Default: local on backend local, "
        "slime on docker",
    )
    seed: int = Field(0, ge=0, description="the run's base seed; every round's seeds derive from it and the index")
    start_checkpoint: str | None = Field(None, description="the previous round's final checkpoint (verified at start)")
    start_checkpoint_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    start_load: str | None = Field(None, description="docker: the previous round's slime save directory (START_LOAD)")

    @model_validator(mode="after")
    def _resolve_trainer(self) -> RoundIdentity:
        if self.trainer is None:
            self.trainer = "local" if self.backend == "local" else "slime"
        return self


class SlimeTrain(StrictModel):
    """`train:` of a docker round: the compose service that launches slime and its plugin options."""

    service: Literal["train", "train-smoke"] = "train"
    shopsim: dict[str, Any] = Field(..., description="slime plugin options (configs/shopsim.formal.yaml's shopsim:)")
    keep_saves: Literal["last", "all"] = Field(
        "last",
        description="last: once the training finished, remove every save but the last iter_<n> and hf/rollout-<n> "
        "(all a later stage or round reads; slime keeps every save, ~60 GiB each); all: keep them",
    )


class Tracking(StrictModel):
    """The round's W&B settings where the command line gives none (a next round keeps the last one's)."""

    enabled: bool = False
    mode: Literal["online", "offline", "disabled"] = "offline"
    project: str | None = None
    entity: str | None = None
    dir: str | None = None

    def overrides(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class BoundaryEval(StrictModel):
    """`boundary_eval:` (optional; absent = off): held-out episodes at every round boundary of a chain.

    One plan for the whole chain (boundary.py writes it once at the chain's root and refuses a change):
    the first `tasks` tasks of `split` x `seeds` episodes, every sampling and environment seed fixed by
    `seed`, on the training's catalog. Each round's final checkpoint is evaluated with the skillbank its
    gate hands on (every active chunk), and the chain's first round's start once, so every evaluation
    pairs with every other episode by episode."""

    split: Literal["validation", "test"] = "validation"
    tasks: int = Field(40, ge=1, le=MAX_HELD_OUT, description="the first N tasks of the split")
    seeds: int = Field(2, ge=1, description="episodes per task, each with its own fixed seeds")
    seed: int = Field(0, ge=0, description="seeds every episode's seeds (the same for every round)")
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    episode: dict[str, Any] = Field(
        default_factory=dict, description="EpisodeConfig fields; unset ones follow the training's (as the gate's)"
    )
    bootstrap_samples: int = Field(2000, ge=100, description="resamples of the task-cluster bootstrap")


class RoundConfig(StrictModel):
    schema_version: int = ROUND_CONFIG_SCHEMA_VERSION
    round: RoundIdentity
    train: dict[str, Any] = Field(..., description="a local-backend run config without `run:`")
    analysis: dict[str, Any] = Field(default_factory=dict, description="an analysis config without `run:`")
    gate: dict[str, Any] = Field(default_factory=dict, description="a gate config without round/inputs")
    tracking: Tracking | None = None
    boundary_eval: BoundaryEval | None = Field(None, description="held-out eval at every round boundary (chains)")
    _source: str = PrivateAttr("<mapping>")

    @classmethod
    def parsed(cls, raw: Any, source: str) -> RoundConfig:
        """`raw` validated against the schema only, remembered as read from `source` (the name
        reports and errors give it); `round_config_from_mapping` adds the checks across stages."""
        config = cls.model_validate(raw)
        config._source = source
        return config

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
    def layout(self) -> RunLayout:
        return RunLayout(self.round_dir)

    @property
    def backend(self) -> str:
        return self.round.backend

    @property
    def trainer(self) -> str:
        """local (the CPU backend, in-process or in the CPU compose services) or slime."""
        return self.round.trainer or ("local" if self.backend == "local" else "slime")

    @property
    def index(self) -> int:
        return round_index(self.round.group)

    @property
    def seeds(self) -> RoundSeeds:
        return round_seeds(self.round.seed, self.index)

    @property
    def train_config_path(self) -> Path:
        """The derived training config the Analyst reads the round's shop from (one source)."""
        return self.round_dir / (TRAIN_CONFIG_FILE if self.trainer == "local" else SHOPSIM_CONFIG_FILE)

    @property
    def train_dir(self) -> Path:
        return self.layout.train_dir

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.round.checkpoints_root) / self.round.group

    def slime_train(self) -> SlimeTrain:
        return validate_config(self.train, SlimeTrain, f"{self.source} (train)")

    def shopsim(self) -> ShopSimOptions:
        """The training's ShopSim options on either backend (catalog, turns, skillbank, curriculum seed)."""
        if self.trainer == "local":
            return self.train_config().shopsim
        section = {**self.slime_train().shopsim, "run_dir": str(self.train_dir), "round_seed": self.seeds.curriculum}
        return validate_options(section, f"{self.source} (train.shopsim)")

    def train_document(self) -> dict[str, Any]:
        """What the round writes to `train_config_path`: the local run config, or slime's plugin options."""
        if self.trainer == "local":
            return self.train_config().model_dump(mode="json")
        return {OPTIONS_KEY: self.shopsim().model_dump(mode="json")}

    def train_config(self) -> RunConfig:
        """The local training stage's config; it always saves the final checkpoint (the gate's fixed one)."""
        if self.trainer != "local":
            raise ConfigError(self.source, [f"round.trainer: {self.trainer} has no local training config"])
        raw = dict(self.train)
        driver = dict(raw.get("driver") or {})
        if driver.get("save_interval") is None and isinstance(driver.get("num_rollout"), int) and driver["num_rollout"] >= 1:
            driver["save_interval"] = driver["num_rollout"]  # slime's rule saves the last rollout anyway
        driver["rollout_seed"] = self.seeds.rollout
        raw["driver"] = driver
        raw["shopsim"] = {**(raw.get("shopsim") or {}), "round_seed": self.seeds.curriculum}
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

    def gate_config(self, checkpoint: str | os.PathLike[str], shopsim: ShopSimOptions | None = None) -> GateConfig:
        """`shopsim`: the training's options when already known (validation passes a stand-in)."""
        shopsim = shopsim or self.shopsim()
        layout = self.layout
        raw = dict(self.gate)
        raw["design"] = {**(raw.get("design") or {}), "seed": self.seeds.gate}
        raw["round"] = self.group
        raw["runs_root"] = self.round.runs_root
        raw["inputs"] = {
            "checkpoint": str(checkpoint),
            "candidate_pool": str(layout.candidate_pool),
            "skillbank": str(shopsim.skillbank),
            "proposal_ledger": str(layout.proposal_ledger),
        }
        raw["catalog"] = shopsim.catalog.model_dump(mode="json")  # seed, size, level and tool offer: the training's shop
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
            raise ConfigError(f"{self.source} (gate)", validation_problems(exc, "gate")) from None

    def start_policy(self) -> str:
        """The policy before the round's first GRPO step, as `shopsimrl eval` names it: the saved
        warm start, else the start checkpoint, else the shipped demo model (the base of `smollm2`).
        ConfigError when there is none to evaluate (the tiny model's random start is not saved)."""
        train = self.train_config()
        if train.warm_start.enabled:
            if not train.warm_start.save:
                raise ConfigError(self.source, ["train.warm_start.save: boundary_eval evaluates the round's start, "
                                                "the warm-started policy; set save: true"])  # fmt: skip
            return str(self.checkpoint_dir / WARM_START_DIR)
        if self.round.start_checkpoint is not None:
            return self.round.start_checkpoint
        if train.model.name is ModelName.SMOLLM2:  # the shipped GGUF is its untrained start
            return DEMO_CHECKPOINT
        raise ConfigError(self.source, [f"boundary_eval: the round starts from the untrained {train.model.name.value} "
                                        "model, which has no checkpoint to evaluate; enable train.warm_start with "
                                        "save: true, or give round.start_checkpoint"])  # fmt: skip

    def boundary_eval_config(self, checkpoint: str, skillbank: str | None, name: str) -> EvalConfig:
        """The evaluation of `checkpoint` with every active chunk of `skillbank` under the chain's plan,
        into runs/<group>/eval/<name>/, on the training's catalog and episode limits."""
        section = self.boundary_eval
        if section is None:
            raise ConfigError(self.source, ["boundary_eval: not configured"])
        shopsim = self.shopsim()
        episode = {"tool_call_format": shopsim.tool_call_format, "max_turns": shopsim.max_turns,
                   "max_new_tokens_per_turn": shopsim.max_new_tokens_per_turn, **section.episode}  # fmt: skip
        raw = {"checkpoint": checkpoint, "split": section.split, "tasks": section.tasks, "seeds": section.seeds,
               "seed": section.seed, "skillbank": skillbank, "mask": "full" if skillbank else "none", "name": name,
               "runs_root": self.round.runs_root, "group": self.group,
               "generator": section.generator.model_dump(mode="json"), "episode": episode,
               "catalog": shopsim.catalog.model_dump(mode="json"), "bootstrap_samples": section.bootstrap_samples}  # fmt: skip
        try:
            return EvalConfig.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(f"{self.source} (boundary_eval)", validation_problems(exc, "boundary_eval")) from None


def round_config_from_mapping(raw: Any, source: str) -> RoundConfig:
    """Validate the round, derive each stage's config once and check what the stages will read that
    exists already (skillbank, splits of the round's catalog), so every problem surfaces now, before
    training: one `ConfigError` with all of them (a typo in one section never hides one in another)."""
    if not isinstance(raw, dict):
        raise ConfigError(source, [f"top level: expected a mapping, got {type(raw).__name__}"])
    problems: list[str] = []
    try:
        config = RoundConfig.model_validate(raw)
    except ValidationError as exc:
        problems = validation_problems(exc)
        stand_in = _stand_in(raw)
        if stand_in is None:
            raise ConfigError(source, problems) from None
        config = stand_in  # the sections are still checked below; the report is raised at the end
    config._source = source
    problems.extend(schema_version_check(ROUND_CONFIG_SCHEMA_VERSION)(config))
    if (config.round.start_checkpoint is None) != (config.round.start_checkpoint_sha256 is None):
        problems.append("round: start_checkpoint and start_checkpoint_sha256 go together")
    sections = {"train": config.train, "analysis": config.analysis, "gate": config.gate}
    for (section, key), owner in _OWNED.items():
        if _has(sections[section], key):
            problems.append(f"{section}.{key}: set by the round ({owner}); remove it")
    shopsim = None
    try:
        if config.trainer == "slime":
            config.slime_train()
        shopsim = config.shopsim()
    except ConfigError as exc:
        problems.extend(p if p.startswith("train.") else f"train.{p}" for p in exc.problems)
    if shopsim is not None and not shopsim.skillbank:
        problems.append("train.shopsim.skillbank: required (the gate edits the round's skillbank)")
    if (config.round.start_load is not None) and config.trainer != "slime":
        problems.append("round.start_load: only a slime round hands on a slime save (local: start_checkpoint)")
    if config.trainer == "slime" and config.backend != "docker":
        problems.append("round.trainer: slime runs in the compose services only (round.backend: docker)")
    if config.backend == "docker":  # the services see the checkout at /workspace: paths relative to it
        problems.extend(
            f"round.{key}: {value!r} is absolute; a docker round's directories are relative to the checkout "
            "(the services see them under /workspace)"
            for key, value in (("runs_root", config.round.runs_root), ("checkpoints_root", config.round.checkpoints_root))
            if Path(value).is_absolute()
        )
    try:
        config.analysis_config(_PLACEHOLDER_CHECKPOINT)
    except ConfigError as exc:
        problems.extend(p if p.startswith("analysis.") else f"analysis.{p}" for p in exc.problems)
    gate = None
    try:  # on a stand-in shop when the training's is invalid (already reported): the gate's own typos still show
        gate = config.gate_config(_PLACEHOLDER_CHECKPOINT, shopsim if shopsim is not None and shopsim.skillbank
                                  else ShopSimOptions.model_construct(skillbank=_PLACEHOLDER_SKILLBANK))  # fmt: skip
    except ConfigError as exc:
        problems.extend(p if p.startswith("gate.") else f"gate.{p}" for p in exc.problems)
    if shopsim is not None and shopsim.skillbank and gate is not None:
        problems.extend(input_problems(shopsim, gate))
    if config.boundary_eval is not None and shopsim is not None:
        problems.extend(_boundary_problems(config))
    if problems:
        raise ConfigError(source, list(dict.fromkeys(problems)))
    return config


def input_problems(shopsim: ShopSimOptions, gate: GateConfig) -> list[str]:
    """What the later stages would refuse, found from inputs that exist before training: the skillbank
    the gate edits, and the gate's design against the validation split of the round's catalog (a
    design the split cannot hold used to surface only after training and the Analyst's trials)."""
    from shopsimrl.shop import load_split
    from shopsimrl.skills.skillbank import load_skillbank

    problems: list[str] = []
    try:
        load_skillbank(shopsim.skillbank)
    except ConfigError as exc:
        problems.extend(f"train.shopsim.skillbank: {p}" for p in exc.problems)
    catalog = shopsim.catalog.build()
    available = len(load_split(catalog, gate.design.split, limit=gate.design.tasks))
    if available < gate.design.tasks:
        problems.append(f"gate.design.tasks: {gate.design.tasks}, but the {gate.design.split} split of the round's "
                        f"catalog (train.shopsim.catalog: seed {shopsim.catalog.seed}, {shopsim.catalog.num_products} "
                        f"products) has only {available} tasks")  # fmt: skip
    return problems


def _boundary_problems(config: RoundConfig) -> list[str]:
    """What the boundary evaluations would refuse after training, found now."""
    if config.trainer != "local":  # a slime round's checkpoint is served by SGLang, not evaluated in this process
        return ["boundary_eval: only with round.trainer local (the evaluations run in this process)"]
    problems: list[str] = []
    try:
        eval_config = config.boundary_eval_config(config.start_policy(), str(config.shopsim().skillbank), "check")
    except ConfigError as exc:
        return [p if p.startswith(("boundary_eval", "train.")) else f"boundary_eval.{p}" for p in exc.problems]
    from shopsimrl.shop import load_split

    shop = eval_config.catalog
    available = len(load_split(shop.build(), eval_config.split, limit=eval_config.tasks))
    if available < eval_config.tasks:
        problems.append(f"boundary_eval.tasks: {eval_config.tasks}, but the {eval_config.split} split of the round's "
                        f"catalog (train.shopsim.catalog: seed {shop.seed}, {shop.num_products} products) has only "
                        f"{available} tasks")  # fmt: skip
    return problems


def _stand_in(raw: dict[str, Any]) -> RoundConfig | None:
    """The config with a valid stand-in for each invalid top-level section that the stage sections do
    not need (round:, tracking:, schema_version), so those are still validated; None when a stage
    section itself is not a mapping (already reported)."""
    patched = {**raw, "round": {"group": "stand-in-round-000"}, "schema_version": ROUND_CONFIG_SCHEMA_VERSION}
    patched.pop("tracking", None)
    try:
        identity = RoundIdentity.model_validate(raw.get("round"))
        patched["round"] = identity.model_dump()
    except ValidationError:
        pass  # reported by the first validation; the stand-in identity keeps the default paths and seed
    try:
        return RoundConfig.model_validate(patched)
    except ValidationError:
        return None


def load_round_config(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None) -> RoundConfig:
    """Read the YAML, apply dotted `overrides` ({"train.driver.num_rollout": 1}), validate."""
    return round_config_from_mapping(read_config(path, overrides), str(path))


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



def previous_group(group: str) -> str | None:
    """`qwen35-4b-round-001` -> `qwen35-4b-round-000`; None for round 0 (the first round)."""
    match = re.fullmatch(r"(.*-round-)([0-9]+)", group)
    if match is None or int(match.group(2)) == 0:
        return None
    number = match.group(2)
    return f"{match.group(1)}{int(number) - 1:0{len(number)}d}"

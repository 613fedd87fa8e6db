"""The local CPU backend: slime's rollout loop and GRPO update in one process (docs/local_backend.md).

Importing this package loads only the configuration types (no torch). The parts, by module:

- `shopsimrl.local.config`: `RunConfig`, `load_run_config`, `DriverConfig`, `HookPaths`, ...
- `shopsimrl.local.hooks`: `load_function`, `resolve_hooks`
- `shopsimrl.local.driver`: `LocalDriver`, `build_args`, `RolloutReport`
- `shopsimrl.local.grpo`: `GrpoConfig`, `GrpoTrainer`, `TrainItem`, `policy_loss`, `score_responses`
- `shopsimrl.local.ppo`: `PpoConfig`, `PpoTrainer` (advantage_estimator: ppo); `shopsimrl.local.critic`:
  `ValueHead`, `value_loss`; `shopsimrl.local.gae`: `gae`, `masked_whiten`, `rollout_statistics`
- `shopsimrl.local.warm_start`: `warm_start`, `expert_items`, `sft_step`
- `shopsimrl.local.run`: `run_training`, `RunResult`
- `shopsimrl.local.smoke`: `evaluate_smoke`, `write_smoke_report` (the smoke run's acceptance report)
  (its criteria, PPO's too, are shared with the slime smoke: `shopsimrl.metrics.smoke`)
- `shopsimrl.local.commands`: the `shopsimrl train` click group
"""

from shopsimrl.local.config import (
    DriverConfig,
    HookPaths,
    KlLossType,
    ModelConfig,
    ModelName,
    RunConfig,
    RunMode,
    WarmStartConfig,
    load_run_config,
    run_config_from_mapping,
)

__all__ = [
    "DriverConfig",
    "HookPaths",
    "KlLossType",
    "ModelConfig",
    "ModelName",
    "RunConfig",
    "RunMode",
    "WarmStartConfig",
    "load_run_config",
    "run_config_from_mapping",
]

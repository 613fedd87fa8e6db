"""Operations: preflight checks, the slime flag list, compose validation, the canary.

Modules are imported by name (`from shopsimrl.ops.preflight import run_preflight`); this package
imports nothing at import time so that `shopsimrl.ops.<module>` stays cheap and independent.

- `shopsimrl.ops.preflight`: `run_preflight`, `PreflightContext`, `CheckResult`, `Status`, `Runner`
- `shopsimrl.ops.preflight_context`: what every check takes and returns (re-exported by `preflight`)
- `shopsimrl.ops.slime_flags`: `FLAGS`, `FLAG_NAMES`, `FORBIDDEN_FLAGS`, `unlisted_flags`
- `shopsimrl.ops.compose_schema`: `schema_errors`, `persistent_mount_problems`
- `shopsimrl.ops.canary`: `run_canary`, `CanarySettings`, `CanaryReport`
- `shopsimrl.ops.launch`: `prepare_launch`, `resolve_options`, `input_problems` (the slime launcher's checks)
- `shopsimrl.ops.critic`: `critic_plan`, `resolved_roles` (where a PPO launch's critic loads and saves)
- `shopsimrl.ops.model_files`: `hf_model_problems`, `converted_checkpoint_problems`, `architecture_problems`
- `shopsimrl.ops.footprint`: `disk_need`, `saves_in_run` (disk a launch profile writes)
- `shopsimrl.ops.chat_template`: `compare_with_template` (the rollout's ids vs the checkpoint's template)
- `shopsimrl.ops.preflight_launch`: preflight checks built on the four above
- `shopsimrl.ops.preflight_image`: in-container checks of the image itself and SGLang
- `shopsimrl.ops.slime_log`: `parse_slime_log`, `metric_rows` (slime's job log read back into metric rows)
- `shopsimrl.ops.slime_smoke`: `evaluate_slime_smoke` (the slime smoke's `smoke_report.json`)
"""

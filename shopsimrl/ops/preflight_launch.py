"""Preflight checks of what a slime launch will read and write, from the launcher's own dry run.

- `check_launch_inputs`: the model files, the converted checkpoint (`make convert`) and its match
  with the HF config and the model flags, the prompt data (shopsimrl.ops.launch.input_problems).
- `check_chat_template`: the rollout's token ids against the checkpoint's own chat template
  (shopsimrl.ops.chat_template); SKIP with the reason when no checkpoint is present.
- `check_disk_for_profile`: free disk against what the formal profile will write (saves x size,
  shopsimrl.ops.footprint), not a fixed threshold.
- `check_gpu_count`: the GPUs visible against what the formal and smoke profiles train on
  (ACTOR_NUM_GPUS_PER_NODE: NUM_GPUS / SMOKE_NUM_GPUS or the profile's default), which
  `ray start --num-gpus` trusts: too few fail minutes into the run with a CUDA device error.

They run where the paths are real: inside the train container (the docker runner's preflight), and
on the host when the model directory is there (MODELS_DIR, default ./models).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from shopsimrl.ops import footprint, launch
from shopsimrl.ops.preflight_context import CheckResult, PreflightContext, Runner, Status

FORMAL_CONFIG = "configs/slime/formal.env"
SMOKE_CONFIG = "configs/slime/smoke.env"
MODEL_NAME = "Qwen3.5-4B"
_TIMEOUT_S = 120


def _result(name: str, status: str, detail: str, fix: str = "") -> CheckResult:
    return CheckResult(name, Status(status), detail, fix)


def _launch_dir(ctx: PreflightContext) -> Path:
    return ctx.workspace if ctx.runner is Runner.CONTAINER else ctx.root


def _env(ctx: PreflightContext) -> dict[str, str]:
    env = {**ctx.env, "DRY_RUN": "1", "PYTHON": sys.executable}
    if ctx.runner is not Runner.CONTAINER and "MODELS_DIR" not in env:
        env["MODELS_DIR"] = str(ctx.root / "models")
    return env


def formal_argv(ctx: PreflightContext) -> list[str]:
    """The formal launch's `ray job submit` argv (raises RuntimeError with the launcher's error)."""
    result = subprocess.run(
        ["bash", str(ctx.root / "scripts/run_shopsimrl_slime.sh"), FORMAL_CONFIG], cwd=_launch_dir(ctx),
        env=_env(ctx), capture_output=True, text=True, timeout=_TIMEOUT_S, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(result.stderr.strip() or f"launcher exited {result.returncode}")
    return shlex.split(result.stdout.strip().splitlines()[-1])


def model_args(ctx: PreflightContext) -> list[str]:
    """MODEL_ARGS of the model file the launch configs name, as the launcher sources it."""
    script = 'source configs/slime/common.env && source "${MODEL_ARGS_FILE}" && printf "%s\\0" "${MODEL_ARGS[@]}"'
    result = subprocess.run(["bash", "-c", script], cwd=_launch_dir(ctx), env=_env(ctx), capture_output=True,
                            text=True, timeout=_TIMEOUT_S, check=True)  # fmt: skip
    return [arg for arg in result.stdout.split("\0") if arg]


def profile_gpus(ctx: PreflightContext, config: str) -> int:
    """ACTOR_NUM_GPUS_PER_NODE of a launch profile, sourced as the launcher sources it."""
    script = f'source configs/slime/common.env && source {shlex.quote(config)} && printf "%s" "$ACTOR_NUM_GPUS_PER_NODE"'
    result = subprocess.run(["bash", "-c", script], cwd=_launch_dir(ctx), env=_env(ctx), capture_output=True,
                            text=True, timeout=_TIMEOUT_S, check=True)  # fmt: skip
    return int(result.stdout)


def check_gpu_count(ctx: PreflightContext) -> CheckResult:
    name = "GPUs for the launch profiles"
    if shutil.which("nvidia-smi", path=ctx.env.get("PATH")) is None:
        return _result(name, "SKIP", "nvidia-smi not found (see: GPU visible)")
    listing = subprocess.run(["nvidia-smi", "-L"], env=ctx.env, capture_output=True, text=True,
                             timeout=_TIMEOUT_S, check=False)  # fmt: skip
    visible = sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))
    try:
        wanted = {config: profile_gpus(ctx, config) for config in (FORMAL_CONFIG, SMOKE_CONFIG)}
    except (subprocess.SubprocessError, ValueError) as exc:
        return _result(name, "FAIL", f"cannot read the profiles' GPU counts: {exc}", "fix NUM_GPUS / SMOKE_NUM_GPUS")
    detail = f"{visible} GPU(s) visible; {FORMAL_CONFIG} trains on {wanted[FORMAL_CONFIG]}, {SMOKE_CONFIG} on {wanted[SMOKE_CONFIG]}"
    if wanted[FORMAL_CONFIG] > visible:
        return _result(name, "FAIL", detail, f"set NUM_GPUS={visible} in .env (or make train NUM_GPUS={visible}); "
                       f"the profile's default is for {wanted[FORMAL_CONFIG]}-GPU hosts")  # fmt: skip
    if wanted[SMOKE_CONFIG] > visible:
        return _result(name, "FAIL", detail, f"set SMOKE_NUM_GPUS={visible} in .env (or make train-smoke SMOKE_NUM_GPUS={visible})")
    return _result(name, "PASS", detail)


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def check_launch_inputs(ctx: PreflightContext) -> CheckResult:
    name = "slime launch inputs"
    try:
        argv = formal_argv(ctx)
    except (RuntimeError, subprocess.SubprocessError) as exc:
        return _result(name, "FAIL", f"formal dry run: {exc}", "fix the launch settings above")
    hf = _value(argv, "--hf-checkpoint")
    problems = launch.input_problems(
        hf_checkpoint=hf, ref_load=_value(argv, "--ref-load"), prompt_data=_value(argv, "--prompt-data"),
        model_args=model_args(ctx),
    )  # fmt: skip
    if problems:
        return _result(
            name, "FAIL", "; ".join(problems),
            "download the model to MODELS_DIR, `make convert`, then `shopsimrl tasks export` (docs/operations.md)",
        )  # fmt: skip
    return _result(name, "PASS", f"{hf}, its converted checkpoint and the prompt data match")


def check_chat_template(ctx: PreflightContext) -> CheckResult:
    name = "chat template agreement"
    from shopsimrl.config import load_options_file

    models = Path(ctx.env.get("MODELS_DIR") or ("/models" if ctx.runner is Runner.CONTAINER else ctx.root / "models"))
    model_dir = models / MODEL_NAME
    if not (model_dir / "tokenizer_config.json").is_file():
        return _result(name, "SKIP", f"no checkpoint at {model_dir}: the rollout cannot be compared with its template")
    fmt = load_options_file(_launch_dir(ctx) / "configs/shopsim.formal.yaml").tool_call_format
    try:
        from transformers import AutoTokenizer

        from shopsimrl.ops.chat_template import compare_with_template

        mismatches = compare_with_template(AutoTokenizer.from_pretrained(str(model_dir)), fmt)
    except (ImportError, OSError, ValueError) as exc:
        return _result(name, "FAIL", f"{model_dir}: {type(exc).__name__}: {exc}", "check the tokenizer files")
    if mismatches:
        return _result(
            name, "FAIL", " | ".join(mismatches),
            "the model would see other tokens than its template renders: fix shopsimrl/shop/chat_format.py",
        )  # fmt: skip
    return _result(name, "PASS", f"the rollout ({fmt}) equals {model_dir}'s template on every turn of the expert's episode")


def check_disk_for_profile(ctx: PreflightContext) -> CheckResult:
    name = "free disk"
    base = _launch_dir(ctx)
    probe = base / "checkpoints" if (base / "checkpoints").is_dir() else base
    free = shutil.disk_usage(probe).free
    need, reason = None, "RUNNER=local: the slime profile does not apply; margin only"
    if ctx.runner is not Runner.LOCAL:
        try:
            need = footprint.disk_need(formal_argv(ctx), margin_gib=ctx.min_free_gib)
        except (RuntimeError, subprocess.SubprocessError, KeyError, ValueError) as exc:
            reason = f"profile not readable ({exc}); margin only"
    detail = f"{free / footprint.GIB:.1f} GiB free at {probe}"
    required = need.total_bytes if need else int(ctx.min_free_gib * footprint.GIB)
    detail += f"; formal profile needs {need.describe()}" if need else f"; {reason} {ctx.min_free_gib:g} GiB"
    if free < required:
        return _result(
            name, "FAIL", detail,
            "free space, move checkpoints/ to a larger volume, or raise SAVE_INTERVAL in configs/slime/formal.env",
        )  # fmt: skip
    return _result(name, "PASS", detail)


#!/usr/bin/env bash
# Launch a ShopSimRL GRPO run on slime: start a single-node Ray head, then submit slime's train.py
# with ShopSimRL's hooks (dotted paths) and plugin options (--custom-config-path).
#
# Usage:  bash scripts/run_shopsimrl_slime.sh [LAUNCH_CONFIG]
#   LAUNCH_CONFIG   configs/slime/formal.env (default) or configs/slime/smoke.env; sourced after
#                   configs/slime/common.env. Smoke and formal runs differ only by this file.
# Environment:
#   DRY_RUN=1       print the commands, one shell-quoted line each, and run nothing
#   USE_WANDB=0|1   1 adds --use-wandb --wandb-project --wandb-group --disable-wandb-random-suffix,
#                   and --wandb-team/--wandb-mode/--wandb-dir when WANDB_ENTITY/WANDB_MODE/WANDB_DIR
#                   are set. Credentials come from `wandb login` or WANDB_API_KEY in the environment,
#                   never from a flag: slime uploads its arguments in the run config.
#   SLIME_DIR (/root/slime), MEGATRON_DIR (/root/Megatron-LM), MASTER_ADDR (127.0.0.1),
#   RAY_DASHBOARD_PORT (8265), PYTHON (python3)
# Every flag passed to train.py is declared in shopsimrl/ops/slime_flags.py.
set -euo pipefail

die() {
  echo "run_shopsimrl_slime.sh: error: $*" >&2
  exit 2
}

REPO_ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
LAUNCH_CONFIG="${1:-${LAUNCH_CONFIG:-configs/slime/formal.env}}"
COMMON_CONFIG="${COMMON_CONFIG:-configs/slime/common.env}"
DRY_RUN="${DRY_RUN:-0}"
USE_WANDB="${USE_WANDB:-0}"
SLIME_DIR="${SLIME_DIR:-/root/slime}"
MEGATRON_DIR="${MEGATRON_DIR:-/root/Megatron-LM}"
MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
RAY_DASHBOARD_PORT="${RAY_DASHBOARD_PORT:-8265}"
PYTHON="${PYTHON:-python3}"

case "${DRY_RUN}" in 0 | 1) ;; *) die "DRY_RUN must be 0 or 1, got '${DRY_RUN}'" ;; esac
case "${USE_WANDB}" in 0 | 1) ;; *) die "USE_WANDB must be 0 or 1, got '${USE_WANDB}'" ;; esac

for config in "${COMMON_CONFIG}" "${LAUNCH_CONFIG}"; do
  [[ -f "${config}" ]] || die "launch config not found: ${config} (run from the repository root or the container's /workspace)"
done
# shellcheck source=configs/slime/common.env
source "${COMMON_CONFIG}"
# shellcheck source=configs/slime/smoke.env
source "${LAUNCH_CONFIG}"

required=(RUN_MODE MODEL_ARGS_FILE HF_CHECKPOINT REF_LOAD SHOPSIM_CONFIG PROMPT_DATA ACTOR_NUM_GPUS_PER_NODE
  ROLLOUT_NUM_GPUS_PER_ENGINE SGLANG_MEM_FRACTION_STATIC TENSOR_MODEL_PARALLEL_SIZE MAX_TOKENS_PER_GPU
  ROLLOUT_SEED NUM_ROLLOUT ROLLOUT_BATCH_SIZE N_SAMPLES_PER_PROMPT OVER_SAMPLING_BATCH_SIZE
  NUM_STEPS_PER_ROLLOUT ROLLOUT_MAX_RESPONSE_LEN ROLLOUT_MAX_CONTEXT_LEN ROLLOUT_TEMPERATURE LR
  KL_LOSS_COEF ENTROPY_COEF EPS_CLIP EPS_CLIP_HIGH)
missing=()
for name in "${required[@]}"; do
  [[ -n "${!name:-}" ]] || missing+=("${name}")
done
((${#missing[@]} == 0)) || die "${LAUNCH_CONFIG}: missing setting(s): ${missing[*]}"
((OVER_SAMPLING_BATCH_SIZE >= ROLLOUT_BATCH_SIZE)) ||
  die "${LAUNCH_CONFIG}: OVER_SAMPLING_BATCH_SIZE (${OVER_SAMPLING_BATCH_SIZE}) must be >= ROLLOUT_BATCH_SIZE (${ROLLOUT_BATCH_SIZE}) (slime asserts it)"

# Ray runs train.py and the hooks in other working directories: hand them absolute paths.
absolute() { if [[ "$1" == /* ]]; then printf '%s' "$1"; else printf '%s/%s' "${PWD}" "$1"; fi; }
SHOPSIM_CONFIG="$(absolute "${SHOPSIM_CONFIG}")"
PROMPT_DATA="$(absolute "${PROMPT_DATA}")"
[[ -z "${SAVE_DIR:-}" ]] || SAVE_DIR="$(absolute "${SAVE_DIR}")"

[[ -f "${MODEL_ARGS_FILE}" ]] || die "model args file not found: ${MODEL_ARGS_FILE}"
# shellcheck source=configs/slime/models/qwen3.5-4B.sh
source "${MODEL_ARGS_FILE}"

# Validate the plugin options now, with every problem listed, rather than inside a Ray actor later.
RUN_DIR="$(PYTHONPATH="${REPO_ROOT}${PYTHONPATH:+:${PYTHONPATH}}" "${PYTHON}" -c \
  'import sys; from shopsimrl.config import load_options_file; print(load_options_file(sys.argv[1]).run_dir)' \
  "${SHOPSIM_CONFIG}")" || die "invalid plugin options in ${SHOPSIM_CONFIG} (see above)"

WANDB_ARGS=()
if [[ "${USE_WANDB}" == 1 ]]; then
  WANDB_ARGS=(--use-wandb
    --wandb-project "${WANDB_PROJECT:-shopsimrl}"
    --wandb-group "${WANDB_GROUP:-qwen35-4b-round-000}"
    --disable-wandb-random-suffix)
  [[ -z "${WANDB_ENTITY:-}" ]] || WANDB_ARGS+=(--wandb-team "${WANDB_ENTITY}")
  if [[ -n "${WANDB_MODE:-}" ]]; then
    case "${WANDB_MODE}" in online | offline) ;; *) die "WANDB_MODE must be online or offline, got '${WANDB_MODE}'" ;; esac
    WANDB_ARGS+=(--wandb-mode "${WANDB_MODE}")
  fi
  [[ -z "${WANDB_DIR:-}" ]] || WANDB_ARGS+=(--wandb-dir "${WANDB_DIR}")
fi

CLUSTER_ARGS=(--actor-num-nodes 1
  --actor-num-gpus-per-node "${ACTOR_NUM_GPUS_PER_NODE}"
  --colocate
  --rollout-num-gpus-per-engine "${ROLLOUT_NUM_GPUS_PER_ENGINE}")

CKPT_ARGS=(--hf-checkpoint "${HF_CHECKPOINT}" --ref-load "${REF_LOAD}")
if [[ -n "${SAVE_DIR:-}" ]]; then
  CKPT_ARGS+=(--load "${SAVE_DIR}" --save "${SAVE_DIR}" --save-interval "${SAVE_INTERVAL:?SAVE_INTERVAL is required with SAVE_DIR}")
fi

DATA_ARGS=(--prompt-data "${PROMPT_DATA}"
  --input-key prompt
  --label-key label
  --metadata-key metadata
  --rollout-shuffle
  --rollout-seed "${ROLLOUT_SEED}")

ROLLOUT_ARGS=(--num-rollout "${NUM_ROLLOUT}"
  --rollout-batch-size "${ROLLOUT_BATCH_SIZE}"
  --n-samples-per-prompt "${N_SAMPLES_PER_PROMPT}"
  --over-sampling-batch-size "${OVER_SAMPLING_BATCH_SIZE}"
  --num-steps-per-rollout "${NUM_STEPS_PER_ROLLOUT}"
  --rollout-max-response-len "${ROLLOUT_MAX_RESPONSE_LEN}"
  --rollout-max-context-len "${ROLLOUT_MAX_CONTEXT_LEN}"
  --rollout-temperature "${ROLLOUT_TEMPERATURE}")

HOOK_ARGS=(--custom-generate-function-path shopsimrl.slime_hooks.generate
  --custom-rm-path shopsimrl.slime_hooks.reward
  --custom-reward-post-process-path shopsimrl.slime_hooks.reward_post_process
  --dynamic-sampling-filter-path shopsimrl.slime_hooks.dynamic_sampling_filter
  --rollout-all-samples-process-path shopsimrl.slime_metrics.record_generated_rollout_groups
  --custom-rollout-log-function-path shopsimrl.slime_metrics.enrich_rollout_metrics
  --custom-config-path "${SHOPSIM_CONFIG}")

GRPO_ARGS=(--advantage-estimator grpo
  --use-kl-loss
  --kl-loss-coef "${KL_LOSS_COEF}"
  --kl-loss-type low_var_kl
  --entropy-coef "${ENTROPY_COEF}"
  --eps-clip "${EPS_CLIP}"
  --eps-clip-high "${EPS_CLIP_HIGH}")

OPTIMIZER_ARGS=(--optimizer adam
  --lr "${LR}"
  --lr-decay-style constant
  --weight-decay 0.1
  --adam-beta1 0.9
  --adam-beta2 0.98)

PERF_ARGS=(--tensor-model-parallel-size "${TENSOR_MODEL_PARALLEL_SIZE}"
  --pipeline-model-parallel-size 1
  --context-parallel-size 1
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
  --use-dynamic-batch-size
  --max-tokens-per-gpu "${MAX_TOKENS_PER_GPU}")
((TENSOR_MODEL_PARALLEL_SIZE == 1)) || PERF_ARGS+=(--sequence-parallel)

SGLANG_ARGS=(--sglang-mem-fraction-static "${SGLANG_MEM_FRACTION_STATIC}")

MISC_ARGS=(--attention-dropout 0.0
  --hidden-dropout 0.0
  --accumulate-allreduce-grads-in-fp32
  --attention-softmax-in-fp32
  --attention-backend flash)

# Variables the Ray workers need. The W&B API key is deliberately not here: it would be shown by the
# Ray dashboard; workers inherit it from this process's environment (set by `wandb login` or .env).
RUNTIME_ENV_JSON="$("${PYTHON}" -c '
import json, os, sys
env = {"PYTHONPATH": sys.argv[1], "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONUNBUFFERED": "1"}
for name in sys.argv[2:]:
    if os.environ.get(name):
        env[name] = os.environ[name]
print(json.dumps({"env_vars": env}, sort_keys=True))
' "${MEGATRON_DIR}/" USE_WANDB WANDB_PROJECT WANDB_GROUP WANDB_RUN_GROUP WANDB_ENTITY WANDB_MODE WANDB_DIR \
  WANDB_DATA_DIR WANDB_CACHE_DIR)"

RAY_START=(ray start --head --node-ip-address "${MASTER_ADDR}" --num-gpus "${ACTOR_NUM_GPUS_PER_NODE}"
  --disable-usage-stats --dashboard-host=127.0.0.1 --dashboard-port="${RAY_DASHBOARD_PORT}")

SUBMIT=(ray job submit --address="http://127.0.0.1:${RAY_DASHBOARD_PORT}"
  --runtime-env-json="${RUNTIME_ENV_JSON}"
  -- "${PYTHON}" "${SLIME_DIR}/train.py"
  "${CLUSTER_ARGS[@]}" "${MODEL_ARGS[@]}" "${CKPT_ARGS[@]}" "${DATA_ARGS[@]}" "${ROLLOUT_ARGS[@]}"
  "${HOOK_ARGS[@]}" "${GRPO_ARGS[@]}" "${OPTIMIZER_ARGS[@]}" "${PERF_ARGS[@]}" "${SGLANG_ARGS[@]}"
  "${MISC_ARGS[@]}" "${WANDB_ARGS[@]}")

echo "run_shopsimrl_slime.sh: mode=${RUN_MODE} config=${LAUNCH_CONFIG} run_dir=${RUN_DIR}" \
  "groups=${ROLLOUT_BATCH_SIZE}x${N_SAMPLES_PER_PROMPT} rollouts=${NUM_ROLLOUT}" \
  "steps_per_rollout=${NUM_STEPS_PER_ROLLOUT} gpus=${ACTOR_NUM_GPUS_PER_NODE} use_wandb=${USE_WANDB}" >&2

if [[ "${DRY_RUN}" == 1 ]]; then
  printf '%q ' "${RAY_START[@]}"
  printf '\n'
  printf '%q ' "${SUBMIT[@]}"
  printf '\n'
  exit 0
fi

[[ -f "${SLIME_DIR}/train.py" ]] || die "slime not found at ${SLIME_DIR} (run inside the train image, or set SLIME_DIR)"
[[ -f "${PROMPT_DATA}" ]] || die "prompt data not found: ${PROMPT_DATA}"
mkdir -p "${RUN_DIR}"
[[ -z "${WANDB_DIR:-}" ]] || mkdir -p "${WANDB_DIR}"

export PYTHONUNBUFFERED=1
# A previous run's Ray head (in this container) would hold the GPUs.
ray stop --force >/dev/null 2>&1 || true
"${RAY_START[@]}"
exec "${SUBMIT[@]}"

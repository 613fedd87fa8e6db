#!/usr/bin/env bash
# Launch a ShopSimRL GRPO run on slime: check every input, start a single-node Ray head, then submit
# slime's train.py with ShopSimRL's hooks (dotted paths) and plugin options (--custom-config-path).
#
# Usage:  bash scripts/run_shopsimrl_slime.sh [LAUNCH_CONFIG]
#   LAUNCH_CONFIG   configs/slime/formal.env (default), configs/slime/smoke.env or smoke-2gpu.env;
#                   sourced after configs/slime/common.env. Smoke and formal runs differ only by it.
# Run it from the launch directory (the container's /workspace, or the checkout): runs/,
# checkpoints/ and wandb/ are created there, nowhere else, and only after every check passed.
# The job's output is kept in <run_dir>/slime_job.log; a smoke run (RUN_MODE=smoke) is then judged on
# it by `shopsimrl slime smoke-report` (<run_dir>/smoke_report.json), whose failure is the launch's.
# Environment:
#   DRY_RUN=1       print the plan (conversion, prompt shape, credentials, ownership) as `# ` lines,
#                   then the Ray and slime commands, one shell-quoted line each; run and write nothing
#   WANDB_GROUP     the round (default qwen35-4b-round-000): run dir runs/<group>/train, checkpoints
#                   checkpoints/<group>, W&B group; a smoke run uses <group>-smoke
#   START_LOAD      the previous round's save dir (checkpoints/<previous group>); empty for the first
#                   round. It becomes --ref-load, with this round's own empty --load/--save dir: slime
#                   then starts at rollout 0 from its final weights with a fresh optimizer, and a
#                   relaunch after a crash resumes this round's own saves (docs/slime_handoff.md)
#   ROLLOUT_SEED, SHOPSIM_CONFIG   the round's seed and plugin options (common.env/formal.env defaults)
#   ALGO            grpo or ppo: the advantage estimator, over the profile's ADVANTAGE_ESTIMATOR; ppo
#                   adds slime's critic flags (--gamma --lambd --value-clip --num-critic-only-steps
#                   --megatron-config-path; common.env) and our rollout-data hook (rollout/ppo/*
#                   spreads, docs/metrics.md "PPO"). With SAVE_DIR the critic saves to
#                   SAVE_DIR/critic and starts from its own, START_LOAD/critic's or fresh (see below)
#   NUM_GPUS, SMOKE_NUM_GPUS       GPUs of a formal / smoke run (common.env, smoke.env)
#   USE_WANDB=0|1   1 adds --use-wandb --wandb-project --wandb-group --disable-wandb-random-suffix
#                   --wandb-mode (WANDB_MODE, default offline), and --wandb-team/--wandb-dir when
#                   WANDB_ENTITY/WANDB_DIR are set. Credentials come from WANDB_API_KEY in the
#                   environment or a netrc file (NETRC), never from a flag: slime uploads its
#                   arguments in the run config.
#   SLIME_DIR (/root/slime), MEGATRON_DIR (/root/Megatron-LM), MASTER_ADDR (127.0.0.1),
#   RAY_DASHBOARD_PORT (8265), RAY_TEMP_DIR (/tmp/ray: compose bind-mounts ./runs/ray there, so
#   Ray's logs outlive the container), NCCL_NVLS_ENABLE (default: 1 when nvidia-smi shows NVLink),
#   PYTHON (python3)
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
START_LOAD="${START_LOAD:-}"
SLIME_DIR="${SLIME_DIR:-/root/slime}"
MEGATRON_DIR="${MEGATRON_DIR:-/root/Megatron-LM}"
MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
RAY_DASHBOARD_PORT="${RAY_DASHBOARD_PORT:-8265}"
RAY_TEMP_DIR="${RAY_TEMP_DIR:-/tmp/ray}"
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

required=(RUN_MODE RUN_GROUP MODEL_ARGS_FILE HF_CHECKPOINT REF_LOAD SHOPSIM_CONFIG PROMPT_DATA
  ACTOR_NUM_GPUS_PER_NODE ROLLOUT_NUM_GPUS_PER_ENGINE SGLANG_MEM_FRACTION_STATIC TENSOR_MODEL_PARALLEL_SIZE
  MAX_TOKENS_PER_GPU ROLLOUT_SEED NUM_ROLLOUT ROLLOUT_BATCH_SIZE N_SAMPLES_PER_PROMPT OVER_SAMPLING_BATCH_SIZE
  NUM_STEPS_PER_ROLLOUT ROLLOUT_MAX_RESPONSE_LEN ROLLOUT_TEMPERATURE LR LR_WARMUP_FRACTION KL_LOSS_COEF ENTROPY_COEF
  EPS_CLIP EPS_CLIP_HIGH)
missing=()
for name in "${required[@]}"; do
  [[ -n "${!name:-}" ]] || missing+=("${name}")
done
((${#missing[@]} == 0)) || die "${LAUNCH_CONFIG}: missing setting(s): ${missing[*]}"
ADVANTAGE_ESTIMATOR="${ALGO:-${ADVANTAGE_ESTIMATOR:-grpo}}"
case "${ADVANTAGE_ESTIMATOR}" in grpo | ppo) ;; *) die "ALGO / ADVANTAGE_ESTIMATOR must be grpo or ppo, got '${ADVANTAGE_ESTIMATOR}'" ;; esac
[[ "${ROLLOUT_SEED}" =~ ^[0-9]+$ ]] || die "ROLLOUT_SEED must be a non-negative integer, got '${ROLLOUT_SEED}'"
[[ "${ACTOR_NUM_GPUS_PER_NODE}" =~ ^[1-9][0-9]*$ ]] ||
  die "${LAUNCH_CONFIG}: the GPU count (NUM_GPUS / SMOKE_NUM_GPUS) must be a positive integer, got '${ACTOR_NUM_GPUS_PER_NODE}'"
# Megatron asserts warm-up < decay steps: a fraction in [0, 1).
[[ "${LR_WARMUP_FRACTION}" =~ ^(0+(\.[0-9]*)?|0*\.[0-9]+)$ ]] ||
  die "${LAUNCH_CONFIG}: LR_WARMUP_FRACTION must be a decimal in [0, 1), got '${LR_WARMUP_FRACTION}'"
((OVER_SAMPLING_BATCH_SIZE >= ROLLOUT_BATCH_SIZE)) ||
  die "${LAUNCH_CONFIG}: OVER_SAMPLING_BATCH_SIZE (${OVER_SAMPLING_BATCH_SIZE}) must be >= ROLLOUT_BATCH_SIZE (${ROLLOUT_BATCH_SIZE}) (slime asserts it)"

# Ray runs train.py and the hooks in other working directories: hand them absolute paths.
absolute() { if [[ "$1" == /* ]]; then printf '%s' "$1"; else printf '%s/%s' "${PWD}" "$1"; fi; }
SHOPSIM_CONFIG="$(absolute "${SHOPSIM_CONFIG}")"
PROMPT_DATA="$(absolute "${PROMPT_DATA}")"
HF_CHECKPOINT="$(absolute "${HF_CHECKPOINT}")"
REF_LOAD="$(absolute "${REF_LOAD}")"
[[ -z "${SAVE_DIR:-}" ]] || SAVE_DIR="$(absolute "${SAVE_DIR}")"
[[ -z "${START_LOAD}" ]] || START_LOAD="$(absolute "${START_LOAD}")"

[[ -f "${MODEL_ARGS_FILE}" ]] || die "model args file not found: ${MODEL_ARGS_FILE}"
# shellcheck source=configs/slime/models/qwen3.5-4B.sh
source "${MODEL_ARGS_FILE}"

if [[ "${DRY_RUN}" == 0 ]]; then
  [[ -f "${SLIME_DIR}/train.py" ]] || die "slime not found at ${SLIME_DIR} (run inside the train image, or set SLIME_DIR)"
  PREPARE_MODE=(--write)
else
  PREPARE_MODE=()
fi
# PPO: slime trains a critic (use_critic) beside the actor, on the same GPUs (it forces offload_train).
# slime v0.3.1 has no critic checkpoint flag: the critic is the actor's arguments with the critic entry
# of --megatron-config-path applied, so under SAVE_DIR prepare writes a copy of the role file whose
# critic saves to SAVE_DIR/critic and loads its own save (a resume), START_LOAD/critic (the hand-off),
# or nothing of its own (fresh, from --ref-load's weights), as the actor does (shopsimrl/ops/critic.py).
ROLES_ARGS=()
if [[ "${ADVANTAGE_ESTIMATOR}" == ppo ]]; then
  for name in GAMMA LAMBD VALUE_CLIP NUM_CRITIC_ONLY_STEPS MEGATRON_ROLES_CONFIG; do
    [[ -n "${!name:-}" ]] || die "${LAUNCH_CONFIG}: ppo needs ${name} (common.env)"
  done
  [[ -f "${MEGATRON_ROLES_CONFIG}" ]] || die "megatron roles config not found: ${MEGATRON_ROLES_CONFIG}"
  MEGATRON_ROLES_CONFIG="$(absolute "${MEGATRON_ROLES_CONFIG}")"
  [[ -z "${SAVE_DIR:-}" ]] || ROLES_ARGS=(--megatron-roles "${MEGATRON_ROLES_CONFIG}")
fi
# Plugin options (every problem listed), and for a real launch every input -- model files, the
# converted checkpoint, prompt data, START_LOAD's tracker -- before anything is created or
# started. Prints the run dir, the resolved options file slime gets, and where slime will start (PPO
# under SAVE_DIR: also the resolved role file and where the critic starts).
prepared="$(PYTHONPATH="${REPO_ROOT}${PYTHONPATH:+:${PYTHONPATH}}" "${PYTHON}" -m shopsimrl.cli slime prepare \
  --config "${SHOPSIM_CONFIG}" --group "${RUN_GROUP}" --base-dir "${PWD}" --hf-checkpoint "${HF_CHECKPOINT}" \
  --ref-load "${REF_LOAD}" --prompt-data "${PROMPT_DATA}" --start-load "${START_LOAD}" --save-dir "${SAVE_DIR:-}" \
  "${ROLES_ARGS[@]}" "${PREPARE_MODE[@]}" -- "${MODEL_ARGS[@]}")" ||
  die "cannot launch ${LAUNCH_CONFIG} with ${SHOPSIM_CONFIG}: see the errors above; nothing was started"
mapfile -t prepared_lines <<<"${prepared}"
expected_lines=$((${#ROLES_ARGS[@]} ? 5 : 3))
((${#prepared_lines[@]} == expected_lines)) ||
  die "shopsimrl slime prepare printed ${#prepared_lines[@]} lines, expected ${expected_lines}: ${prepared}"
RUN_DIR="${prepared_lines[0]}"
OPTIONS_FILE="${prepared_lines[1]}"
START_PLAN="${prepared_lines[2]}"
CRITIC_PLAN="fresh from --ref-load's weights, never saved (no SAVE_DIR; ${MEGATRON_ROLES_CONFIG:-} as shipped)"
if ((${#ROLES_ARGS[@]})); then
  MEGATRON_ROLES_CONFIG="${prepared_lines[3]}"
  CRITIC_PLAN="${prepared_lines[4]}"
fi

WANDB_ARGS=()
if [[ "${USE_WANDB}" == 1 ]]; then
  WANDB_ARGS=(--use-wandb
    --wandb-project "${WANDB_PROJECT:-shopsimrl}"
    --wandb-group "${RUN_GROUP}"
    --disable-wandb-random-suffix)
  [[ -z "${WANDB_ENTITY:-}" ]] || WANDB_ARGS+=(--wandb-team "${WANDB_ENTITY}")
  # Always explicit: slime's own default is online, which fails at wandb.init without credentials;
  # the docs, preflight and the plan line all say offline when unset.
  export WANDB_MODE="${WANDB_MODE:-offline}"
  case "${WANDB_MODE}" in online | offline) ;; *) die "WANDB_MODE must be online or offline, got '${WANDB_MODE}'" ;; esac
  WANDB_ARGS+=(--wandb-mode "${WANDB_MODE}")
  [[ -z "${WANDB_DIR:-}" ]] || WANDB_ARGS+=(--wandb-dir "${WANDB_DIR}")
fi
# Our own code (and any wandb call in a worker) sees the same group as slime.
export WANDB_GROUP="${RUN_GROUP}" WANDB_RUN_GROUP="${RUN_GROUP}"

CLUSTER_ARGS=(--actor-num-nodes 1
  --actor-num-gpus-per-node "${ACTOR_NUM_GPUS_PER_NODE}"
  --colocate
  --rollout-num-gpus-per-engine "${ROLLOUT_NUM_GPUS_PER_ENGINE}")

# Round hand-off (docs/slime_handoff.md): the previous round's save dir is the reference load, and
# --load/--save is this round's own dir. While that dir holds no tracker, slime loads --ref-load's
# weights only, with a fresh optimizer, at rollout 0; once it holds one (a relaunch after a crash),
# slime resumes this round's own run. Never --finetune or --start-rollout-id: both break that resume.
CKPT_ARGS=(--hf-checkpoint "${HF_CHECKPOINT}" --ref-load "${START_LOAD:-${REF_LOAD}}")
if [[ -n "${SAVE_DIR:-}" ]]; then
  # --save-hf: slime writes an HF copy of the actor at every save (save_hf.format(rollout_id=...)); the
  # last one is the round's fixed checkpoint that SGLang serves to the Analyst's trials, the gate and eval.
  CKPT_ARGS+=(--load "${SAVE_DIR}" --save "${SAVE_DIR}" --save-interval "${SAVE_INTERVAL:?SAVE_INTERVAL is required with SAVE_DIR}"
    --save-hf "${SAVE_DIR}/hf/rollout-{rollout_id}")
fi

# The prompt of each line is a list of chat messages: Qwen3.5 ships a processor config, and slime's
# Dataset then requires messages; --apply-chat-template renders them with the checkpoint's template.
DATA_ARGS=(--prompt-data "${PROMPT_DATA}"
  --input-key prompt
  --label-key label
  --metadata-key metadata
  --apply-chat-template
  --rollout-shuffle
  --rollout-seed "${ROLLOUT_SEED}")

ROLLOUT_ARGS=(--num-rollout "${NUM_ROLLOUT}"
  --rollout-batch-size "${ROLLOUT_BATCH_SIZE}"
  --n-samples-per-prompt "${N_SAMPLES_PER_PROMPT}"
  --over-sampling-batch-size "${OVER_SAMPLING_BATCH_SIZE}"
  --num-steps-per-rollout "${NUM_STEPS_PER_ROLLOUT}"
  --rollout-max-response-len "${ROLLOUT_MAX_RESPONSE_LEN}"
  --rollout-temperature "${ROLLOUT_TEMPERATURE}")

HOOK_ARGS=(--custom-generate-function-path shopsimrl.slime_hooks.generate
  --custom-rm-path shopsimrl.slime_hooks.reward
  --custom-reward-post-process-path shopsimrl.slime_hooks.reward_post_process
  --dynamic-sampling-filter-path shopsimrl.slime_hooks.dynamic_sampling_filter
  --rollout-all-samples-process-path shopsimrl.slime_metrics.record_generated_rollout_groups
  --custom-rollout-log-function-path shopsimrl.slime_metrics.enrich_rollout_metrics
  --custom-config-path "${OPTIONS_FILE}")

# The KL loss only with a weight: --use-kl-loss alone makes slime load the reference model (a pinned
# CPU copy of the weights on every rank) and run its forward every step (placement_group.py:178).
# The hand-off does not need it: --ref-load is slime's start for a --load without a tracker either way.
if [[ "${KL_LOSS_COEF}" =~ ^[+-]?0*(\.0*)?$ ]]; then
  KL_ARGS=()
else
  KL_ARGS=(--use-kl-loss --kl-loss-coef "${KL_LOSS_COEF}" --kl-loss-type low_var_kl)
fi
GRPO_ARGS=(--advantage-estimator "${ADVANTAGE_ESTIMATOR}"
  "${KL_ARGS[@]}"
  --entropy-coef "${ENTROPY_COEF}"
  --eps-clip "${EPS_CLIP}"
  --eps-clip-high "${EPS_CLIP_HIGH}")

PPO_ARGS=()
if [[ "${ADVANTAGE_ESTIMATOR}" == ppo ]]; then
  PPO_ARGS=(--gamma "${GAMMA}"
    --lambd "${LAMBD}"
    --value-clip "${VALUE_CLIP}"
    --num-critic-only-steps "${NUM_CRITIC_ONLY_STEPS}"
    --megatron-config-path "${MEGATRON_ROLES_CONFIG}"
    --rollout-data-postprocess-path shopsimrl.slime_metrics.add_ppo_spread_metrics)
fi

OPTIMIZER_ARGS=(--optimizer adam
  --lr "${LR}"
  --lr-warmup-fraction "${LR_WARMUP_FRACTION}"
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

# NVLink SHARP (NVLS) only where NVLink exists, as slime's own launcher decides.
if [[ -z "${NCCL_NVLS_ENABLE:-}" ]]; then
  NCCL_NVLS_ENABLE=0
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi topo -m 2>/dev/null | grep -q 'NV[0-9]'; then
    NCCL_NVLS_ENABLE=1
  fi
fi
# The rollout talks to SGLang's router on the loopback: a host proxy must never see that traffic.
NO_PROXY_HOSTS="127.0.0.1,localhost"
[[ "${MASTER_ADDR}" == 127.0.0.1 || "${MASTER_ADDR}" == localhost ]] || NO_PROXY_HOSTS+=",${MASTER_ADDR}"

# Variables the Ray workers need (slime's own launcher sets the first six). The W&B API key is
# deliberately not here: the Ray dashboard shows the runtime env; workers inherit the key from the
# `ray start` process's environment (compose passes WANDB_API_KEY by name, or mounts a netrc).
RUNTIME_ENV_JSON="$("${PYTHON}" -c '
import json, os, sys
env = {"PYTHONPATH": sys.argv[1], "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONUNBUFFERED": "1",
       "RAY_USE_UVLOOP": "0", "NCCL_NVLS_ENABLE": sys.argv[2], "no_proxy": sys.argv[3], "NO_PROXY": sys.argv[3],
       "MASTER_ADDR": sys.argv[4]}
for name in sys.argv[5:]:
    if os.environ.get(name):
        env[name] = os.environ[name]
print(json.dumps({"env_vars": env}, sort_keys=True))
' "${MEGATRON_DIR}/" "${NCCL_NVLS_ENABLE}" "${NO_PROXY_HOSTS}" "${MASTER_ADDR}" USE_WANDB WANDB_PROJECT WANDB_GROUP \
  WANDB_RUN_GROUP WANDB_ENTITY WANDB_MODE WANDB_DIR WANDB_DATA_DIR WANDB_CACHE_DIR NETRC)"

RAY_START=(ray start --head --node-ip-address "${MASTER_ADDR}" --num-gpus "${ACTOR_NUM_GPUS_PER_NODE}"
  --temp-dir "${RAY_TEMP_DIR}" --disable-usage-stats --dashboard-host=127.0.0.1
  --dashboard-port="${RAY_DASHBOARD_PORT}")

SUBMIT=(ray job submit --address="http://127.0.0.1:${RAY_DASHBOARD_PORT}"
  --runtime-env-json="${RUNTIME_ENV_JSON}"
  -- "${PYTHON}" "${SLIME_DIR}/train.py"
  "${CLUSTER_ARGS[@]}" "${MODEL_ARGS[@]}" "${CKPT_ARGS[@]}" "${DATA_ARGS[@]}" "${ROLLOUT_ARGS[@]}"
  "${HOOK_ARGS[@]}" "${GRPO_ARGS[@]}" "${PPO_ARGS[@]}" "${OPTIMIZER_ARGS[@]}" "${PERF_ARGS[@]}" "${SGLANG_ARGS[@]}"
  "${MISC_ARGS[@]}" "${WANDB_ARGS[@]}")

# The summary line opens the job log too: the smoke report's startup_summary criterion reads it there.
SUMMARY_LINE="run_shopsimrl_slime.sh: mode=${RUN_MODE} config=${LAUNCH_CONFIG} group=${RUN_GROUP} run_dir=${RUN_DIR}"
SUMMARY_LINE+=" groups=${ROLLOUT_BATCH_SIZE}x${N_SAMPLES_PER_PROMPT} rollouts=${NUM_ROLLOUT}"
SUMMARY_LINE+=" steps_per_rollout=${NUM_STEPS_PER_ROLLOUT} gpus=${ACTOR_NUM_GPUS_PER_NODE} use_wandb=${USE_WANDB}"
echo "${SUMMARY_LINE}" >&2

# slime logs its training metrics only to W&B/TensorBoard and its Python log: the job's output is kept
# in the run dir, and a smoke run is judged on it (shopsimrl/ops/slime_smoke.py, docs/operations.md).
JOB_LOG="${RUN_DIR}/slime_job.log"
REPORT=()
if [[ "${RUN_MODE}" == smoke ]]; then
  REPORT=("${PYTHON}" -m shopsimrl.cli slime smoke-report --slime-log "${JOB_LOG}" --out "${RUN_DIR}"
    --algo "${ADVANTAGE_ESTIMATOR}" --options "${OPTIONS_FILE}")
fi

# The plan: what must exist or happen around these two commands (the DRY_RUN shows it).
credential_route() {
  if [[ "${USE_WANDB}" == 0 ]]; then
    echo "none: USE_WANDB=0 (the merged rollout metrics stay in ${RUN_DIR}/metrics.jsonl, slime's own in its log)"
  elif [[ "${WANDB_MODE:-offline}" == offline ]]; then
    echo "none needed now: WANDB_MODE=offline writes ${WANDB_DIR:-wandb}; upload later with \`make wandb-sync\`"
  elif [[ -n "${WANDB_API_KEY:-}" ]]; then
    echo "WANDB_API_KEY from the environment (compose passes it by name; never a flag, never in the Ray runtime env)"
  elif [[ -n "${NETRC:-}" ]]; then
    echo "netrc file NETRC=${NETRC} (compose mounts the host's ~/.netrc read-only there)"
  else
    echo "MISSING: WANDB_MODE=online but neither WANDB_API_KEY nor NETRC is set (run \`wandb login\` on the host, or export WANDB_API_KEY)"
  fi
}
ownership() {
  if [[ -n "${HOST_UID:-}" ]]; then
    echo "runs/ checkpoints/ wandb/ artifacts/ are handed to ${HOST_UID}:${HOST_GID:-${HOST_UID}} at start and exit (scripts/container_entry.sh: chown -R ${HOST_UID}:${HOST_GID:-${HOST_UID}})"
  else
    echo "files are written as uid $(id -u); under compose, scripts/container_entry.sh hands them to HOST_UID:HOST_GID (make passes both)"
  fi
}
PLAN=(
  "conversion: ${REF_LOAD} (the first round's --ref-load) must hold the Megatron copy of ${HF_CHECKPOINT}; create it once with \`make convert\`, which runs: $(DRY_RUN=1 bash "${REPO_ROOT}/scripts/convert_hf_to_torch_dist.sh" 2>/dev/null | tail -n 1 | sed "s/ $//")"
  "prompts: ${PROMPT_DATA}: one task per line, prompt = [{\"role\": \"user\", \"content\": <instruction>}], rendered by slime with --apply-chat-template; our generate hook plays metadata.task_id (write it with \`shopsimrl tasks export\`)"
  "start: ${START_PLAN}"
)
[[ "${ADVANTAGE_ESTIMATOR}" != ppo ]] || PLAN+=("critic: ${CRITIC_PLAN}")
PLAN+=(
  "credentials: $(credential_route)"
  "ownership: $(ownership)"
  "outputs: ${RUN_DIR} (plugin options ${OPTIONS_FILE})${SAVE_DIR:+, checkpoints ${SAVE_DIR}}, Ray logs ${RAY_TEMP_DIR}/session_latest/logs"
  "job log: ${JOB_LOG} (this summary line, then the job's output as \`ray job submit\` streams it)"
)
((${#REPORT[@]} == 0)) || PLAN+=("smoke report: after the job, ${REPORT[*]} writes ${RUN_DIR}/smoke_report.json; a failed required criterion (or a failed job) makes the launch exit non-zero")

if [[ "${DRY_RUN}" == 1 ]]; then
  printf '# %s\n' "${PLAN[@]}"
  printf '%q ' "${RAY_START[@]}"
  printf '\n'
  printf '%q ' "${SUBMIT[@]}"
  printf '\n'
  exit 0
fi

[[ -z "${WANDB_DIR:-}" ]] || mkdir -p "${WANDB_DIR}"
printf 'run_shopsimrl_slime.sh: %s\n' "${PLAN[@]}" >&2

export PYTHONUNBUFFERED=1 no_proxy="${NO_PROXY_HOSTS}" NO_PROXY="${NO_PROXY_HOSTS}"
# A previous run's Ray head (in this container) would hold the GPUs.
ray stop --force >/dev/null 2>&1 || true
"${RAY_START[@]}"
printf '%s\n' "${SUMMARY_LINE}" >"${JOB_LOG}"
job_status=0
"${SUBMIT[@]}" 2>&1 | tee -a "${JOB_LOG}" || job_status=$? # pipefail: the status of `ray job submit`
((${#REPORT[@]})) || exit "${job_status}"
# Judged even after a failed job: the report says which criterion it never reached.
report_status=0
PYTHONPATH="${REPO_ROOT}${PYTHONPATH:+:${PYTHONPATH}}" "${REPORT[@]}" || report_status=$?
((job_status == 0)) || exit "${job_status}"
exit "${report_status}"

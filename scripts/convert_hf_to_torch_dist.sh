#!/usr/bin/env bash
# Convert the Hugging Face checkpoint to Megatron torch_dist for slime's --ref-load, with slime's own
# tools/convert_hf_to_torch_dist.py and the model arguments of configs/slime/models/*.sh, as slime's
# quick start does. What `make convert` runs in the train container (docker compose run convert).
#
# Usage:  bash scripts/convert_hf_to_torch_dist.sh
# Reads HF_CHECKPOINT, REF_LOAD and MODEL_ARGS_FILE from configs/slime/common.env (REF_LOAD defaults
# to checkpoints/base/Qwen3.5-4B_torch_dist, on the writable checkpoints/ volume).
# Environment: DRY_RUN=1 (print the command only), CONVERT_NUM_GPUS (1), SLIME_DIR (/root/slime),
#   MEGATRON_DIR (/root/Megatron-LM), PYTHON (python3).
# The conversion writes to <REF_LOAD>.partial and renames it when complete, with a manifest of the
# HF config and model arguments it used (preflight and the launcher compare them); an existing
# matching REF_LOAD is kept (exit 0), a mismatching one is an error.
set -euo pipefail

die() {
  echo "convert_hf_to_torch_dist.sh: error: $*" >&2
  exit 2
}

REPO_ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
COMMON_CONFIG="${COMMON_CONFIG:-configs/slime/common.env}"
DRY_RUN="${DRY_RUN:-0}"
CONVERT_NUM_GPUS="${CONVERT_NUM_GPUS:-1}"
SLIME_DIR="${SLIME_DIR:-/root/slime}"
MEGATRON_DIR="${MEGATRON_DIR:-/root/Megatron-LM}"
PYTHON="${PYTHON:-python3}"

case "${DRY_RUN}" in 0 | 1) ;; *) die "DRY_RUN must be 0 or 1, got '${DRY_RUN}'" ;; esac
[[ -f "${COMMON_CONFIG}" ]] || die "config not found: ${COMMON_CONFIG} (run from the repository root or the container's /workspace)"
# shellcheck source=configs/slime/common.env
source "${COMMON_CONFIG}"
[[ -f "${MODEL_ARGS_FILE}" ]] || die "model args file not found: ${MODEL_ARGS_FILE}"
# shellcheck source=configs/slime/models/qwen3.5-4B.sh
source "${MODEL_ARGS_FILE}"

absolute() { if [[ "$1" == /* ]]; then printf '%s' "$1"; else printf '%s/%s' "${PWD}" "$1"; fi; }
HF_CHECKPOINT="$(absolute "${HF_CHECKPOINT}")"
REF_LOAD="$(absolute "${REF_LOAD}")"
PARTIAL="${REF_LOAD}.partial"
shopsimrl() { PYTHONPATH="${REPO_ROOT}${PYTHONPATH:+:${PYTHONPATH}}" "${PYTHON}" -m shopsimrl.cli "$@"; }

CONVERT=(torchrun --nproc-per-node "${CONVERT_NUM_GPUS}" "${SLIME_DIR}/tools/convert_hf_to_torch_dist.py"
  "${MODEL_ARGS[@]}" --hf-checkpoint "${HF_CHECKPOINT}" --save "${PARTIAL}")

if [[ "${DRY_RUN}" == 1 ]]; then
  printf '%q ' "${CONVERT[@]}"
  printf '\n'
  exit 0
fi

[[ -f "${SLIME_DIR}/tools/convert_hf_to_torch_dist.py" ]] ||
  die "slime's converter not found under ${SLIME_DIR} (run inside the train image: make convert)"
shopsimrl slime check-model "${HF_CHECKPOINT}" >&2 || die "fix the model directory first; nothing was converted"
if [[ -e "${REF_LOAD}" ]]; then
  if shopsimrl slime check-converted --hf-checkpoint "${HF_CHECKPOINT}" --ref-load "${REF_LOAD}" -- "${MODEL_ARGS[@]}"; then
    exit 0
  fi
  die "${REF_LOAD} exists but does not match (see above): move it away, then run make convert again"
fi

rm -rf "${PARTIAL}"
mkdir -p "$(dirname -- "${PARTIAL}")"
slime_commit="$(git -C "${SLIME_DIR}" rev-parse HEAD 2>/dev/null || cat /opt/shopsimrl/SLIME_COMMIT 2>/dev/null || echo unknown)"
echo "convert_hf_to_torch_dist.sh: ${HF_CHECKPOINT} -> ${REF_LOAD} on ${CONVERT_NUM_GPUS} GPU(s)" >&2
# slime's quick start runs the converter from its checkout with Megatron on PYTHONPATH.
(cd "${SLIME_DIR}" && PYTHONPATH="${MEGATRON_DIR}:${SLIME_DIR}${PYTHONPATH:+:${PYTHONPATH}}" "${CONVERT[@]}")
[[ -f "${PARTIAL}/latest_checkpointed_iteration.txt" ]] || die "the converter finished without ${PARTIAL}/latest_checkpointed_iteration.txt"
shopsimrl slime write-manifest --hf-checkpoint "${HF_CHECKPOINT}" --out "${PARTIAL}" --slime-commit "${slime_commit}" \
  -- "${MODEL_ARGS[@]}" >&2
mv "${PARTIAL}" "${REF_LOAD}"
echo "convert_hf_to_torch_dist.sh: done: ${REF_LOAD}" >&2

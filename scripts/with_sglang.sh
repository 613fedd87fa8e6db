#!/usr/bin/env bash
# Serve a round's HF checkpoint with SGLang on this host, run a command against it, stop the server.
# The gate, eval and analyze services run their stage through it (compose.yaml).
#
# Usage:  bash scripts/with_sglang.sh COMMAND [ARG...]
# Environment:
#   SGLANG_CHECKPOINT  the HF directory to serve. Empty or unset: the round's last HF save,
#                      `shopsimrl slime last-hf-save checkpoints/$WANDB_GROUP`. Exported to COMMAND
#                      (resolved), so the stage records the checkpoint the server holds.
#   WANDB_GROUP        the round; needed only to resolve an empty SGLANG_CHECKPOINT.
#   SGLANG_PORT        30000, the port the shipped configs' generator and lesson URLs name.
#   SGLANG_READY_TIMEOUT_S  seconds to wait for /health (default 1800: loading, CUDA graphs).
#   DRY_RUN=1          print the server command and COMMAND; start nothing.
#
# The server runs with --enable-deterministic-inference, so the per-request sampling_seed is
# honoured and two runs of one checkpoint agree. It runs in its own process group, which is ended
# (TERM) when COMMAND ends, when SGLang dies first, and on SIGTERM/SIGINT (COMMAND gets the signal
# and is waited for, so a stage can record where it stopped). The exit status is COMMAND's.
set -euo pipefail

die() {
  echo "with_sglang.sh: error: $*" >&2
  exit 1
}
(($# > 0)) || {
  echo "with_sglang.sh: error: no command given" >&2
  exit 2
}

port="${SGLANG_PORT:-30000}"
ready_timeout_s="${SGLANG_READY_TIMEOUT_S:-1800}"
checkpoint="${SGLANG_CHECKPOINT:-}"
if [[ -z "${checkpoint}" ]]; then
  [[ -n "${WANDB_GROUP:-}" ]] || die "no checkpoint to serve: SGLANG_CHECKPOINT and WANDB_GROUP are both empty"
  checkpoint="$(shopsimrl slime last-hf-save "checkpoints/${WANDB_GROUP}")" ||
    die "no checkpoint to serve for round ${WANDB_GROUP}: train it first, or name the HF directory (GATE_CHECKPOINT, EVAL_CHECKPOINT, ANALYZE_CHECKPOINT)"
fi
[[ -d "${checkpoint}" ]] || die "${checkpoint}: not a directory (the HF checkpoint SGLang serves)"
export SGLANG_CHECKPOINT="${checkpoint}"

server=(python3 -m sglang.launch_server --model-path "${checkpoint}" --host 127.0.0.1 --port "${port}"
  --enable-deterministic-inference)
if [[ "${DRY_RUN:-0}" == 1 ]]; then
  echo "# serve: ${server[*]}"
  echo "# then (SGLANG_CHECKPOINT=${checkpoint}): $*"
  exit 0
fi

server_pid=
command_pid=
# shellcheck disable=SC2329  # invoked by the EXIT trap
stop() {
  if [[ -n "${command_pid}" ]]; then
    kill -TERM "${command_pid}" 2>/dev/null || true
    wait "${command_pid}" 2>/dev/null || true
  fi
  if [[ -n "${server_pid}" ]]; then
    kill -TERM -- "-${server_pid}" 2>/dev/null || true
    wait "${server_pid}" 2>/dev/null || true
  fi
}
trap stop EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# setsid: the server and the processes it starts form one group, ended together.
setsid "${server[@]}" &
server_pid=$!
echo "with_sglang.sh: starting SGLang on 127.0.0.1:${port} for ${checkpoint}" >&2
deadline=$((SECONDS + ready_timeout_s))
until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
  "http://127.0.0.1:${port}/health" 2>/dev/null; do
  if ! kill -0 "${server_pid}" 2>/dev/null; then
    status=0
    wait "${server_pid}" || status=$?
    server_pid=
    die "SGLang exited with status ${status} before it was healthy (its output is above)"
  fi
  ((SECONDS < deadline)) || die "SGLang was not healthy after ${ready_timeout_s} s"
  sleep 2
done
echo "with_sglang.sh: SGLang is healthy; running: $*" >&2

"$@" &
command_pid=$!
status=0
wait "${command_pid}" || status=$?
command_pid=
exit "${status}"

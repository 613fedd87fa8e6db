#!/usr/bin/env bash
# Entry of the services that run in the train image: run the command, and hand what it wrote to
# the bind mounts (runs/, checkpoints/, wandb/, artifacts/) to the host user.
#
# Usage:  bash scripts/container_entry.sh COMMAND [ARG...]      (compose.yaml's train services)
# Environment: HOST_UID, HOST_GID (make passes `id -u`/`id -g`; default: the owner of configs/, the
#   host checkout's bind mount), DRY_RUN=1 (print the chown, then run the
#   command, which prints its own dry run).
#
# Why not run as the host user: slime's image is built for root (its source, Megatron and the
# compile caches live under /root), so the service runs as root and fixes ownership instead -- at
# the start (leftovers of a killed run) and at the end, also after SIGTERM/SIGINT, which are
# forwarded to the command. Without it `make wandb-sync` (tools image, host user) could not write
# the `.synced` marker into root-owned offline runs.
#
# After a SIGTERM/SIGINT the Ray job is stopped (`ray stop`) before the hand-back: the launcher's
# command is only the `ray job submit` client, and the job it submitted keeps training and writing
# checkpoints in the Ray head after the client dies -- files the hand-back would miss, in a
# container that is about to be killed mid-save.
set -euo pipefail

OWNED_DIRS=(runs checkpoints wandb artifacts)
DRY_RUN="${DRY_RUN:-0}"
(($# > 0)) || {
  echo "container_entry.sh: error: no command given" >&2
  exit 2
}

owner="${HOST_UID:-$(stat -c %u configs 2>/dev/null || echo 0)}:${HOST_GID:-$(stat -c %g configs 2>/dev/null || echo 0)}"
give_back() {
  local dir
  for dir in "${OWNED_DIRS[@]}"; do
    [[ ! -d "${dir}" ]] || chown -R "${owner}" "${dir}" || echo "container_entry.sh: warning: could not chown ${dir} to ${owner}" >&2
  done
}

if [[ "${DRY_RUN}" == 1 ]]; then
  echo "# ownership: chown -R ${owner} ${OWNED_DIRS[*]} before and after: $*"
  exec "$@" # the command prints its own dry run
fi
# Not root: what the command writes is already the caller's; only the Ray job still needs stopping.
as_root=0
(($(id -u) != 0)) || as_root=1
((as_root == 0)) || give_back
"$@" &
child=$!
signalled=0
trap 'signalled=1; kill -TERM "${child}" 2>/dev/null || true' TERM INT
status=0
wait "${child}" || status=$?
# A trapped signal interrupts `wait`; wait again until the command itself has ended.
while kill -0 "${child}" 2>/dev/null; do
  wait "${child}" || status=$?
done
if ((signalled)) && command -v ray >/dev/null 2>&1; then
  echo "container_entry.sh: stopping the Ray job (ray stop) before handing the outputs back" >&2
  ray stop || echo "container_entry.sh: warning: ray stop failed (exit $?)" >&2
fi
((as_root == 0)) || give_back
exit "${status}"

#!/usr/bin/env bash
# `make test-containers` (CI runs it after `make test`): provision the engine and the stand-in bases
# (scripts/engine.sh), build both images on them (make images STANDIN=1), then run the container
# tests (tests/containers, marker `containers`) and print each check with its result.
# Where no engine can be provisioned (not root, no apt-get, not Linux) it says so in one line and
# exits 0; on the CI machine kind it must run.
# Usage: bash scripts/test_containers.sh [PYTHON]       (default .venv/bin/python)
set -euo pipefail

cd "$(dirname -- "${BASH_SOURCE[0]}")/.."
PY="${1:-.venv/bin/python}"
start=${SECONDS}

if ! check="$(bash scripts/engine.sh --check 2>&1)"; then
  status=$?
  if ((status == 3)); then
    echo "test-containers: skipped: ${check#engine: }"
    exit 0
  fi
  echo "${check}" >&2
  exit "${status}"
fi
echo "test-containers: provisioning the engine and the stand-in bases (cold: ~5 min, warm: seconds)"
bash scripts/engine.sh
t=${SECONDS}
echo "test-containers: building the images on the stand-ins (make images STANDIN=1 CPU=1)"
make --no-print-directory images STANDIN=1 CPU=1 >.engine/images.log 2>&1 || {
  tail -n 40 .engine/images.log >&2
  echo "test-containers: make images STANDIN=1 CPU=1 failed (log: .engine/images.log)" >&2
  exit 1
}
echo "test-containers: images built in $((SECONDS - t)) s"
"${PY}" -m pytest -p no:cacheprovider -m containers -rA tests/containers
echo "test-containers: done in $((SECONDS - start)) s"

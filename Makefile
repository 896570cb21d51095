# kvqueue-bench — `make help` lists the targets.
#
# Real file targets where a target produces files; .PHONY only for verbs.

SHELL        := /bin/bash
BOOTSTRAP_PY ?= python3
VENV         := .venv
VPY          := $(VENV)/bin/python
STAMP        := $(VENV)/.installed

# `make bench` parameters (see README); empty = the default in kvqueue/params.py.
# PYTHON is the interpreter being MEASURED (any CPython >= 3.10; nothing is installed there).
HOST     ?=
PYTHON   ?= python3
VARIANTS ?=
QUICK    ?=
AA       ?=
PROCESSES         ?=
CONFIRM_PROCESSES ?=
SAMPLES   ?=
SAMPLE_MS ?=
SEED      ?=
CASES     ?=
POOLS     ?=
CPU       ?=
RAW_DIR   ?= data/raw

truthy = $(filter 1 yes true on,$(1))
BENCH_ARGS = --host "$(HOST)" --python "$(PYTHON)" --raw-dir "$(RAW_DIR)" \
  $(if $(VARIANTS),--variants "$(VARIANTS)") \
  $(if $(PROCESSES),--processes "$(PROCESSES)") \
  $(if $(CONFIRM_PROCESSES),--confirm-processes "$(CONFIRM_PROCESSES)") \
  $(if $(SAMPLES),--samples "$(SAMPLES)") \
  $(if $(SAMPLE_MS),--sample-ms "$(SAMPLE_MS)") \
  $(if $(SEED),--seed "$(SEED)") \
  $(if $(CASES),--cases "$(CASES)") \
  $(if $(POOLS),--pools "$(POOLS)") \
  $(if $(CPU),--cpu "$(CPU)") \
  $(if $(call truthy,$(QUICK)),--quick) \
  $(if $(call truthy,$(AA)),--aa)

.DEFAULT_GOAL := help

.PHONY: help setup test lint format validate bench report clean

help: ## list the targets
	@grep -E '^[a-zA-Z_./-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | \
	  awk -F'\t' '{printf "  %-22s %s\n", $$1, $$2}'
	@echo
	@echo "  bench variables: HOST=label (required) PYTHON=/path/to/python VARIANTS=\"...\""
	@echo "                   QUICK=1 AA=1 PROCESSES=11 CONFIRM_PROCESSES=9 SAMPLES=9"
	@echo "                   SAMPLE_MS=20 SEED=1 CASES=\"...\" POOLS=\"...\" CPU=auto"
	@echo "  (defaults: kvqueue/params.py; PYTHON defaults to python3)"

$(STAMP): pyproject.toml
	@test -x $(VPY) || $(BOOTSTRAP_PY) -m venv $(VENV)
	$(VPY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

setup: $(STAMP) ## create .venv and install the package with dev extras

test: $(STAMP) ## run the test suite (pytest)
	$(VPY) -m pytest -q

lint: $(STAMP) ## ruff format check + lint
	$(VPY) -m ruff format --check kvqueue tests
	$(VPY) -m ruff check kvqueue tests

format: $(STAMP) ## apply ruff formatting and safe fixes
	$(VPY) -m ruff format kvqueue tests
	$(VPY) -m ruff check --fix kvqueue tests

validate: $(STAMP) ## run the validation gate on VARIANTS (first = baseline)
	$(VPY) -m kvqueue validate $(or $(VARIANTS),vllm==0.31.0 vllm==0.32.0 kvqueue kvqueue:floor)

bench: $(STAMP) ## collect a run into data/raw/HOST/<run-id>/ (HOST=label required)
	@$(VPY) -m kvqueue bench $(BENCH_ARGS)

RAW_FILES    := $(shell find data/raw -type f 2>/dev/null)
REPORT_DEPS  := $(STAMP) $(RAW_FILES) $(wildcard kvqueue/*.py) notebooks/report.ipynb
REPORT_HTML  := reports/report.html

report: $(REPORT_HTML) data/processed/manifest.json ## render reports/report.html and reports/pr-writeup.md from data/raw
	@echo "report: $(abspath $(REPORT_HTML))  writeup: $(abspath reports/pr-writeup.md)"

$(REPORT_HTML) reports/pr-writeup.md data/processed/manifest.json &: $(REPORT_DEPS)
	$(VPY) -m kvqueue report --raw-dir data/raw --processed-dir data/processed --out reports

clean: ## remove rebuilt outputs (data/processed, reports); raw data is never touched
	rm -rf data/processed reports

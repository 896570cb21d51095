# kvqueue-bench — `make help` lists the targets.
#
# Real file targets where a target produces files; .PHONY only for verbs.

SHELL        := /bin/bash
BOOTSTRAP_PY ?= python3
VENV         := .venv
VPY          := $(VENV)/bin/python
STAMP        := $(VENV)/.installed

# `make bench` parameters (see README). PYTHON is the interpreter being MEASURED.
HOST     ?=
PYTHON   ?= $(shell command -v python3)
VARIANTS ?= vllm==0.31.0 vllm==0.32.0 kvqueue kvqueue:floor
QUICK    ?= 0
AA       ?= 0
PROCESSES         ?= 11
CONFIRM_PROCESSES ?= 9
SAMPLES  ?= 9
SAMPLE_MS ?= 20
SEED     ?= 1
CASES    ?= alloc1 alloc2 alloc8 alloc32 mix popappend remove
POOLS    ?= 2048 100000
CPU      ?= auto

.DEFAULT_GOAL := help

.PHONY: help setup test lint format validate bench report clean

help: ## list the targets
	@grep -E '^[a-zA-Z_./-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | \
	  awk -F'\t' '{printf "  %-22s %s\n", $$1, $$2}'
	@echo
	@echo "  bench variables: HOST=label (required) PYTHON=/path/to/python VARIANTS=\"...\""
	@echo "                   QUICK=1 AA=1 PROCESSES=11 CONFIRM_PROCESSES=9 SAMPLES=9"
	@echo "                   SAMPLE_MS=20 SEED=1 CASES=\"...\" POOLS=\"...\" CPU=auto"

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
	$(VPY) -m kvqueue validate $(VARIANTS)

RAW_FILES    := $(shell find data/raw -type f 2>/dev/null)
REPORT_DEPS  := $(STAMP) $(RAW_FILES) $(wildcard kvqueue/*.py) notebooks/report.ipynb
REPORT_HTML  := reports/report.html

report: $(REPORT_HTML) ## render reports/report.html and reports/pr-writeup.md from data/raw
	@echo "report: $(abspath $(REPORT_HTML))  writeup: $(abspath reports/pr-writeup.md)"

$(REPORT_HTML) reports/pr-writeup.md &: $(REPORT_DEPS)
	$(VPY) -m kvqueue report --raw-dir data/raw --processed-dir data/processed --out reports

clean: ## remove rebuilt outputs (data/processed, reports); raw data is never touched
	rm -rf data/processed reports

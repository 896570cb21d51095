# kvqueue-bench — `make help` lists the targets.
#
# Real file targets where a target produces files; .PHONY only for verbs.

SHELL        := /bin/bash
BOOTSTRAP_PY ?= python3
VENV         := .venv
VPY          := $(VENV)/bin/python
STAMP        := $(VENV)/.installed

# `make bench` parameters: one Make variable per field of kvqueue.params.bench.BenchParams
# (tests/test_params.py checks that the lists agree); empty = the field's default.
# PYTHON is the interpreter being MEASURED (any CPython >= 3.10; nothing is installed there).
# They reach `python -m kvqueue bench --from-env` as KVQUEUE_<NAME> environment
# variables, verbatim: no value is ever evaluated by a shell.
BENCH_VARS := HOST PYTHON VARIANTS PROCESSES PRECISION MAX_PROCESSES MAX_MINUTES \
              CONFIRM_PROCESSES SAMPLES SAMPLE_MS EPOCHS POOLS CASES CONFIRM_CASES CPU GC \
              SEED GATE_OPS QUICK AA BLOCK_SOURCE BLOCK_MODE METRIC CACHE_SIM
HOST     ?=
PYTHON   ?= python3
VARIANTS ?=
PROCESSES         ?=
PRECISION         ?=
MAX_PROCESSES     ?=
MAX_MINUTES       ?=
CONFIRM_PROCESSES ?=
SAMPLES   ?=
SAMPLE_MS ?=
EPOCHS    ?=
POOLS     ?=
CASES     ?=
CONFIRM_CASES ?=
CPU       ?=
GC        ?=
SEED      ?=
GATE_OPS  ?=
QUICK     ?=
AA        ?=
BLOCK_SOURCE ?=
BLOCK_MODE ?=
METRIC ?=
CACHE_SIM ?=
RAW_DIR   ?= data/raw
# make history: the releases to time ('' = every release with the queue).
RELEASES ?=

# `make policy` parameters: one Make variable per field of kvqueue.params.policy.PolicyParams
# (empty = the field's default), passed as KVQUEUE_<NAME> like the bench variables.
POLICY_VARS := HOST PYTHON VARIANT WINDOWS THRESHOLD PROCESSES SEED CPU GC POOL CONCURRENCY \
               PREFILL PREFILL_SIGMA PREFILL_MAX DECODE DECODE_SIGMA DECODE_MAX DECODE_EVERY \
               PREFIX_SHARE FAMILIES WARMUP_STEPS STEPS
VARIANT ?=
WINDOWS ?=
THRESHOLD ?=
POOL ?=
CONCURRENCY ?=
PREFILL ?=
PREFILL_SIGMA ?=
PREFILL_MAX ?=
DECODE ?=
DECODE_SIGMA ?=
DECODE_MAX ?=
DECODE_EVERY ?=
PREFIX_SHARE ?=
FAMILIES ?=
WARMUP_STEPS ?=
STEPS ?=

# `make check-queue`: our queue's instructions per operation against the committed
# reference (kvqueue.params.check_queue.CheckQueueParams).
CHECK_QUEUE_VARS := PYTHONS QUEUE UPDATE REFERENCE
PYTHONS ?=
QUEUE ?=
UPDATE ?=
REFERENCE ?=

# The variables each target reads, exported to it alone as KVQUEUE_<NAME> (what
# `python -m kvqueue TARGET --from-env` reads; tests/test_params.py checks that they agree).
# validate gates what bench would (HOST is no part of it); quick writes nothing (no HOST,
# RAW_DIR) and is never QUICK; history refuses VARIANTS, AA, BLOCK_SOURCE and QUICK.
VAR_TARGETS   := validate bench quick history policy check-queue
validate_VARS := $(filter-out HOST,$(BENCH_VARS))
bench_VARS    := $(BENCH_VARS) RAW_DIR
quick_VARS    := $(filter-out HOST QUICK,$(BENCH_VARS))
history_VARS  := $(BENCH_VARS) RELEASES RAW_DIR
policy_VARS   := $(POLICY_VARS) RAW_DIR
check-queue_VARS := $(CHECK_QUEUE_VARS)
$(foreach t,$(VAR_TARGETS),$(foreach v,$($(t)_VARS),$(eval $(t): export KVQUEUE_$(v) = $$(value $(v)))))
# Make exports command-line variables to every recipe, expanding them on the way (a
# HOST='$(shell ...)' would run); they reach the CLI only as KVQUEUE_*, unexpanded.
unexport $(BENCH_VARS) $(POLICY_VARS) $(CHECK_QUEUE_VARS) RAW_DIR RELEASES

.DEFAULT_GOAL := help

.PHONY: help setup test test-fast lint format validate bench quick history policy check-queue report notebooks clean

help: ## list the targets
	@grep -E '^[a-zA-Z_./-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | \
	  awk -F'\t' '{printf "  %-22s %s\n", $$1, $$2}'
	@echo
	@echo "  variables of each target (empty = the default; what each means and its default:"
	@echo "  .venv/bin/python -m kvqueue TARGET --help):"
	@$(foreach t,$(VAR_TARGETS),printf '    %-9s %s\n' '$(t)' '$($(t)_VARS)';)
	@printf '    %-9s %s\n' setup 'BOOTSTRAP_PY (the interpreter that creates .venv)'

$(STAMP): pyproject.toml
	@test -x $(VPY) || $(BOOTSTRAP_PY) -m venv $(VENV)
	$(VPY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

setup: $(STAMP) ## create .venv and install the package with dev extras

test: $(STAMP) ## run the whole test suite (what CI runs)
	$(VPY) -m pytest -q

test-fast: $(STAMP) ## run the tests not marked slow (no subprocess/papermill/Chromium runs)
	$(VPY) -m pytest -q -m "not slow"

lint: $(STAMP) ## ruff format check + lint
	$(VPY) -m ruff format --check kvqueue tests
	$(VPY) -m ruff check kvqueue tests

format: $(STAMP) ## apply ruff formatting and safe fixes
	$(VPY) -m ruff format kvqueue tests
	$(VPY) -m ruff check --fix kvqueue tests

validate: $(STAMP) ## run the gate of a bench (VARIANTS, AA, GATE_OPS, POOLS, BLOCK_SOURCE, BLOCK_MODE) under PYTHON
	PYTHONPATH="$(CURDIR)" "$${KVQUEUE_PYTHON:-python3}" -m kvqueue validate --from-env

bench: $(STAMP) ## collect a run into data/raw/HOST/<run-id>/ (HOST=label required)
	@$(VPY) -m kvqueue bench --from-env

quick: $(STAMP) ## fast A/B loop: gate + paired processes, table in the terminal, nothing written
	@$(VPY) -m kvqueue quick --from-env

history: $(STAMP) ## every distinct queue version of vLLM's releases, paired, into data/raw/HOST/ (HOST required; RELEASES=...)
	@$(VPY) -m kvqueue history --from-env

policy: $(STAMP) ## allocation policies on the churn workload into data/raw/HOST/<run-id>/ (HOST=label required)
	@$(VPY) -m kvqueue policy --from-env

check-queue: $(STAMP) ## our queue's instructions per op vs data/reference (fails > +1 %; UPDATE=1 records; needs valgrind)
	@$(VPY) -m kvqueue check-queue --from-env

notebooks: $(STAMP) ## regenerate the notebooks' parameters cells from kvqueue/params/
	$(VPY) -m kvqueue sync-notebooks

RAW_FILES    := $(shell find data/raw -type f 2>/dev/null)
# The folders too: removing a run folder changes its host folder's mtime (and removing a
# host folder changes data/raw's), so the report is rebuilt without the removed run.
RAW_FOLDERS  := $(wildcard data/raw) $(wildcard data/raw/*/) $(wildcard data/raw/*/*/)
# And git's index: the report shows whether each run is committed and unmodified.
GIT_STATE    := $(wildcard .git/index .git/HEAD)
REPORT_DEPS  := $(STAMP) $(RAW_FILES) $(RAW_FOLDERS) $(GIT_STATE) $(wildcard kvqueue/*.py kvqueue/*/*.py) \
                notebooks/report.ipynb
REPORT_HTML  := reports/report.html

report: $(REPORT_HTML) data/processed/manifest.json ## render reports/report.html and reports/pr-writeup.md from data/raw
	@echo "report: $(abspath $(REPORT_HTML))  writeup: $(abspath reports/pr-writeup.md)"

$(REPORT_HTML) reports/pr-writeup.md data/processed/manifest.json &: $(REPORT_DEPS)
	$(VPY) -m kvqueue report --raw-dir data/raw --processed-dir data/processed --out reports

clean: ## remove rebuilt outputs (data/processed, reports); raw data is never touched
	rm -rf data/processed reports

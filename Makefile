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
# make history: the releases to time ('' = every release with the queue), and a source of
# your own timed as the newest point after them ('' = none).
RELEASES ?=
NEWEST   ?=
# make report: its scope, host labels and run ids, space-separated ('' = every run).
HOSTS ?=
RUNS  ?=

# `make policy` parameters: one Make variable per field of kvqueue.params.policy.PolicyParams
# (empty = the field's default), passed as KVQUEUE_<NAME> like the bench variables.
POLICY_VARS := HOST PYTHON VARIANT WINDOWS THRESHOLD PROCESSES SEED CPU GC POOL CONCURRENCY \
               PREFILL PREFILL_SIGMA PREFILL_MAX DECODE DECODE_SIGMA DECODE_MAX DECODE_EVERY \
               PREFIX_SHARE FAMILIES FREE_ORDER HOLD_STEPS PREFILL_RELEASE REGIME WARMUP_TURNOVERS TURNOVERS \
               TRACE TRACE_OUT DESC_COST_NS
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
FREE_ORDER ?=
HOLD_STEPS ?=
PREFILL_RELEASE ?=
REGIME ?=
WARMUP_TURNOVERS ?=
TURNOVERS ?=
TRACE ?=
TRACE_OUT ?=
DESC_COST_NS ?=

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
VAR_TARGETS   := validate bench quick history policy report check-queue
validate_VARS := $(filter-out HOST,$(BENCH_VARS))
bench_VARS    := $(BENCH_VARS) RAW_DIR
quick_VARS    := $(filter-out HOST QUICK,$(BENCH_VARS))
history_VARS  := $(BENCH_VARS) RELEASES NEWEST RAW_DIR
policy_VARS   := $(POLICY_VARS) RAW_DIR
report_VARS   := HOSTS RUNS RAW_DIR
check-queue_VARS := $(CHECK_QUEUE_VARS)
$(foreach t,$(VAR_TARGETS),$(foreach v,$($(t)_VARS),$(eval $(t): export KVQUEUE_$(v) = $$(value $(v)))))
# Make exports command-line variables to every recipe, expanding them on the way (a
# HOST='$(shell ...)' would run); they reach the CLI only as KVQUEUE_*, unexpanded.
unexport $(BENCH_VARS) $(POLICY_VARS) $(CHECK_QUEUE_VARS) RAW_DIR RELEASES NEWEST HOSTS RUNS

.DEFAULT_GOAL := help

.PHONY: help setup test test-fast lint format validate bench quick history policy check-queue report notebooks clean FORCE

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

history: $(STAMP) ## every distinct queue version of vLLM's releases, paired, into data/raw/HOST/ (HOST required; RELEASES=..., NEWEST=your source)
	@$(VPY) -m kvqueue history --from-env

policy: $(STAMP) ## allocation policies against engine age (REGIME=chat|agentic, or TRACE=file) into data/raw/HOST/<run-id>/ (HOST required; TRACE_OUT=file writes a trace)
	@$(VPY) -m kvqueue policy --from-env

check-queue: $(STAMP) ## our queue's instructions per op vs data/reference (fails > +1 %; UPDATE=1 records; needs valgrind)
	@$(VPY) -m kvqueue check-queue --from-env

notebooks: $(STAMP) ## regenerate the notebooks' parameters cells from kvqueue/params/
	$(VPY) -m kvqueue sync-notebooks

RAW_FILES    := $(shell find $(RAW_DIR) -type f 2>/dev/null)
# The folders too: removing a run folder changes its host folder's mtime (and removing a
# host folder changes the raw folder's), so the report is rebuilt without the removed run.
RAW_FOLDERS  := $(wildcard $(RAW_DIR)) $(wildcard $(RAW_DIR)/*/) $(wildcard $(RAW_DIR)/*/*/)
# And git's index: the report shows whether each run is committed and unmodified.
GIT_STATE    := $(wildcard .git/index .git/HEAD)
# The scope (RAW_DIR, HOSTS, RUNS): rewritten only when it changes, so a report of other
# runs is rebuilt and an unchanged one is not.
REPORT_SCOPE := reports/.scope
REPORT_DEPS  := $(STAMP) $(RAW_FILES) $(RAW_FOLDERS) $(GIT_STATE) $(REPORT_SCOPE) \
                $(wildcard kvqueue/*.py kvqueue/*/*.py) notebooks/report.ipynb
REPORT_HTML  := reports/report.html

REPORT_FORCE := $(if $(value CASES),FORCE,$(wildcard reports/writeups/.cases))
WRITEUPS_INDEX := reports/writeups/index.txt
# Written by a build that printed the paths itself (with this invocation's id), so
# `report` does not print them twice; a marker of another invocation is ignored.
REPORT_JUST_BUILT := reports/.just-built
REPORT_INVOCATION := $(shell date +%s%N)

report: $(REPORT_HTML) data/processed/manifest.json ## render reports/report.html and one writeup per question (reports/writeups/*.md) from RAW_DIR (CASES=..., HOSTS=..., RUNS=...)
	@if [ "$$(cat $(REPORT_JUST_BUILT) 2>/dev/null)" = "$(REPORT_INVOCATION)" ]; then \
	  rm -f $(REPORT_JUST_BUILT); else \
	  echo "report: up to date: $(abspath $(REPORT_HTML))"; \
	  sed 's|^|writeup: $(abspath reports/writeups)/|' $(WRITEUPS_INDEX); fi

$(REPORT_SCOPE): FORCE
	$(shell mkdir -p $(@D))$(file >$@.new,RAW_DIR=$(value RAW_DIR) HOSTS=$(value HOSTS) RUNS=$(value RUNS))
	@if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

.PHONY: FORCE
FORCE:

$(REPORT_HTML) data/processed/manifest.json: export KVQUEUE_REPORT_CASES = $(value CASES)
$(REPORT_HTML) data/processed/manifest.json &: $(REPORT_DEPS) $(REPORT_FORCE)
	$(VPY) -m kvqueue report --from-env --processed-dir data/processed --out reports \
	  --cases "$$KVQUEUE_REPORT_CASES"
	@echo $(REPORT_INVOCATION) > $(REPORT_JUST_BUILT)

clean: ## remove rebuilt outputs (data/processed, reports); raw data is never touched
	rm -rf data/processed reports

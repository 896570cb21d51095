# kvqueue-bench — `make help` lists the targets.
#
# Real file targets where a target produces files; .PHONY only for verbs.

SHELL        := /bin/bash
BOOTSTRAP_PY ?= python3
VENV         := .venv
VPY          := $(VENV)/bin/python
STAMP        := $(VENV)/.installed

# The variables of each target come from their declarations (kvqueue.params.command_params,
# the table behind the CLI's options and --from-env): `python -m kvqueue make-vars` writes
# each target's list (bench_VARS, ...: what `make help` prints), a `NAME ?=` line per
# variable (empty = the field's default), their export to that target alone as
# KVQUEUE_<NAME> = $(value NAME) (the text as typed: neither Make nor a shell evaluates
# it), and one `unexport` of them all (Make would export command-line variables to every
# recipe, expanded on the way: a HOST='$(shell ...)' would run).
# Make remakes the include only when a declaration changes (then restarts): any other call
# starts no Python. The writer is standard library only, so BOOTSTRAP_PY runs it (-S: no
# site-packages) and a fresh clone's `make help` or `make setup` needs no .venv. A write
# that fails (a declaration that does not import) keeps the previous file, with a warning
# on each call, so that `make help`, `lint` and `test` still run.
PARAMS_MK := .make/params.mk
include $(PARAMS_MK)
$(PARAMS_MK): $(wildcard kvqueue/params/*.py) kvqueue/__main__.py
	@mkdir -p $(@D)
	@if PYTHONPATH="$(CURDIR)" $(BOOTSTRAP_PY) -S -m kvqueue make-vars > $@.$$$$.tmp; then \
	  mv $@.$$$$.tmp $@; \
	else rm -f $@.$$$$.tmp; test -f $@ || exit 1; \
	  echo "make: warning: python -m kvqueue make-vars failed; kept the previous $@" >&2; fi

.DEFAULT_GOAL := help

# Every variable given on the command line is read by a goal or refused: a mistyped
# TURNOVER=4 would otherwise run the default, and nothing printed would show it. Checked
# as Make reads the Makefile, so a refused call runs nothing (no .venv, no recipe). Only
# the command line counts (Make gives its variables, MAKEFLAGS' too, the origin "command
# line"): the environment (PATH, CI, ...) was not typed for us. A goal reads its
# generated list (TARGET_VARS) and the Makefile's own variables (own_vars); with several
# goals, a variable is fine if any reads it. Python starts only for an unknown name: to
# write the one line with the nearest name (a typo is not known in advance), from the
# declarations themselves, so an include that is missing or stale (a variable declared
# since) is not believed: there an empty answer lets the call go on, and Make remakes
# the include and checks again with it. Python failing still refuses, without a hint.
MAKE_SETTINGS := BOOTSTRAP_PY VENV VPY PARAMS_MK
# $(call own_vars,GOAL): what the Makefile's rules read for GOAL besides its generated
# variables (CASES: the report's writeups).
own_vars       = $(MAKE_SETTINGS) $(if $(filter report,$1),CASES)
GOALS         := $(or $(MAKECMDGOALS),$(.DEFAULT_GOAL))
GIVEN_VARS    := $(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $v)),$v))
OWN_VARS      := $(foreach g,$(GOALS),$(call own_vars,$g))
UNKNOWN_VARS  := $(filter-out $(OWN_VARS) $(foreach g,$(GOALS),$($g_VARS)),$(GIVEN_VARS))
# Single quotes for the shell: a name on the command line may hold any character but
# `=` and white space (`x;touch y=1` is a variable), and none may run.
sh_quote       = '$(subst ','\'',$1)'
ifneq ($(UNKNOWN_VARS),)
REFUSAL := $(shell PYTHONPATH="$(CURDIR)" $(BOOTSTRAP_PY) -S -m kvqueue.params.make_vars \
  $(call sh_quote,$(GOALS)) $(call sh_quote,$(OWN_VARS)) \
  $(foreach v,$(UNKNOWN_VARS),$(call sh_quote,$v)) 2>/dev/null)
ifneq ($(.SHELLSTATUS),0)
REFUSAL := make $(GOALS): unknown variable$(if $(word 2,$(UNKNOWN_VARS)),s) $(UNKNOWN_VARS) (`make help` \
  lists the variables of each target)
endif
ifneq ($(REFUSAL),)
$(error $(REFUSAL))
endif
endif

.PHONY: help setup test test-fast lint format validate bench quick history policy check-queue report notebooks clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_./-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | \
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

# One test process per CPU (pytest-xdist), each taking the next test when it is free: the
# slow tests are valgrind counts, notebooks and subprocesses of a few to 35 s each. Here
# (2 vCPUs): 1146 tests in 493 s in one process, 274 s in two.
PYTEST := $(VPY) -m pytest -q -n auto --dist worksteal

test: $(STAMP) ## run the whole test suite (what CI runs)
	$(PYTEST)

test-fast: $(STAMP) ## run the tests not marked slow (no subprocess/papermill/Chromium runs)
	$(PYTEST) -m "not slow"

lint: $(STAMP) ## ruff format check + lint
	$(VPY) -m ruff format --check kvqueue tests methods
	$(VPY) -m ruff check kvqueue tests methods

format: $(STAMP) ## apply ruff formatting and safe fixes
	$(VPY) -m ruff format kvqueue tests methods
	$(VPY) -m ruff check --fix kvqueue tests methods

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

# The recipe exits with the command's status (0 passed, 1 regressed, 2 bad input, 3 refused
# by the gate, 4 not counted: kvqueue.params.regression_params.EXIT_STATUSES), which Make
# reports in its "Error N" line and turns into its own 2: no Make passes a recipe's status
# through. CI that tells them apart runs `.venv/bin/python -m kvqueue regress` (README).
.PHONY: regress
regress: $(STAMP) ## a change vs its base by instructions per op (BASE=git:REPO@main HEAD=git:REPO@mine SUBJECT=queue|pool): Markdown to post (OUT=file); the command exits 1 regressed, 3 refused; needs valgrind
	@$(VPY) -m kvqueue regress --from-env

.PHONY: diffs
diffs: $(STAMP) ## fetch the releases the history runs name (seconds, no timing), so `make report` shows each step's diff (RAW_DIR=...)
	@$(VPY) -m kvqueue diffs --from-env

notebooks: $(STAMP) ## regenerate the notebooks' parameters cells from kvqueue/params/
	$(VPY) -m kvqueue sync-notebooks

# Built on every call: the build cache (data/processed/cache, kvqueue.report.build_cache)
# keeps each run's analysis and each figure under the sha256 of what it is computed from,
# so an unchanged report is rebuilt from it and a new run is the only one analysed.
# CASES is the report's own variable (the writeups' cases, not a bench's): unexported
# like the generated ones, and passed as typed. --fetch-diffs: the releases the history's
# step diffs show are fetched first when the cache lacks them (`make diffs`' path; an
# unreachable index is one line and the report goes on).
unexport CASES
report: export KVQUEUE_REPORT_CASES = $(value CASES)
report: $(STAMP) ## render reports/report.html and one writeup per question (reports/writeups/*.md) from RAW_DIR (CASES=..., HOSTS=..., RUNS=...)
	@$(VPY) -m kvqueue report --from-env --processed-dir data/processed --out reports \
	  --cases "$$KVQUEUE_REPORT_CASES" --fetch-diffs

clean: ## remove rebuilt outputs (data/processed, reports); raw data is never touched
	rm -rf data/processed reports

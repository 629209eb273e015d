# The two commands in the README do all set-up themselves: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DURATION ?= 0
# checkov in a venv of its own: its dependency tree conflicts with the project's pins.
CHECKOV_VENV  := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed

.PHONY: help venv system-deps run test test-suite lint format typecheck docs unit itests acceptance bench wheel image clean
.DEFAULT_GOAL := help

help:  ## this list (a bare `make`)
	@echo "make TARGET, one of:"
	@sed -n 's/^\([a-z-]*\):.*## \(.*\)/  \1\t\2/p' $(MAKEFILE_LIST) | expand -t 16

# uv installs the pinned sets in seconds where pip took three minutes on a fresh machine; pip stays
# in the venvs for what the program itself runs (signal venvs, the wheel's install test).
# --compile-bytecode: pip writes .pyc files when it installs and uv does not, and with
# PYTHONDONTWRITEBYTECODE set no import writes them later, so every process would compile boto3.
UV_VERSION := 0.13.9
UV := $(BIN)/uv

$(UV):
	test -x $(BIN)/python || "$(PYTHON)" -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check uv==$(UV_VERSION)

$(STAMP): $(UV) requirements.txt requirements-dev.txt constraints.txt constraints-dev.txt setup.py pyproject.toml
	$(UV) pip install -q --compile-bytecode --python $(BIN)/python -c constraints-dev.txt -r requirements-dev.txt
	$(UV) pip install -q --python $(BIN)/python --no-deps --no-build-isolation -e .
	touch $@

venv: $(STAMP)  ## the virtualenv .venv/, everything pinned

$(CHECKOV_STAMP): $(UV) requirements-checkov.txt
	test -x $(CHECKOV_VENV)/bin/python || "$(PYTHON)" -m venv $(CHECKOV_VENV)
	$(UV) pip install -q --compile-bytecode --python $(CHECKOV_VENV)/bin/python --no-deps -r requirements-checkov.txt
	touch $@

system-deps:  ## the Debian packages the tests need (system-packages.txt)
	scripts/ensure-system-packages

run: venv  ## the whole tree on an embedded AWS; DURATION=120 stops it after 2 minutes
	$(BIN)/python -m clusterman.local.stack --duration $(DURATION)

lint: venv $(CHECKOV_STAMP)  ## ruff, the layers, hadolint and checkov on the deploy files
	$(BIN)/ruff check clusterman clusterman_signals tests itests acceptance bench conftest.py
	$(BIN)/ruff format --check clusterman clusterman_signals tests itests acceptance bench conftest.py
	$(BIN)/pytest -q -p no:cacheprovider tests/test_layers.py
	scripts/lint-deploy $(BIN)/hadolint $(CHECKOV_VENV)/bin/checkov

format: venv  ## ruff's fixes and formatting, in place
	$(BIN)/ruff check --fix-only clusterman clusterman_signals tests itests acceptance bench conftest.py
	$(BIN)/ruff format clusterman clusterman_signals tests itests acceptance bench conftest.py

typecheck: venv  ## mypy
	$(BIN)/mypy

# The docs as a site in build/docs; every warning fails (a dead link, a page no contents reach).
docs: venv  ## the docs as a site in build/docs
	$(BIN)/sphinx-build -q -W --keep-going -n -b html docs build/docs

unit: venv  ## the unit tests (tests/)
	$(BIN)/pytest -q tests

itests: venv  ## the integration tests (itests/)
	$(BIN)/pytest -q itests

acceptance: venv  ## the acceptance runs (acceptance/)
	$(BIN)/pytest -q acceptance

# lint and typecheck (and the checkov venv) run beside the tests: the tests leave most of the CPU
# idle waiting on real processes. The sources are byte-compiled before the tests: where
# PYTHONDONTWRITEBYTECODE is set, each of the hundreds of processes the tests start (autoscalers,
# bootstraps, CLIs) compiled clusterman again, a tenth of the tests' CPU time. The jobs' output
# is kept whole line by line, not job by job: pytest's progress shows as it goes (a line per 80
# tests) instead of once the last test is done.
test: system-deps venv  ## lint, typecheck, the docs and every test, side by side
	$(BIN)/python -m compileall -q -j0 clusterman clusterman_signals itests bench
	$(MAKE) --no-print-directory -j3 --output-sync=line lint typecheck docs test-suite

# Slowest first (the acceptance run is 150 s of `make run`), so no worker ends waiting on it alone;
# four workers on two cores, since most tests wait on real processes, not the CPU. The tests see no
# MAKEFLAGS: the `make run` one starts must print as it goes, not when it ends (--output-sync).
test-suite: venv  ## every test, without lint and typecheck
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL $(BIN)/pytest -q -n 4 --dist loadgroup --durations=25 acceptance itests tests

bench: venv  ## the benchmarks, JSON on stdout
	$(BIN)/python -m bench

# dist/clusterman-*.whl; the Dockerfile builds the image from the sources the same way.
wheel: venv  ## dist/clusterman-*.whl
	$(BIN)/pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w dist .

clean:  ## remove the virtualenvs and build output
	rm -rf $(VENV) $(CHECKOV_VENV) .mypy_cache .ruff_cache .pytest_cache .tox build dist

# Where a Docker engine runs (none on the development machines; the install step the image runs
# is tested on the host by itests/test_wheel_install.py).
image:  ## the Docker image, where a Docker engine runs
	docker build -t clusterman:dev .
	docker run --rm --entrypoint clusterman clusterman:dev --help >/dev/null

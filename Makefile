# The two commands in the README do all set-up themselves: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DURATION ?= 0
# checkov in a venv of its own: its dependency tree conflicts with the project's pins.
CHECKOV_VENV  := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed

.PHONY: venv system-deps run test test-suite lint format typecheck docs unit itests acceptance bench wheel image clean

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

venv: $(STAMP)

$(CHECKOV_STAMP): $(UV) requirements-checkov.txt
	test -x $(CHECKOV_VENV)/bin/python || "$(PYTHON)" -m venv $(CHECKOV_VENV)
	$(UV) pip install -q --compile-bytecode --python $(CHECKOV_VENV)/bin/python --no-deps -r requirements-checkov.txt
	touch $@

system-deps:
	scripts/ensure-system-packages

run: venv
	$(BIN)/python -m clusterman.local.stack --duration $(DURATION)

lint: venv $(CHECKOV_STAMP)
	$(BIN)/ruff check clusterman clusterman_signals tests itests acceptance bench conftest.py
	$(BIN)/ruff format --check clusterman clusterman_signals tests itests acceptance bench conftest.py
	$(BIN)/pytest -q -p no:cacheprovider tests/test_layers.py
	scripts/lint-deploy $(BIN)/hadolint $(CHECKOV_VENV)/bin/checkov

format: venv
	$(BIN)/ruff check --fix-only clusterman clusterman_signals tests itests acceptance bench conftest.py
	$(BIN)/ruff format clusterman clusterman_signals tests itests acceptance bench conftest.py

typecheck: venv
	$(BIN)/mypy

# The docs as a site in build/docs; every warning fails (a dead link, a page no contents reach).
docs: venv
	$(BIN)/sphinx-build -q -W --keep-going -n -b html docs build/docs

unit: venv
	$(BIN)/pytest -q tests

itests: venv
	$(BIN)/pytest -q itests

acceptance: venv
	$(BIN)/pytest -q acceptance

# lint and typecheck (and the checkov venv) run beside the tests: the tests leave most of the CPU
# idle waiting on real processes. The sources are byte-compiled before the tests: where
# PYTHONDONTWRITEBYTECODE is set, each of the hundreds of processes the tests start (autoscalers,
# bootstraps, CLIs) compiled clusterman again, a tenth of the tests' CPU time.
test: system-deps venv
	$(BIN)/python -m compileall -q -j0 clusterman clusterman_signals itests bench
	$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck docs test-suite

# Slowest first (the acceptance run is 150 s of `make run`), so no worker ends waiting on it alone;
# four workers on two cores, since most tests wait on real processes, not the CPU. The tests see no
# MAKEFLAGS: the `make run` one starts must print as it goes, not when it ends (--output-sync).
test-suite: venv
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL $(BIN)/pytest -q -n 4 --dist loadgroup --durations=25 acceptance itests tests

bench: venv
	$(BIN)/python -m bench

# dist/clusterman-*.whl; the Dockerfile builds the image from the sources the same way.
wheel: venv
	$(BIN)/pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w dist .

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) .mypy_cache .ruff_cache .pytest_cache .tox build dist

# Where a Docker engine runs (none on the development machines; the install step the image runs
# is tested on the host by itests/test_wheel_install.py).
image:
	docker build -t clusterman:dev .
	docker run --rm --entrypoint clusterman clusterman:dev --help >/dev/null

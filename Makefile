# One command each: `make demo` (set up and run the main job), `make test` (set up and run
# every test, starting the test servers the tests need). Both work on a fresh machine.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
PLUGINS := $(patsubst %/pyproject.toml,%,$(wildcard plugins/*/pyproject.toml))
NPM_LOCKS := $(wildcard plugins/*/package-lock.json)

.PHONY: demo test lint docs setup setup-core bench dist clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# The core alone: enough for the demo.
$(VENV)/.core: $(VENV)/bin/python pyproject.toml
	$(PIP) install -q -e .
	touch $@

# Everything the tests use: core with dev tools, the three plugins with their test servers
# (moto's S3 server and a GCS emulator from PyPI; Azurite from npm).
$(VENV)/.all: $(VENV)/bin/python pyproject.toml $(addsuffix /pyproject.toml,$(PLUGINS)) $(NPM_LOCKS)
	$(PIP) install -q -e '.[dev]' $(foreach p,$(PLUGINS),-e '$(p)[test]')
	$(foreach l,$(NPM_LOCKS),npm ci --prefix $(dir $(l)) --no-audit --no-fund --loglevel=error &&) true
	touch $(VENV)/.core $@

setup-core: $(VENV)/.core
setup: $(VENV)/.all

demo: setup-core
	$(PY) examples/demo.py

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

test: setup lint docs
	$(PY) -m pytest

# The documentation site, into site/: --strict fails on a broken link, anchor or include.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

bench: setup
	$(PY) -m benchmarks

# Wheels of the core and of every plugin, one version for all, into dist/: then
# `pip install --find-links dist 'flyte-checkpoint[s3]'` installs the core with its extra.
# (pip builds each in an isolated environment, fetching hatchling from the package index.)
dist: $(VENV)/bin/python
	$(PY) .ci/versions.py
	rm -rf dist
	$(PIP) wheel -q --no-deps -w dist . $(PLUGINS)
	@ls dist

clean:
	rm -rf $(VENV) plugins/*/node_modules build dist site

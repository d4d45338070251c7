# The two commands a new user needs:  `make demo`  and  `make test`.
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test browser lint typecheck bench clean

$(STAMP): pyproject.toml
	@command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
	@test -x $(PY) || uv venv --quiet --python python3 $(VENV)
	uv pip install --quiet --python $(PY) -e '.[dev]'
	@# Spark needs a Java runtime; install one when the machine has none.
	@command -v java >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; }
	@touch $(STAMP)

## setup: create .venv with the server, client, Spark and test dependencies (Java too if missing)
setup: $(STAMP)

## demo: start an embedded broker and the service, run a Spark lookup join, print the results
demo: $(STAMP)
	$(VENV)/bin/statestore demo

## test: lint, type-check and run the whole test suite (what CI runs)
test: $(STAMP) browser lint typecheck
	$(PY) -m pytest -q

# The status page's tests drive a headless Chromium; install it and its driver when missing.
browser:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; }

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

## bench: the benchmarks behind docs/benchmarks.md (installs redis-server if missing)
bench: $(STAMP)
	@command -v redis-server >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq redis-server; }
	$(PY) -m bench all

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# The two commands a new user needs:  `make demo`  and  `make test`.
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint typecheck bench clean

$(STAMP): pyproject.toml
	@command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
	@test -x $(PY) || uv venv --quiet --python python3 $(VENV)
	uv pip install --quiet --python $(PY) -e '.[dev]'
	@# Spark needs a Java runtime; install one when the machine has none.
	@command -v java >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; }
	@# The scale bench (run at a CI size by the tests) compares against Redis.
	@command -v redis-server >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq redis-server; }
	@touch $(STAMP)

## setup: create .venv with the server, client, Spark and test dependencies (Java and redis-server too if missing)
setup: $(STAMP)

## demo: start an embedded broker and the service, run a Spark lookup join, print the results
demo: $(STAMP)
	$(VENV)/bin/statestore demo

## test: lint, type-check and run the whole test suite (what CI runs)
test: $(STAMP) lint typecheck
	$(PY) -m pytest -q

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

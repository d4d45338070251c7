# The two commands a new user needs:  `make demo`  and  `make test`.
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint typecheck spark-matrix bench clean

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
test: $(STAMP) lint typecheck spark-matrix
	$(PY) -m pytest -q

# The Spark client on PySpark 3.5 too: a venv with only statestore[spark-connect] and the test
# runner (no server). PySpark 3.5's extras pin NumPy < 2, which pyarrow 26 and newer refuse.
SPARK35_VENV := .venv-spark35
SPARK35_PY   := $(SPARK35_VENV)/bin/python
SPARK35_DEPS := -e '.[spark-connect]' 'pyspark[connect]==3.5.*' 'pyarrow<26' pytest pytest-timeout

$(SPARK35_VENV)/.installed: pyproject.toml
	@if command -v uv >/dev/null 2>&1; then \
	  test -x $(SPARK35_PY) || uv venv --quiet --python python3 $(SPARK35_VENV); \
	  uv pip install --quiet --python $(SPARK35_PY) $(SPARK35_DEPS); \
	else \
	  test -x $(SPARK35_PY) || python3 -m venv $(SPARK35_VENV); \
	  $(SPARK35_PY) -m pip install --quiet $(SPARK35_DEPS); \
	fi
	@touch $@

# The Spark version matrix (tests/clients/spark_matrix) beyond what `pytest -q` runs (the newest
# PySpark, classic): the newest on Spark Connect, and PySpark 3.5 classic and on Connect. The
# service runs from the main venv ($(PY)); a run on Connect starts one Connect server.
MATRIX := --confcutdir=tests/clients/spark_matrix tests/clients/spark_matrix
spark-matrix: $(STAMP) $(SPARK35_VENV)/.installed
	STATESTORE_TEST_SPARK_SESSION=connect $(PY) -m pytest -q $(MATRIX)
	STATESTORE_SERVICE_PYTHON=$(abspath $(PY)) $(SPARK35_PY) -m pytest -q $(MATRIX)
	STATESTORE_SERVICE_PYTHON=$(abspath $(PY)) STATESTORE_TEST_SPARK_SESSION=connect \
	  $(SPARK35_PY) -m pytest -q $(MATRIX)

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
	rm -rf $(VENV) $(SPARK35_VENV) .mypy_cache .ruff_cache .pytest_cache

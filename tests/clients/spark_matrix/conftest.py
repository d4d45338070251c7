"""The Spark version matrix: the same tests on every supported PySpark, classic or Spark Connect.

These tests import the client side only, so they also run in an environment holding just
``statestore[spark]`` and the test runner (``make test`` builds one with PySpark 3.5). The service
runs in a process of its own (:mod:`tests.support.spark_service`), started with the interpreter
named by ``STATESTORE_SERVICE_PYTHON`` (default: this one), which has the server installed.

``STATESTORE_TEST_SPARK_SESSION=connect`` runs them on a Spark Connect session, against the Connect
server the service process starts (the newest Spark's: a 3.5 Connect server needs a jar that only
Maven Central serves). Classic and Connect sessions cannot share one Python process (PySpark switches
every ``functions`` call to Connect once a Connect session exists), hence one pytest run each.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from clients.spark.compat import PYSPARK_VERSION
from tests.support.spark_session import classic_session

REPO = Path(__file__).resolve().parents[3]
SESSION_KIND = os.environ.get("STATESTORE_TEST_SPARK_SESSION", "classic")
SERVICE_PYTHON = os.environ.get("STATESTORE_SERVICE_PYTHON", sys.executable)
CONNECT = SESSION_KIND == "connect"
COUNTS_MISFITS = not CONNECT or PYSPARK_VERSION >= (4, 0)
"""Whether ``LookupInfo.mismatched_values`` works: accumulators, or Connect's observations (4.0+)."""


class Service:
    """The service process: its URL and token, and its commands (see ``tests.support.spark_service``)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [SERVICE_PYTHON, "-m", "tests.support.spark_service"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        hello = self._answer()
        self.url: str = hello["url"]
        self.token: str = hello["token"]

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(
                f"the service process ({SERVICE_PYTHON} -m tests.support.spark_service) ended; its "
                "error is above. STATESTORE_SERVICE_PYTHON must name an interpreter with statestore[server]"
            )
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, op: str, **arguments: Any) -> Any:
        stdin: IO[str] | None = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"op": op, **arguments}) + "\n")
        stdin.flush()
        answer = self._answer()
        if "error" in answer:
            raise AssertionError(f"the service process failed {op}: {answer['error']}")
        return answer["result"]

    def table(self, store: str, as_of: str | None = None) -> dict[str, Any]:
        """The store's rows per the records produced (as of a position, default: all of them)."""
        rows: dict[str, Any] = self.call("table", store=store, as_of=as_of)
        return rows

    def requests(self) -> Counter[str]:
        """The requests the service answered so far, by route (``/metrics`` left out)."""
        return Counter(self.call("requests"))

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="session")
def service() -> Iterator[Service]:
    running = Service()
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="session")
def spark(service: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The session of this run (classic, or Connect), whose conf names the service and its token."""
    # Spark Connect hides confs whose key or value says "token" (spark.redaction.regex).
    token_file = tmp_path_factory.mktemp("auth") / "statestore.auth"
    token_file.write_text(service.token + "\n")
    if CONNECT:
        session = SparkSession.builder.remote(service.call("connect")).getOrCreate()
    else:
        session = classic_session()
    session.conf.set("spark.statestore.url", service.url)
    session.conf.set("spark.statestore.authFile", str(token_file))
    yield session
    session.conf.unset("spark.statestore.url")
    session.conf.unset("spark.statestore.authFile")
    session.stop()


def physical_plan(df: DataFrame) -> str:
    """The physical plan as ``explain()`` prints it (classic and Connect)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        df.explain()
    return printed.getvalue()


def fields(df: DataFrame) -> list[tuple[Any, ...]]:
    """``df``'s columns: name, type, nullable and metadata without the lookup's id."""
    return [
        (
            f.name,
            f.dataType,
            f.nullable,
            {k: v for k, v in f.metadata.get("statestore", {}).items() if k != "lookup_id"},
        )
        for f in df.schema.fields
    ]

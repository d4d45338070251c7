"""The demo's Spark side: a quiet local[2] session, started in the background while data loads."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from service.local.demo.errors import DemoError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

JAVA_HELP = (
    "Spark needs a Java runtime (17 or newer) and none was found: install one, e.g. "
    "`sudo apt-get install openjdk-17-jre-headless` (Debian/Ubuntu) or `brew install openjdk@17` (macOS), "
    "or set JAVA_HOME to an installed JDK"
)

# Only errors from Spark's own JVM logging: the demo prints what matters itself.
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
# Spark announces a "default log level" unless the logger of PySpark's gateway has its own level.
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def java_binary() -> str | None:
    """The ``java`` Spark will run: ``$JAVA_HOME/bin/java``, else the one on ``PATH``."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        return str(candidate) if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def check_spark_prerequisites() -> None:
    """Fail fast, before anything starts, when Spark cannot run here."""
    try:
        import pyspark  # noqa: F401, PLC0415
    except ImportError as exc:
        raise DemoError(
            "the demo's join needs PySpark: install it with `pip install 'statestore[all]'`"
        ) from exc
    if java_binary() is None:
        raise DemoError(JAVA_HELP)


def _build_session(log_config: Path) -> SparkSession:
    from pyspark.sql import SparkSession  # noqa: PLC0415

    # Python workers must run this interpreter (the one with httpx and pyarrow installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    java_options = f"-Dlog4j2.configurationFile=file:{log_config}"
    session = (
        SparkSession.builder.master("local[2]")
        .appName("statestore-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.executor.extraJavaOptions", java_options)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def _import_lookup_client(batches: Iterator[Any]) -> Iterator[Any]:
    import clients.spark  # noqa: F401, PLC0415

    yield from batches


def _warm_up(session: SparkSession) -> None:
    """Start the Python workers and import the lookup client in them, so the join pays neither."""
    frame = session.range(0, 2, numPartitions=2)
    frame.mapInArrow(_import_lookup_client, frame.schema).count()


class BackgroundSpark:
    """A SparkSession started on a thread (it takes seconds), waited for when first needed.

    Use as a context manager: leaving it stops the session, waiting for a start in progress.
    """

    def __init__(self) -> None:
        self._workdir = tempfile.TemporaryDirectory(prefix="statestore-demo-spark-")
        self._log_config = Path(self._workdir.name) / "log4j2.properties"
        self._log_config.write_text(_LOG4J2, encoding="utf-8")
        self._session: SparkSession | None = None
        self._error: BaseException | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._start, name="statestore-demo-spark", daemon=True)

    def _start(self) -> None:
        try:
            session = _build_session(self._log_config)
        except BaseException as exc:  # re-raised on the main thread by session()
            self._error = exc
            return
        self._session = session
        if self._stopping.is_set():
            return
        try:
            _warm_up(session)
        except Exception:  # the join itself reports any real problem
            logger.debug("warming up Spark's Python workers failed", exc_info=True)

    def __enter__(self) -> BackgroundSpark:
        self._thread.start()
        return self

    def session(self) -> SparkSession:
        """The session, once started; raises ``DemoError`` when Spark could not start."""
        self._thread.join()
        if self._session is None:
            error = self._error
            detail = f"{type(error).__name__}: {error}" if error else "no session"
            hint = JAVA_HELP if java_binary() is None else "run with --log-level DEBUG for Spark's output"
            raise DemoError(f"Spark did not start ({detail}); {hint}") from error
        return self._session

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stopping.set()
        self._thread.join(timeout=120)
        session, self._session = self._session, None
        try:
            if session is not None:
                session.stop()
        finally:
            self._workdir.cleanup()

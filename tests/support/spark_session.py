"""The classic local SparkSession the Spark tests share (client side only: no server imports)."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def classic_session() -> SparkSession:
    """One local[2,4] session: small shuffles, no UI, this interpreter for the Python workers.

    ``local[2,4]``: a failed task is retried (up to 4 attempts) as on a cluster, which the
    consistency tests rely on; plain ``local[2]`` fails the job at the first task failure.
    """
    # Python workers must run this interpreter (the one with httpx and pyarrow), not the system one.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("statestore-client-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session

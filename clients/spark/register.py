"""Registering ``spark.read.format("statestore_http")`` (``clients.spark.source``) on a session.

The data source needs PySpark 4.0: it is imported only when registered, so ``clients.spark`` imports
on PySpark 3.5 too.
"""

from __future__ import annotations

import logging

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from clients.spark.compat import conf_value, has_python_data_source, require
from clients.spark.plan import TOKEN_CONF, TOKEN_FILE_CONF, URL_CONF

log = logging.getLogger("clients.spark")


def register_data_source(spark: SparkSession) -> None:
    """Register ``spark.read.format("statestore_http")`` on ``spark`` (PySpark 4.0 and newer).

    The session's ``spark.statestore.url`` / ``token`` / ``authFile`` become the defaults of the
    source's ``url`` and ``token`` options (a data source cannot read the session's conf itself).
    A session keeps its first registration: registering again changes nothing.
    """
    require("spark.read.format('statestore_http') (a Python data source; read_store works anywhere)", (4, 0))
    assert has_python_data_source()
    from clients.spark.source import StatestoreDataSource  # noqa: PLC0415  # needs PySpark 4.0

    defaults = {
        option: value
        for option, key in (("url", URL_CONF), ("token", TOKEN_CONF), ("authFile", TOKEN_FILE_CONF))
        if (value := conf_value(spark, key)) is not None
    }
    source = type("StatestoreDataSource", (StatestoreDataSource,), {"defaults": defaults})
    try:
        spark.dataSource.register(source)
    except AnalysisException as exc:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise
        log.info("the statestore data source is registered on this session already; kept as it was")

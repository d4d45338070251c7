"""A local Arrow table as a DataFrame that Spark keeps, on every supported PySpark and session kind.

A DataFrame made from a local table carries the table in its plan: Spark converts it again for
every job (under Spark Connect the client sends it again too), which costs as much as the rest of a
broadcast join of 100k rows. Each session kind keeps it its own way, so that later jobs reference
rows Spark already holds:

- PySpark 4 (classic and Connect): a lazy local checkpoint; Spark keeps the rows in its block
  manager after the first job and frees them once the DataFrame is dropped.
- PySpark 3.5 classic: the table goes to the JVM as an Arrow stream (what PySpark 4's
  ``createDataFrame`` of an Arrow table does; 3.5's takes pandas frames and rows, not Arrow
  tables), then the same lazy local checkpoint.
- PySpark 3.5 Connect (no local checkpoint): the table is sent once, as a single row holding the
  array of its rows, and registered as a temporary view of a unique name; the DataFrame reads the
  view by name (each job's plan is small) and unfolds the array into rows. A view of the rows
  themselves costs more: Spark ships a local relation's rows inside its tasks, an object a row, in
  every job, where the one row goes as one object. Once no DataFrame refers to the view any more,
  it is dropped on that session (at the next table kept, in the planning thread: never from a
  finalizer).
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, functions
from pyspark.sql.types import ArrayType, StructField, StructType

from clients.spark.compat import PYSPARK_VERSION, arrow_schema, is_connect

log = logging.getLogger("clients.spark")

VIEW_PREFIX = "statestore_table_"
"""The names of the temporary views kept on PySpark 3.5 Connect sessions (a unique suffix each)."""

_unused_views: list[tuple[SparkSession, str]] = []  # views no DataFrame refers to any more
_unused_lock = threading.Lock()


def kept_frame(session: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    """``table`` (of ``schema``'s column names, in order) as a DataFrame of ``session`` whose rows
    Spark keeps after the first job (lazily: making it runs no job)."""
    if PYSPARK_VERSION >= (4, 0):
        return session.createDataFrame(table, schema).localCheckpoint(eager=False)
    table = table.cast(arrow_schema(schema))
    if is_connect(session):
        return _viewed(session, table, schema)
    return _from_arrow_stream(session, table, schema).localCheckpoint(eager=False)


def drop_unused_views() -> list[str]:
    """Drop the kept views that no DataFrame refers to any more; their names."""
    with _unused_lock:
        unused = list(_unused_views)
        _unused_views.clear()
    for session, name in unused:
        try:
            session.catalog.dropTempView(name)
        except Exception as exc:  # a session stopped since: its views went with it
            log.debug("kept view %s not dropped: %s", name, exc)
    return [name for _, name in unused]


def _viewed(session: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    drop_unused_views()
    name = VIEW_PREFIX + uuid.uuid4().hex
    row = StructType([StructField(field.name, field.dataType, True) for field in schema.fields])
    folded = StructType([StructField("rows", ArrayType(row, True), True)])  # as Arrow says: nullable
    _local_relation(session, _one_row(table), folded).createOrReplaceTempView(name)
    frame = session.table(name).select(functions.inline("rows"))
    # Every DataFrame made from ``frame`` (a join, a hint) holds its plan: once that is collected,
    # nothing can read the view any more.
    weakref.finalize(frame._plan, _unused, session, name)
    return frame


def _one_row(table: pa.Table) -> pa.Table:
    """``table`` as one row of one column ``rows``: the array of its rows."""
    rows = pa.StructArray.from_arrays(
        [column.combine_chunks() for column in table.columns], fields=list(table.schema)
    )
    folded = pa.ListArray.from_arrays(pa.array([0, len(rows)], pa.int32()), rows)
    return pa.Table.from_arrays([folded], names=["rows"])


def _local_relation(session: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    """``table`` as a Connect DataFrame: 3.5's ``createDataFrame`` takes no Arrow table, so the
    plan is made as the one it makes of a pandas frame (a local relation of Arrow bytes)."""
    from pyspark.sql.connect import dataframe, plan  # noqa: PLC0415  # Connect only

    connect_frame: Any = dataframe.DataFrame  # 3.5's, whose ``withPlan`` PySpark 4 no longer has
    frame: DataFrame = connect_frame.withPlan(plan.LocalRelation(table, schema=schema.json()), session)
    return frame


def _unused(session: SparkSession, name: str) -> None:
    with _unused_lock:
        _unused_views.append((session, name))


def _from_arrow_stream(session: Any, table: pa.Table, schema: StructType) -> DataFrame:
    """``table`` sent to the JVM of a classic PySpark 3.5 session as an Arrow stream, a partition a
    batch (the path 3.5's ``createDataFrame`` takes for a pandas frame, without pandas)."""
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer  # noqa: PLC0415  # classic only

    jvm = session._jvm
    step = session._jconf.arrowMaxRecordsPerBatch()
    batches = table.to_batches(max_chunksize=step if step > 0 else None)
    jrows = session._sc._serialize_to_jvm(
        batches,
        ArrowStreamSerializer(),
        jvm.PythonSQLUtils.readArrowStreamFromFile,
        jvm.ArrowIteratorServer,
    )
    jdf = jvm.PythonSQLUtils.toDataFrame(jrows, schema.json(), session._jsparkSession)
    frame = DataFrame(jdf, session)
    frame._schema = schema  # known: the first use asks the JVM nothing
    return frame

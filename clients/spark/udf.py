"""The lookup UDF: ``products = lookup_udf(store="products", ...)``, ``df.withColumn("p", products("id"))``.

On PySpark 4.1 and newer it is an Arrow UDF (Arrow arrays in and out). Before, it is a pandas UDF
around the same Arrow task; a pandas UDF cannot return a null struct, so a struct result travels
wrapped in a one-field struct that the column unwraps, and absent keys still give null.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, SparkSession, functions
from pyspark.sql.types import ArrayType, DataType, MapType, StringType, StructField, StructType

from clients.exceptions import UnsupportedSparkError
from clients.lookup import DEFAULT_CACHE_BYTES
from clients.options import DEFAULT_BATCH_SIZE
from clients.spark.compat import PYSPARK_VERSION, active_session, has_arrow_udf, is_connect
from clients.spark.options import LookupOptions
from clients.spark.plan import LookupInfo, Plan, plan_lookup
from clients.spark.tasks import udf_task
from clients.whole_store import DEFAULT_SCAN_BYTES
from wire.position import PositionLike

METADATA_KEY = "statestore"
"""Column metadata key naming the lookup that produced a column (see :func:`clients.spark.lookups`)."""

_WRAPPED = "value"

ArrowTask = Callable[[Iterator[pa.Array]], Iterator[pa.Array]]


def column_metadata(info: LookupInfo) -> dict[str, Any]:
    """What the new columns' metadata says about their lookup (the position, and whether exact)."""
    described: dict[str, Any] = {"lookup_id": info.lookup_id, "store": info.store, "position": info.position}
    if info.exact:
        described["as_of"] = info.position
    if info.index is not None:
        described["index"] = info.index
    return {METADATA_KEY: described}


def _arrow_keys(keys: Any) -> pa.Array:
    """A pandas key column back as Arrow; floats are refused (integers with nulls arrive as floats)."""
    if keys.dtype.kind == "f":
        raise UnsupportedSparkError(
            f"on PySpark {'.'.join(map(str, PYSPARK_VERSION))} lookup_udf receives its keys through "
            "pandas, where integer keys with nulls turn into floats; pass string or binary keys, "
            "e.g. products(col('id').cast('string')) (PySpark 4.1 and newer pass Arrow directly)"
        )
    return pa.Array.from_pandas(keys)


def pandas_task(run: ArrowTask, wrapped: bool) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The Arrow task as a pandas iterator UDF: series of keys in, series (or wrapped structs) out."""
    import pandas as pd  # type: ignore[import-untyped]  # noqa: PLC0415  # the pandas UDF only

    def task(batches: Iterator[pd.Series]) -> Iterator[pd.Series | pd.DataFrame]:
        for values in run(_arrow_keys(keys) for keys in batches):
            if wrapped:
                yield pd.DataFrame({_WRAPPED: values.to_pandas()})
            else:
                yield values.to_pandas()

    return task


def _newer_worker_ready(data_type: DataType) -> None:
    """Give PySpark 3.5's string types the ``collation`` attribute that 4.x workers read.

    A Connect client pickles its own return type into the UDF; a 4.x server's Python worker
    unpickles it as its own ``StringType``, whose methods read ``collation`` (new in 4.0). Without
    it a 3.5 client's pandas UDF fails on a 4.x Connect server.
    """
    if isinstance(data_type, StringType) and not hasattr(data_type, "collation"):
        object.__setattr__(data_type, "collation", "UTF8_BINARY")
    for child in _children(data_type):
        _newer_worker_ready(child)


def _children(data_type: DataType) -> list[DataType]:
    if isinstance(data_type, StructType):
        return [field.dataType for field in data_type.fields]
    if isinstance(data_type, ArrayType):
        return [data_type.elementType]
    if isinstance(data_type, MapType):
        return [data_type.keyType, data_type.valueType]
    return []


def vectorized_udf(run: ArrowTask, value_type: DataType, connect: bool = False) -> Callable[[Column], Column]:
    """``run`` as a UDF column function, with what this PySpark version has."""
    # pyspark's overloads do not admit struct return types for iterator UDFs, which work.
    task: Any = run
    return_type: Any = value_type
    with warnings.catch_warnings():
        # Type hints cannot name the return type here; the explicit UDF type is deliberate.
        warnings.simplefilter("ignore", UserWarning)
        if has_arrow_udf():
            from pyspark.sql.pandas.functions import ArrowUDFType, arrow_udf  # noqa: PLC0415  # 4.1+

            udf: Any = arrow_udf(task, returnType=return_type, functionType=ArrowUDFType.SCALAR_ITER)
            return udf  # type: ignore[no-any-return]
        from pyspark.sql.pandas.functions import PandasUDFType, pandas_udf  # noqa: PLC0415

        wrapped = isinstance(value_type, StructType)
        if wrapped:
            return_type = StructType([StructField(_WRAPPED, value_type, True)])
        if connect:
            _newer_worker_ready(return_type)
        udf = pandas_udf(
            pandas_task(run, wrapped), returnType=return_type, functionType=PandasUDFType.SCALAR_ITER
        )
    if not wrapped:
        return udf  # type: ignore[no-any-return]
    return lambda column: udf(column).getField(_WRAPPED)


class LookupUDF:
    """A vectorized UDF looking a key column up in one store: ``products(col("product_id"))``.

    The result is a struct column (JSON store with ``value_schema``), else binary or string.
    """

    def __init__(self, plan: Plan, connect: bool = False) -> None:
        self.info = plan.info
        self.return_type = plan.value_type
        run = udf_task(plan.spec, plan.info.mismatch_counter)
        self._udf = vectorized_udf(run, plan.value_type, connect)

    @property
    def position(self) -> str:
        """The position every lookup of this UDF demands (or reads exactly, when consistent)."""
        return self.info.position

    def __call__(self, key: str | Column) -> Column:
        column = functions.col(key) if isinstance(key, str) else key
        return self._udf(column).alias(f"{self.info.store}_lookup", metadata=column_metadata(self.info))


def lookup_udf(
    *,
    store: str,
    url: str | None = None,
    value_schema: str | StructType | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    token: str | None = None,
    verify: bool | str = True,
    cert: str | tuple[str, str] | None = None,
    min_position: PositionLike | None = None,
    consistent: bool = False,
    as_of: PositionLike | None = None,
    timeout: float = 30.0,
    deadline: float = 300.0,
    planning_deadline: float = 10.0,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    scan_bytes: int = DEFAULT_SCAN_BYTES,
    spark: SparkSession | None = None,
) -> LookupUDF:
    """A lookup UDF for ``store``, planned now on the driver (same checks and pinning as ``lookup_join``).

    Uses ``spark`` or the active session (classic or Connect), whose Spark conf gives the defaults of
    ``url``, ``token``, ``verify`` and ``cert`` (as for ``lookup_join``). Under Spark Connect the UDF
    cannot count values that do not fit ``value_schema`` (no accumulators, and a UDF has no rows to
    observe): use ``lookup_join`` with ``misfit_column=`` where that count matters.
    """
    session = spark or active_session()
    connect = is_connect(session)
    return LookupUDF(
        plan_lookup(
            LookupOptions(
                store=store,
                url=url,
                value_schema=value_schema,
                token=token,
                verify=verify,
                cert=cert,
                min_position=min_position,
                consistent=consistent,
                as_of=as_of,
                batch_size=batch_size,
                timeout=timeout,
                deadline=deadline,
                planning_deadline=planning_deadline,
                cache_bytes=cache_bytes,
                scan_bytes=scan_bytes,
            ),
            session,
            uncounted=(
                "under Spark Connect a lookup_udf cannot count values that do not fit value_schema "
                "(no accumulators): use lookup_join with misfit_column='...'"
            )
            if connect
            else None,
        ),
        connect,
    )

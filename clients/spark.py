"""PySpark lookup joins against statestore: executors look keys up over HTTP, no shuffle, no broadcast.

Two entry points sharing batching, dedupe, caching and position pinning::

    from clients.spark import lookup_join, lookup_udf

    enriched = lookup_join(purchases, store="products", on="product_id", url=URL,
                           value_schema="name string, price double", prefix="product_")
    products = lookup_udf(store="products", url=URL, value_schema="name string, price double")
    purchases.withColumn("product", products(col("product_id")))

The store's position is read once on the driver when the lookup is planned; every task demands
at least that position (``min_position``), so a job never sees data older than its start. With
``consistent=True`` (or ``as_of=`` a position from an earlier run) every read is exactly as of that
position, so task retries, speculative tasks and reruns all read the same table (the store must keep
history). The position is logged and kept in the new columns' metadata (see :func:`lookups`).

One-to-many lookups go through a store's index: ``lookup_join(tickers, store="positions",
index="by_ticker", on="symbol", ...)`` gives one row per position of each ticker, with the
position's key in column ``prefix + "key"``.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from typing import Any, Literal

from pyspark import SparkContext
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, functions
from pyspark.sql.pandas.functions import ArrowUDFType, arrow_udf
from pyspark.sql.types import BinaryType, BooleanType, StringType, StructField, StructType

from clients.lookup import DEFAULT_CACHE_BYTES
from clients.options import DEFAULT_BATCH_SIZE
from clients.position import PositionLike
from clients.spark_plan import LookupInfo, Plan, plan_lookup, planned_lookup
from clients.spark_tasks import JoinStep, join_task, udf_task

log = logging.getLogger("clients.spark")

METADATA_KEY = "statestore"
"""Column metadata key naming the lookup that produced a column (see :func:`lookups`)."""

__all__ = ["LookupInfo", "LookupUDF", "lookup_join", "lookup_udf", "lookups"]


def lookups(df: DataFrame) -> list[LookupInfo]:
    """The lookups whose columns ``df`` holds, with the positions they pinned."""
    found: dict[str, LookupInfo] = {}
    for field in df.schema.fields:
        lookup_id = (field.metadata.get(METADATA_KEY) or {}).get("lookup_id")
        info = planned_lookup(lookup_id) if lookup_id else None
        if info is not None:
            found.setdefault(info.lookup_id, info)
    return list(found.values())


def _key_column(df: DataFrame, on: str | Column, text: bool = False) -> Column:
    """The join key as Spark hands it to Arrow: binary and string kept, other types as their text.

    Indexed values are always text (``text``); booleans become ``true``/``false`` like in JSON.
    """
    column = functions.col(on) if isinstance(on, str) else on
    data_type = df.select(column).schema.fields[0].dataType
    if isinstance(data_type, StringType) or (isinstance(data_type, BinaryType) and not text):
        return column
    if isinstance(data_type, BooleanType):
        return functions.when(column, "true").when(~column, "false")
    return column.cast("string")


def _metadata(info: LookupInfo) -> dict[str, Any]:
    """What the new columns' metadata says about their lookup (the position, and whether exact)."""
    described: dict[str, Any] = {"lookup_id": info.lookup_id, "store": info.store, "position": info.position}
    if info.exact:
        described["as_of"] = info.position
    if info.index is not None:
        described["index"] = info.index
    return {METADATA_KEY: described}


def lookup_join(
    df: DataFrame,
    *,
    store: str,
    on: str | Column,
    url: str,
    how: Literal["left", "inner"] = "left",
    value_schema: str | StructType | None = None,
    prefix: str = "",
    value_column: str = "value",
    batch_size: int = DEFAULT_BATCH_SIZE,
    token: str | None = None,
    verify: bool | str = True,
    min_position: PositionLike | None = None,
    consistent: bool = False,
    as_of: PositionLike | None = None,
    index: str | None = None,
    key_column: str = "key",
    binary_keys: bool = False,
    timeout: float = 30.0,
    deadline: float = 300.0,
    planning_deadline: float = 10.0,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> DataFrame:
    """``df`` with the values of ``store`` for key ``on`` appended, looked up by the executors.

    For a JSON store with ``value_schema`` (a DDL string or ``StructType``) each field becomes a
    column named ``prefix + field``; otherwise one column ``prefix + value_column`` (binary for
    bytes stores, string for string and JSON stores). ``how="left"`` keeps every row (nulls for
    absent and null keys); ``"inner"`` drops them. Values that do not fit ``value_schema`` become
    null and are counted (:func:`lookups`). Raises on the driver, before any job runs, when the
    service is unreachable, the store unknown or the schema unusable.

    With ``index=`` the lookup is one-to-many: ``on`` holds the indexed value (compared as text), each
    row is repeated once per store row whose indexed field equals it, with that row's key in column
    ``prefix + key_column`` (text, or binary with ``binary_keys``) before its values; ``how="left"``
    keeps a row without matches once, with nulls. ``consistent=True`` reads everything exactly as of
    the position pinned now; ``as_of=`` reads as of a given position (reproducing an earlier run).

    ``lookup_join`` of a ``lookup_join`` result (directly, no transformation between) runs both
    lookups in the same pass over the rows, unless the second key needs a column the first adds.
    """
    if how not in ("left", "inner"):
        raise ValueError(f'how must be "left" or "inner", got {how!r}')
    plan = plan_lookup(
        store=store,
        url=url,
        value_schema=value_schema,
        token=token,
        verify=verify,
        min_position=min_position,
        consistent=consistent,
        as_of=as_of,
        index=index,
        batch_size=batch_size,
        timeout=timeout,
        deadline=deadline,
        planning_deadline=planning_deadline,
        cache_bytes=cache_bytes,
        spark_context=df.sparkSession.sparkContext,
    )
    metadata = _metadata(plan.info)
    added: list[StructField] = []
    if index is not None:
        row_key_type = BinaryType() if binary_keys else StringType()
        added.append(StructField(prefix + key_column, row_key_type, True, metadata))
    if isinstance(plan.value_type, StructType):
        added += [StructField(prefix + f.name, f.dataType, True, metadata) for f in plan.value_type.fields]
    else:
        added.append(StructField(prefix + value_column, plan.value_type, True, metadata))
    clashes = sorted(set(df.columns) & {f.name for f in added})
    if clashes:
        raise ValueError(
            f"lookup columns {clashes} already exist in the DataFrame; pass prefix= (e.g. prefix='{store}_')"
        )
    key_name = f"__statestore_key_{plan.info.lookup_id[:12]}"
    chain: _Chain | None = getattr(df, _CHAIN_ATTRIBUTE, None)
    if chain is not None:
        try:
            keyed = chain.keyed.withColumn(key_name, _key_column(chain.keyed, on, index is not None))
        except AnalysisException:  # the key needs a column an earlier lookup adds: a pass of its own
            chain = None
    if chain is None:
        chain = _Chain(df, df, ())
        keyed = df.withColumn(key_name, _key_column(df, on, index is not None))
    step = JoinStep(plan.spec, len(keyed.columns) - 1, how, plan.info.mismatch_counter, binary_keys)
    steps = (*chain.steps, step)
    schema = StructType(list(df.schema.fields) + added)
    result = keyed.mapInArrow(join_task(steps, len(chain.base.columns), schema.fieldNames()), schema)
    # A lookup_join of this result joins the same pass instead of adding one.
    setattr(result, _CHAIN_ATTRIBUTE, _Chain(chain.base, keyed, steps))
    return result


@dataclasses.dataclass(frozen=True)
class _Chain:
    """Lookups fused into one task function: the DataFrame before them, with every step's key column."""

    base: DataFrame
    keyed: DataFrame
    steps: tuple[JoinStep, ...]


_CHAIN_ATTRIBUTE = "_statestore_lookup_chain"


class LookupUDF:
    """A vectorized (Arrow) UDF looking a key column up in one store: ``products(col("product_id"))``.

    The result is a struct column (JSON store with ``value_schema``), else binary or string.
    """

    def __init__(self, plan: Plan) -> None:
        self.info = plan.info
        self.return_type = plan.value_type
        run = udf_task(plan.spec, plan.info.mismatch_counter)
        # pyspark's overloads do not admit struct return types for iterator UDFs, which work.
        task: Any = run
        return_type: Any = plan.value_type
        with warnings.catch_warnings():
            # Type hints cannot name the return type here; the explicit UDF type is deliberate.
            warnings.simplefilter("ignore", UserWarning)
            self._udf = arrow_udf(task, returnType=return_type, functionType=ArrowUDFType.SCALAR_ITER)

    @property
    def position(self) -> str:
        """The position every lookup of this UDF demands (or reads exactly, when consistent)."""
        return self.info.position

    def __call__(self, key: str | Column) -> Column:
        column = functions.col(key) if isinstance(key, str) else key
        return self._udf(column).alias(f"{self.info.store}_lookup", metadata=_metadata(self.info))


def lookup_udf(
    *,
    store: str,
    url: str,
    value_schema: str | StructType | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    token: str | None = None,
    verify: bool | str = True,
    min_position: PositionLike | None = None,
    consistent: bool = False,
    as_of: PositionLike | None = None,
    timeout: float = 30.0,
    deadline: float = 300.0,
    planning_deadline: float = 10.0,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> LookupUDF:
    """A lookup UDF for ``store``, planned now on the driver (same checks and pinning as ``lookup_join``).

    Needs an active SparkSession.
    """
    spark_context = SparkContext._active_spark_context
    if spark_context is None:
        raise RuntimeError("lookup_udf needs an active SparkSession: create one before planning lookups")
    return LookupUDF(
        plan_lookup(
            store=store,
            url=url,
            value_schema=value_schema,
            token=token,
            verify=verify,
            min_position=min_position,
            consistent=consistent,
            as_of=as_of,
            index=None,
            batch_size=batch_size,
            timeout=timeout,
            deadline=deadline,
            planning_deadline=planning_deadline,
            cache_bytes=cache_bytes,
            spark_context=spark_context,
        )
    )

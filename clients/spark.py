"""PySpark lookup joins against statestore: executors look keys up over HTTP, no shuffle, no broadcast.

Two entry points sharing batching, dedupe, caching and position pinning::

    from clients.spark import lookup_join, lookup_udf

    enriched = lookup_join(purchases, store="products", on="product_id", url=URL,
                           value_schema="name string, price double", prefix="product_")
    products = lookup_udf(store="products", url=URL, value_schema="name string, price double")
    purchases.withColumn("product", products(col("product_id")))

The store's position is read once on the driver when the lookup is planned; every task demands
at least that position (``min_position``), so a job never sees data older than its start. The
position is logged and kept in the new columns' metadata (see :func:`lookups`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import uuid
import warnings
from typing import Any, Literal

import pyarrow as pa
from pyspark import Accumulator, SparkContext
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, functions
from pyspark.sql.pandas.functions import ArrowUDFType, arrow_udf
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, DataType, StringType, StructField, StructType

from clients.client import StatestoreClient
from clients.exceptions import SchemaMismatchError, StatestoreClientError
from clients.lookup import DEFAULT_CACHE_BYTES, LookupSpec, decode_json
from clients.options import DEFAULT_BATCH_SIZE, ClientOptions, Verify
from clients.position import Position, PositionLike
from clients.retry import RetryPolicy
from clients.spark_tasks import JoinStep, join_task, udf_task

log = logging.getLogger("clients.spark")

METADATA_KEY = "statestore"
"""Column metadata key naming the lookup that produced a column (see :func:`lookups`)."""

SAMPLE_SIZE = 20
"""Values read on the driver to check that ``value_schema`` fits the store at all."""


@dataclasses.dataclass(frozen=True)
class LookupInfo:
    """What a planned lookup pinned, for logs and reproducible runs."""

    lookup_id: str
    store: str
    url: str
    position: str
    value_format: str
    mismatch_counter: Accumulator[int] = dataclasses.field(repr=False, compare=False)

    @property
    def mismatched_values(self) -> int:
        """Rows whose value did not fit ``value_schema`` (null instead), counted after an action.

        Like every Spark accumulator it counts each time the rows are computed: a second action on
        an uncached DataFrame counts its rows again.
        """
        return int(self.mismatch_counter.value)


_planned: dict[str, LookupInfo] = {}
_planned_lock = threading.Lock()


def lookups(df: DataFrame) -> list[LookupInfo]:
    """The lookups whose columns ``df`` holds, with the positions they pinned."""
    found: dict[str, LookupInfo] = {}
    for field in df.schema.fields:
        lookup_id = (field.metadata.get(METADATA_KEY) or {}).get("lookup_id")
        with _planned_lock:
            info = _planned.get(lookup_id) if lookup_id else None
        if info is not None:
            found.setdefault(info.lookup_id, info)
    return list(found.values())


def _value_schema(value_schema: str | StructType) -> StructType:
    if isinstance(value_schema, StructType):
        return value_schema
    try:
        parsed = StructType.fromDDL(value_schema)
    except Exception as exc:  # Spark raises parse errors of several JVM-backed types
        raise SchemaMismatchError(
            f"value_schema {value_schema!r} is not a Spark DDL struct, e.g. 'name string, price double'"
        ) from exc
    if not isinstance(parsed, StructType):
        raise SchemaMismatchError(f"value_schema {value_schema!r} must describe a struct of fields")
    return parsed


@dataclasses.dataclass(frozen=True)
class _Plan:
    spec: LookupSpec
    value_type: DataType
    info: LookupInfo


def _check_sample(client: StatestoreClient, spec: LookupSpec, schema: StructType) -> None:
    """Fail when the store's values clearly do not fit the schema (none of a sample does)."""
    assert spec.value_type is not None
    sample: list[tuple[Any, bytes]] = []
    # The sample reads the store as it is now: the pinned position may lie ahead of it.
    for key, value in client.scan(spec.store, b"", page_size=SAMPLE_SIZE):
        sample.append((key, json.dumps(value).encode()))
        if len(sample) >= SAMPLE_SIZE:
            break
    if not sample:
        return
    _, misfits = decode_json(pa.array([v for _, v in sample], pa.binary()), spec.value_type)
    documents = [json.loads(v) for _, v in sample]
    names = set(schema.fieldNames())
    shares_a_field = any(isinstance(d, dict) and names & set(d) for d in documents)
    if all(misfits.to_pylist()) or not shares_a_field:
        key, example = sample[0]
        raise SchemaMismatchError(
            f"value_schema <{schema.simpleString()}> does not fit store {spec.store!r}: none of "
            f"{len(sample)} sampled values matches it (e.g. key {key!r}: {example[:200]!r}); "
            "fix the field names and types"
        )


def _plan(
    *,
    store: str,
    url: str,
    value_schema: str | StructType | None,
    token: str | None,
    verify: Verify,
    min_position: PositionLike | None,
    batch_size: int,
    timeout: float,
    deadline: float,
    planning_deadline: float,
    cache_bytes: int,
    spark_context: SparkContext,
) -> _Plan:
    """Driver side of a lookup: check the store, pin its position, fix the output type."""
    if isinstance(verify, bool | str):
        options = ClientOptions(
            url,
            token=token,
            verify=verify,
            timeout=timeout,
            deadline=deadline,
            batch_size=batch_size,
            retry=RetryPolicy(max_backoff=5.0),
        )
    else:
        raise TypeError(
            "verify must be True/False or a CA bundle path: tasks rebuild the client on executors"
        )
    planning = dataclasses.replace(
        options, deadline=planning_deadline, timeout=min(timeout, planning_deadline)
    )
    with StatestoreClient(planning) as client:
        try:
            info = client.store(store)
        except StatestoreClientError as exc:
            exc.add_note(
                f"statestore lookup of store {store!r} at {url}: checked on the driver before planning"
            )
            raise
        position = info.position if min_position is None else info.position.merged(Position.of(min_position))
        schema = _value_schema(value_schema) if value_schema is not None else None
        if schema is not None and info.value_format != "json":
            raise SchemaMismatchError(
                f"store {store!r} holds {info.value_format} values; value_schema applies to JSON stores only:"
                f" drop value_schema to get a {'binary' if info.value_format == 'bytes' else 'string'} column"
            )
        arrow_type = pa.struct(list(to_arrow_schema(schema))) if schema is not None else None
        spec = LookupSpec(options, store, str(position), info.value_format, arrow_type, cache_bytes)
        if schema is not None:
            _check_sample(client, spec, schema)
    value_type: DataType = schema or (BinaryType() if info.value_format == "bytes" else StringType())
    lookup_id = uuid.uuid4().hex
    planned = LookupInfo(
        lookup_id, store, url, str(position), info.value_format, spark_context.accumulator(0)
    )
    with _planned_lock:
        _planned[lookup_id] = planned
    log.info(
        "lookup %s of store %r at %s pinned to position %s", lookup_id[:8], store, url, position or "(empty)"
    )
    return _Plan(spec, value_type, planned)


def _key_column(df: DataFrame, on: str | Column) -> Column:
    """The join key as Spark hands it to Arrow: binary and string kept, other types as their text."""
    column = functions.col(on) if isinstance(on, str) else on
    data_type = df.select(column).schema.fields[0].dataType
    if isinstance(data_type, BinaryType | StringType):
        return column
    return column.cast("string")


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

    ``lookup_join`` of a ``lookup_join`` result (directly, no transformation between) runs both
    lookups in the same pass over the rows, unless the second key needs a column the first adds.
    """
    if how not in ("left", "inner"):
        raise ValueError(f'how must be "left" or "inner", got {how!r}')
    plan = _plan(
        store=store,
        url=url,
        value_schema=value_schema,
        token=token,
        verify=verify,
        min_position=min_position,
        batch_size=batch_size,
        timeout=timeout,
        deadline=deadline,
        planning_deadline=planning_deadline,
        cache_bytes=cache_bytes,
        spark_context=df.sparkSession.sparkContext,
    )
    metadata = {
        METADATA_KEY: {"lookup_id": plan.info.lookup_id, "store": store, "position": plan.info.position}
    }
    if isinstance(plan.value_type, StructType):
        added = [StructField(prefix + f.name, f.dataType, True, metadata) for f in plan.value_type.fields]
    else:
        added = [StructField(prefix + value_column, plan.value_type, True, metadata)]
    clashes = sorted(set(df.columns) & {f.name for f in added})
    if clashes:
        raise ValueError(
            f"lookup columns {clashes} already exist in the DataFrame; pass prefix= (e.g. prefix='{store}_')"
        )
    key_name = f"__statestore_key_{plan.info.lookup_id[:12]}"
    chain: _Chain | None = getattr(df, _CHAIN_ATTRIBUTE, None)
    if chain is not None:
        try:
            keyed = chain.keyed.withColumn(key_name, _key_column(chain.keyed, on))
        except AnalysisException:  # the key needs a column an earlier lookup adds: a pass of its own
            chain = None
    if chain is None:
        chain = _Chain(df, df, ())
        keyed = df.withColumn(key_name, _key_column(df, on))
    steps = (*chain.steps, JoinStep(plan.spec, len(keyed.columns) - 1, how, plan.info.mismatch_counter))
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

    def __init__(self, plan: _Plan) -> None:
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
        """The position every lookup of this UDF demands."""
        return self.info.position

    def __call__(self, key: str | Column) -> Column:
        column = functions.col(key) if isinstance(key, str) else key
        metadata = {
            METADATA_KEY: {
                "lookup_id": self.info.lookup_id,
                "store": self.info.store,
                "position": self.position,
            }
        }
        return self._udf(column).alias(f"{self.info.store}_lookup", metadata=metadata)


def lookup_udf(
    *,
    store: str,
    url: str,
    value_schema: str | StructType | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    token: str | None = None,
    verify: bool | str = True,
    min_position: PositionLike | None = None,
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
        _plan(
            store=store,
            url=url,
            value_schema=value_schema,
            token=token,
            verify=verify,
            min_position=min_position,
            batch_size=batch_size,
            timeout=timeout,
            deadline=deadline,
            planning_deadline=planning_deadline,
            cache_bytes=cache_bytes,
            spark_context=spark_context,
        )
    )

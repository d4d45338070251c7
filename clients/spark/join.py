"""The lookup join: ``df`` with the values of a store appended by the executors, no shuffle."""

from __future__ import annotations

import dataclasses
import logging
from typing import Literal

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, functions
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from clients.lookup import DEFAULT_CACHE_BYTES
from clients.options import DEFAULT_BATCH_SIZE
from clients.spark.broadcast import DEFAULT_BROADCAST_BYTES, broadcast_join
from clients.spark.compat import PYSPARK_VERSION, can_observe, is_connect, new_observation
from clients.spark.options import LookupOptions
from clients.spark.plan import LookupInfo, Plan, plan_lookup, planned_lookup
from clients.spark.tasks import JoinStep, join_task
from clients.spark.udf import METADATA_KEY, column_metadata
from clients.whole_store import DEFAULT_SCAN_BYTES
from wire.position import PositionLike

log = logging.getLogger("clients.spark")


_HIDDEN_FLAG = "__statestore_misfit_"


def lookups(df: DataFrame) -> list[LookupInfo]:
    """The lookups whose columns ``df`` holds, with the positions they pinned."""
    found: dict[str, LookupInfo] = {}
    for field in df.schema.fields:
        lookup_id = (field.metadata.get(METADATA_KEY) or {}).get("lookup_id")
        info = planned_lookup(lookup_id) if lookup_id else None
        if info is not None:
            found.setdefault(info.lookup_id, info)
    return list(found.values())


Fields = tuple[StructField, ...]


def _key_column(df: DataFrame, on: str | Column, text: bool = False) -> tuple[Column, DataType]:
    """The join key as Spark hands it to Arrow: binary and string kept, other types as their text.

    Indexed values are always text (``text``); booleans become ``true``/``false`` like in JSON.
    """
    column = functions.col(on) if isinstance(on, str) else on
    data_type = df.select(column).schema.fields[0].dataType
    if isinstance(data_type, StringType) or (isinstance(data_type, BinaryType) and not text):
        return column, data_type
    if isinstance(data_type, BooleanType):
        return functions.when(column, "true").when(~column, "false"), StringType()
    return column.cast("string"), StringType()


def time_column(df: DataFrame, at: str | Column) -> Column:
    """A row's time as epoch milliseconds (long): from a timestamp, or a long / int taken as ms."""
    column = functions.col(at) if isinstance(at, str) else at
    data_type = df.select(column).schema.fields[0].dataType
    if isinstance(data_type, TimestampType | TimestampNTZType):
        # Whole milliseconds, cut toward the past: a time never moves after a version it precedes.
        micros = functions.unix_micros(column.cast("timestamp"))
        return functions.floor(micros / 1000).cast("long")
    if isinstance(data_type, LongType | IntegerType):
        return column.cast("long")
    raise TypeError(
        f"as_of_time must be a timestamp or epoch milliseconds (long), not {data_type.simpleString()}"
    )


def _exact_for_times(
    consistent: bool, as_of: PositionLike | None, index: str | None, as_of_time: str | Column | None
) -> bool:
    """``consistent``, made True for a join by time (unless ``as_of`` pins a position already)."""
    if as_of_time is None:
        return consistent
    if index is not None:
        raise ValueError("as_of_time= is not supported with index=: look the key up by time instead")
    return consistent or as_of is None


def _with_time(
    keyed: DataFrame, fields: Fields, as_of_time: str | Column | None, lookup_id: str
) -> tuple[DataFrame, Fields, int | None]:
    """``keyed`` (of ``fields``) with the rows' times (epoch ms) appended, its fields, and that
    column's index (none: no times)."""
    if as_of_time is None:
        return keyed, fields, None
    name = f"__statestore_time_{lookup_id[:12]}"
    keyed = keyed.withColumn(name, time_column(keyed, as_of_time))
    return keyed, (*fields, StructField(name, LongType())), len(fields)


def lookup_join(
    df: DataFrame,
    *,
    store: str,
    on: str | Column,
    url: str | None = None,
    how: Literal["left", "inner"] = "left",
    value_schema: str | StructType | None = None,
    prefix: str = "",
    value_column: str = "value",
    batch_size: int = DEFAULT_BATCH_SIZE,
    token: str | None = None,
    verify: bool | str = True,
    cert: str | tuple[str, str] | None = None,
    min_position: PositionLike | None = None,
    consistent: bool = False,
    as_of: PositionLike | None = None,
    index: str | None = None,
    key_column: str = "key",
    binary_keys: bool = False,
    misfit_column: str | None = None,
    timeout: float = 30.0,
    deadline: float = 300.0,
    planning_deadline: float = 10.0,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    as_of_time: str | Column | None = None,
    scan_bytes: int = DEFAULT_SCAN_BYTES,
    broadcast_bytes: int = DEFAULT_BROADCAST_BYTES,
) -> DataFrame:
    """``df`` with the values of ``store`` for key ``on`` appended, looked up by the executors.

    ``on`` is a column name or a Column expression (``F.concat_ws(":", "region", "id")``). ``url``
    and ``token`` default to the session's ``spark.statestore.url`` / ``spark.statestore.token``
    (or ``spark.statestore.authFile``). ``verify`` (a CA bundle path) and ``cert`` (a client
    certificate for mTLS: ``(certfile, keyfile)`` or one PEM file with both) default to
    ``spark.statestore.caFile`` and ``spark.statestore.certFile`` / ``spark.statestore.keyFile``;
    executors read those files at the same paths.

    For a JSON store with ``value_schema`` (a DDL string or ``StructType``) each field becomes a
    column named ``prefix + field``; otherwise one column ``prefix + value_column`` (binary for
    bytes stores, string for string and JSON stores). ``how="left"`` keeps every row (nulls for
    absent and null keys); ``"inner"`` drops them. Values that do not fit ``value_schema`` become
    null and are counted (:func:`lookups`: an accumulator on classic sessions, ``observe`` metrics
    under Spark Connect); ``misfit_column=`` adds a boolean column marking those rows. Raises on the
    driver, before any job runs, when the service is unreachable, the store unknown or the schema
    unusable.

    With ``index=`` the lookup is one-to-many: ``on`` holds the indexed value (compared as text), each
    row is repeated once per store row whose indexed field equals it, with that row's key in column
    ``prefix + key_column`` (text, or binary with ``binary_keys``) before its values; ``how="left"``
    keeps a row without matches once, with nulls. ``consistent=True`` reads everything exactly as of
    the position pinned now; ``as_of=`` reads as of a given position (reproducing an earlier run).

    ``lookup_join`` of a ``lookup_join`` result (directly, no transformation between) runs both
    lookups in the same pass over the rows, unless the second key needs a column the first adds.

    Each task keeps the values it has looked up (``cache_bytes`` of them, decoded). A task that
    needs most of a store's keys reads the store whole, in key order, at the pinned position,
    instead of fetching its keys by batch gets, when its keys and stored values fit in
    ``scan_bytes`` (0: never); the Python worker keeps it for the lookup's next tasks at the same
    position, and the other workers of the machine map the file it writes instead of reading the
    store again (``clients.store_files``). The answers are the same either way.

    A store as small as a table Spark would broadcast is broadcast: a typed key lookup (a
    ``value_schema``) of a store whose stored keys and values stay below ``broadcast_bytes`` (10 MiB,
    Spark's ``autoBroadcastJoinThreshold`` default; 0: never) and whose values all fit the schema
    is read whole on the driver when planned, at the pinned position, and joined by Spark's
    broadcast hash join, with the same answers (``clients.spark.broadcast``; not with ``index=``,
    ``as_of_time=`` or ``misfit_column=``). The driver keeps that read for the
    lookups planned later at the same position of the same copy of the store.

    ``as_of_time=`` (a column name or Column: a Spark timestamp, or epoch milliseconds as a long)
    joins each row with the value valid at its own time: the key's record stamped last at or
    before it (the store must keep history back to the earliest time; an older time fails the job
    with ``HistoryExpiredError``). Reads are exactly as of the pinned position (as
    ``consistent=True``), so retries read the same answers. A row whose time is before any version
    of its key, or null, finds nothing (kept with nulls by ``how="left"``).
    """
    if how not in ("left", "inner"):
        raise ValueError(f'how must be "left" or "inner", got {how!r}')
    consistent = _exact_for_times(consistent, as_of, index, as_of_time)
    connect = is_connect(df)
    observed = connect and can_observe(df)
    before = _fields_of(df)
    names = {field.name for field in before}
    if index is not None or as_of_time is not None or misfit_column is not None or len(names) < len(before):
        broadcast_bytes = 0  # the per-row path: what a broadcast join does not do, or names it cannot pick
    options = LookupOptions(
        store=store, url=url, value_schema=value_schema, token=token, verify=verify, cert=cert,
        min_position=min_position, consistent=consistent, as_of=as_of, index=index,
        batch_size=batch_size, timeout=timeout, deadline=deadline,
        planning_deadline=planning_deadline, cache_bytes=cache_bytes, scan_bytes=scan_bytes,
        at_times=as_of_time is not None, broadcast_bytes=broadcast_bytes,
    )  # fmt: skip
    plan = plan_lookup(
        options,
        df.sparkSession,
        observations=[] if observed else None,
        uncounted=None if observed else _uncounted_join(),
    )
    if plan.dimension is not None:
        added = _added_fields(plan, prefix, None, binary_keys, value_column, None)
        _check_clashes(before, added, store)
        key, text_key = _broadcast_key(df, before, on)
        joined = broadcast_join(df, before, key, text_key, plan.dimension, added, how)
        joined.__dict__[_FIELDS_ATTRIBUTE] = (*before, *added)
        return joined
    flag_name = misfit_column or (_HIDDEN_FLAG + plan.info.lookup_id if observed else None)
    row_key = prefix + key_column if index is not None else None
    added = _added_fields(plan, prefix, row_key, binary_keys, value_column, flag_name)
    _check_clashes(before, added, store)
    key_name = f"__statestore_key_{plan.info.lookup_id[:12]}"
    chain, keyed, keyed_fields, key_index = _keyed(df, before, key_name, on, index is not None)
    keyed, keyed_fields, time_index = _with_time(keyed, keyed_fields, as_of_time, plan.info.lookup_id)
    counter = plan.info.mismatch_counter
    step = JoinStep(plan.spec, key_index, how, counter, binary_keys, flag_name is not None, time_index)
    steps = (*chain.steps, step)
    infos = (*chain.infos, plan.info)
    flags = (*chain.flags, flag_name)
    fields = (*chain.fields, *added)
    schema = StructType(list(fields))
    result = keyed.mapInArrow(join_task(steps, chain.kept, schema.fieldNames()), schema)
    result = _observed(result, infos, flags) if observed else result
    # A lookup_join of this result joins the same pass instead of adding one.
    result.__dict__[_CHAIN_ATTRIBUTE] = _Chain(
        chain.base, keyed, keyed_fields, steps, infos, flags, fields, chain.kept
    )
    return result


def _check_clashes(before: Fields, added: list[StructField], store: str) -> None:
    clashes = sorted({f.name for f in before} & {f.name for f in added})
    if clashes:
        raise ValueError(
            f"lookup columns {clashes} already exist in the DataFrame; pass prefix= (e.g. prefix='{store}_')"
        )


def _broadcast_key(df: DataFrame, fields: Fields, on: str | Column) -> tuple[Column, bool]:
    """The key a broadcast lookup joins on, and whether it is a string compared by its bytes.

    A binary key, or a string one of Spark's byte-wise collation, is joined on as it is (for a
    column ``on`` names, Spark is not asked its type); any other key as the bytes a lookup asks
    for (:func:`_key_column`), e.g. a string of Spark 4's case-blind ``UTF8_LCASE`` collation.
    """
    names = [field.name for field in fields]
    plain = isinstance(on, str) and "." not in on and "`" not in on and names.count(on) == 1
    if plain:
        column, key_type = functions.col(str(on)), fields[names.index(str(on))].dataType
    else:
        column, key_type = _key_column(df, on)
    if isinstance(key_type, BinaryType):
        return column, False
    if isinstance(key_type, StringType):
        byte_wise = getattr(key_type, "collation", "UTF8_BINARY") == "UTF8_BINARY"
        return (column, True) if byte_wise else (column.cast("binary"), False)
    return _key_column(df, on)[0].cast("binary"), False  # a column of another type: its text's bytes


def _fields_of(df: DataFrame) -> Fields:
    """``df``'s columns. A lookup's result knows them: Spark is not asked (under Spark Connect an
    analysis of the whole plan on the server, the lookups' Python functions included)."""
    chain: _Chain | None = df.__dict__.get(_CHAIN_ATTRIBUTE)
    if chain is not None:
        return chain.visible
    known: Fields | None = df.__dict__.get(_FIELDS_ATTRIBUTE)
    return known if known is not None else tuple(df.schema.fields)


def _added_fields(
    plan: Plan,
    prefix: str,
    row_key: str | None,
    binary_keys: bool,
    value_column: str,
    flag_name: str | None,
) -> list[StructField]:
    """The columns a lookup appends: the matched row's key (an index lookup), the values, the flag."""
    metadata = column_metadata(plan.info)
    added: list[StructField] = []
    if row_key is not None:
        added.append(StructField(row_key, BinaryType() if binary_keys else StringType(), True, metadata))
    if isinstance(plan.value_type, StructType):
        added += [StructField(prefix + f.name, f.dataType, True, metadata) for f in plan.value_type.fields]
    else:
        added.append(StructField(prefix + value_column, plan.value_type, True, metadata))
    if flag_name is not None:
        added.append(StructField(flag_name, BooleanType(), True, metadata))
    return added


def _keyed(
    df: DataFrame, fields: Fields, key_name: str, on: str | Column, text: bool
) -> tuple[_Chain, DataFrame, Fields, int]:
    """The chain this lookup joins (``df``'s, when ``df`` is a lookup's result and the key can be
    computed before it), its DataFrame with the lookup's key column, that DataFrame's fields, and
    the key column's index. ``fields``: ``df``'s."""
    chain: _Chain | None = df.__dict__.get(_CHAIN_ATTRIBUTE)
    if chain is not None:
        try:
            return (chain, *_with_key(chain.keyed, chain.keyed_fields, key_name, on, text))
        except AnalysisException:  # the key needs a column an earlier lookup adds: a pass of its own
            pass
    return (
        _Chain(df, df, fields, (), (), (), fields, len(fields)),
        *_with_key(df, fields, key_name, on, text),
    )


def _with_key(
    frame: DataFrame, fields: Fields, key_name: str, on: str | Column, text: bool
) -> tuple[DataFrame, Fields, int]:
    """``frame`` (of ``fields``) with the key column, its fields and the key's index. A column
    ``on`` names that Spark hands to Arrow as the key already is (string, or binary for a key
    lookup) is used where it is: not copied into a column of its own, the rows cross into Python
    without it twice."""
    names = [field.name for field in fields]
    if isinstance(on, str) and "." not in on and "`" not in on and names.count(on) == 1:
        data_type = fields[names.index(on)].dataType
        if isinstance(data_type, StringType) or (isinstance(data_type, BinaryType) and not text):
            return frame, fields, names.index(on)
    column, key_type = _key_column(frame, on, text)
    return frame.withColumn(key_name, column), (*fields, StructField(key_name, key_type)), len(fields)


def _uncounted_join() -> str:
    return (
        "under Spark Connect a lookup counts values that do not fit value_schema with "
        f"DataFrame.observe, which the PySpark {'.'.join(map(str, PYSPARK_VERSION))} Connect client "
        "lacks (it needs 4.0): pass misfit_column='...' to lookup_join and count the rows it marks"
    )


def _observed(result: DataFrame, infos: tuple[LookupInfo, ...], flags: tuple[str | None, ...]) -> DataFrame:
    """``result`` counting each lookup's misfits in one observation, without the hidden flag columns."""
    observation = new_observation()
    metrics = [
        functions.sum(functions.col(flag).cast("long")).alias(info.lookup_id)
        for info, flag in zip(infos, flags, strict=True)
        if flag is not None
    ]
    result = result.observe(observation, *metrics)
    for info, flag in zip(infos, flags, strict=True):
        if flag is not None and info.observations is not None:
            info.observations.append(observation)
    hidden = [flag for flag in flags if flag is not None and flag.startswith(_HIDDEN_FLAG)]
    return result.drop(*hidden) if hidden else result


@dataclasses.dataclass(frozen=True)
class _Chain:
    """Lookups fused into one task function: the DataFrame before them, with every step's key column,
    and every column the task outputs (hidden misfit flags included)."""

    base: DataFrame
    keyed: DataFrame
    keyed_fields: Fields  # ``keyed``'s columns
    steps: tuple[JoinStep, ...]
    infos: tuple[LookupInfo, ...]
    flags: tuple[str | None, ...]  # each step's misfit flag column, if it has one
    fields: Fields
    kept: int  # the columns of ``base``, which the task passes on

    @property
    def visible(self) -> Fields:
        """The columns of the lookup's result: what the task outputs, less the hidden flags."""
        hidden = {flag for flag in self.flags if flag is not None and flag.startswith(_HIDDEN_FLAG)}
        return tuple(field for field in self.fields if field.name not in hidden)


_CHAIN_ATTRIBUTE = "_statestore_lookup_chain"
_FIELDS_ATTRIBUTE = "_statestore_lookup_fields"  # a broadcast lookup's result: its columns

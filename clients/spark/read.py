"""Read a whole store as a DataFrame, pinned at one position, in parallel key ranges.

``read_store(spark, store="products", value_schema="name string, price double")`` gives a DataFrame
with a key column and the value columns, every row read ``as_of`` one position (the store must keep
history), so a small store can be broadcast, or a store analysed in batch at an exact version. The
keys are split into ranges on the driver; each Spark partition scans its range. On Spark 4.0 and
newer the same read is a Python data source, ``spark.read.format("statestore_http")``
(:func:`register_data_source`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BinaryType, BooleanType, DataType, StringType, StructField, StructType

from clients import wire
from clients.base import ReadAt, Row
from clients.client import StatestoreClient
from clients.exceptions import SchemaMismatchError, StatestoreClientError, ValueDecodeError
from clients.natural_keys import natural_key_texts
from clients.options import ClientOptions
from clients.spark.compat import arrow_schema, parse_struct
from clients.spark.options import client_options
from clients.spark.plan import client_tls, connection
from clients.value_decoding import decode
from clients.whole_store import store_keys
from clients.wire import ValueFormat
from wire.position import Position, PositionLike

log = logging.getLogger("clients.spark")

METADATA_KEY = "statestore"
"""The key column's metadata key: the store and the position the read pinned."""

ROWS_PER_PARTITION = 250_000
"""Rows one partition reads when the caller does not say how many partitions to use."""

MAX_PARTITIONS = 256
SPLIT_WIDTH = 4
"""Bytes after the keys' common prefix that split points are interpolated over."""

KeyRange = tuple[bytes | None, bytes | None]
"""Keys ``k`` with ``after < k <= through`` (``None``: unbounded on that side)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ScanSpec:
    """What a task needs to read key ranges of one store; built on the driver, pickled to tasks."""

    options: ClientOptions
    store: str
    value_format: ValueFormat
    position: str
    exact: bool  # read as_of ``position``, else at least ``position``
    value_type: pa.StructType | None = None
    prefix: bytes = b""
    page_size: int = 1000
    binary_keys: bool = False
    misfit_flag: bool = False
    key_format: str = "bytes"

    def rows(
        self, client: StatestoreClient, after: bytes | None, page_size: int | None = None
    ) -> Iterator[Row]:
        """The store's ``(raw key, value)`` rows after ``after``, byte-ordered, at the read's position.

        Pages are fetched as the caller reaches them, so a caller that stops early reads no further.
        """
        at: ReadAt = {"as_of": self.position} if self.exact else {"min_position": self.position}
        return client.scan(self.store, self.prefix, after=after, page_size=page_size or self.page_size, **at)


def split_points(first_after: Callable[[bytes | None], bytes | None], partitions: int) -> list[bytes]:
    """Up to ``partitions - 1`` increasing keys splitting the store's keys into ranges.

    ``first_after(k)`` is the first key after ``k`` (the first key of all for ``None``). The points
    are spread evenly between the first and (about) the last key, over ``SPLIT_WIDTH`` bytes after
    their common prefix: like a JDBC read split between bounds, ranges hold equal rows only when
    keys are spread evenly. A few dozen one-key probes find the bounds.
    """
    low = first_after(None)
    if partitions <= 1 or low is None:
        return []
    high = _about_the_last_key(first_after, low)
    common = _common_length(low, high)

    def number(key: bytes) -> int:
        return int.from_bytes(key[common : common + SPLIT_WIDTH].ljust(SPLIT_WIDTH, b"\0"), "big")

    first, last = number(low), number(high)
    points = {
        low[:common] + (first + (last - first) * i // partitions).to_bytes(SPLIT_WIDTH, "big")
        for i in range(1, partitions)
    }
    return sorted(p for p in points if p >= low)


def _about_the_last_key(first_after: Callable[[bytes | None], bytes | None], low: bytes) -> bytes:
    """A prefix of the last key (or a key right before it), found byte by byte with one-key probes."""
    known = b""
    while len(known) < _common_length(low, known) + SPLIT_WIDTH:
        if len(known) < len(low) and first_after(low[: len(known) + 1] + b"\xff" * 16) is None:
            known = low[: len(known) + 1]  # the last key goes on like the first one
            continue
        if first_after(known + b"\x00") is None:
            break  # nothing after it but possibly the key known + b"\0" itself
        lowest, highest = 0, 255
        while lowest < highest:  # the greatest next byte that some key after ``known`` goes past
            middle = (lowest + highest + 1) // 2
            if first_after(known + bytes([middle])) is not None:
                lowest = middle
            else:
                highest = middle - 1
        known += bytes([lowest])
    return known


def _common_length(a: bytes, b: bytes) -> int:
    """How many leading bytes ``a`` and ``b`` share."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


def key_ranges(points: Sequence[bytes]) -> list[KeyRange]:
    """The ranges between split points: everything up to the first, ..., everything after the last."""
    bounds: list[bytes | None] = [None, *points, None]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def read_range(client: StatestoreClient, spec: ScanSpec, key_range: KeyRange) -> Iterator[pa.RecordBatch]:
    """The rows of one key range, page by page, as batches of the read's schema."""
    after, through = key_range
    items: list[tuple[bytes, Any]] = []
    for key, value in spec.rows(client, after):
        assert isinstance(key, bytes)  # the scan's prefix is bytes, so its keys are
        if through is not None and key > through:
            break
        items.append((key, value))
        if len(items) == spec.page_size:
            yield rows_batch(spec, items)
            items = []
    if items:
        yield rows_batch(spec, items)


def rows_batch(spec: ScanSpec, items: list[tuple[bytes, Any]]) -> pa.RecordBatch:
    """Scan items as one batch: key, then the value column(s), then the misfit flag if asked."""
    raw_keys = [key for key, _ in items]
    keys = pa.array(raw_keys, pa.binary())
    if not spec.binary_keys:
        try:
            keys = natural_key_texts(raw_keys, spec.key_format)
        except pa.ArrowInvalid as exc:
            raise ValueDecodeError(
                f"store {spec.store!r} holds keys that are not UTF-8 text; read it with binary_keys=True"
            ) from exc
    stored = pa.array([_stored(value, spec.value_format) for _, value in items], pa.binary())
    values, misfit = decode(stored, spec.value_format, spec.value_type)
    count = pc.sum(misfit).as_py() or 0
    if count:
        log.warning("%d value(s) of store %r do not fit value_schema; they are null", count, spec.store)
    columns = [keys, *(values.flatten() if spec.value_type is not None else [values])]
    if spec.misfit_flag:
        columns.append(misfit)
    return pa.RecordBatch.from_arrays(columns, names=[str(i) for i in range(len(columns))])


def _stored(value: Any, value_format: ValueFormat) -> bytes | None:
    """A scanned value (decoded by the client) back as the stored bytes (what a batch get answers)."""
    if value is None:
        return None
    if value_format == "json":
        return json.dumps(value, separators=(",", ":")).encode()
    return value if isinstance(value, bytes) else str(value).encode()


def scan_task(
    spec: ScanSpec, ranges: Sequence[KeyRange], names: list[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: each input row is the number of a key range to read."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with StatestoreClient(spec.options) as client:
            for batch in batches:
                for number in batch.column(0).to_pylist():
                    for rows in read_range(client, spec, ranges[number]):
                        yield pa.RecordBatch.from_arrays(rows.columns, names=names)

    return run


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    spec: ScanSpec
    ranges: list[KeyRange]
    schema: StructType


def plan_read(
    options: ClientOptions,
    *,
    store: str,
    value_schema: StructType | None,
    position: PositionLike | None,
    consistent: bool,
    partitions: int | None,
    prefix: bytes,
    page_size: int,
    key_column: str,
    binary_keys: bool,
    value_column: str,
    misfit_column: str | None,
) -> ReadPlan:
    """Check the store, pin the position, split the keys: everything a read needs, on the driver."""
    with StatestoreClient(options) as client:
        try:
            info = client.store(store)
        except StatestoreClientError as exc:
            exc.add_note(f"statestore read of store {store!r} at {options.url}: checked on the driver")
            raise
        if value_schema is not None and info.value_format != "json":
            raise SchemaMismatchError(
                f"store {store!r} holds {info.value_format} values; value_schema applies to JSON stores only"
            )
        pinned = Position.of(position) if position is not None else info.position
        arrow_type = pa.struct(list(arrow_schema(value_schema))) if value_schema is not None else None
        spec = ScanSpec(
            options, store, info.value_format, str(pinned), consistent, arrow_type, prefix, page_size,
            binary_keys, misfit_column is not None, info.key_format,
        )  # fmt: skip
        try:  # a first page proves the position can be read (history kept, not expired)
            next(iter(spec.rows(client, None, 1)), None)
        except StatestoreClientError as exc:
            if consistent:
                exc.add_note(
                    f"read_store reads store {store!r} exactly as of position {pinned or '(empty)'}, "
                    "which needs the store's history; pass consistent=False to read at least that position"
                )
            raise
        if partitions is None:
            keys = store_keys(info.raw) or 0
            partitions = min(MAX_PARTITIONS, max(1, math.ceil(keys / ROWS_PER_PARTITION)))

        def first_after(key: bytes | None) -> bytes | None:
            first = next(iter(client.scan(store, prefix, after=key, page_size=1)), None)
            return None if first is None else wire.key_bytes(first[0])

        ranges = key_ranges(split_points(first_after, partitions))
    schema = _read_schema(
        _value_type(value_schema, info.value_format), store, pinned, consistent, key_column,
        binary_keys, value_column, misfit_column,
    )  # fmt: skip
    log.info(
        "read of store %r at %s %s position %s in %d key range(s)",
        store, options.url, "exactly as of" if consistent else "at least at", pinned or "(empty)",
        len(ranges),
    )  # fmt: skip
    return ReadPlan(spec, ranges, schema)


def _read_schema(
    value_type: DataType,
    store: str,
    pinned: Position,
    consistent: bool,
    key_column: str,
    binary_keys: bool,
    value_column: str,
    misfit_column: str | None,
) -> StructType:
    """The read's columns: the key (its metadata says what was read), the values, the misfit flag."""
    described: dict[str, Any] = {"store": store, "position": str(pinned)}
    if consistent:
        described["as_of"] = str(pinned)  # read again with position= this to get the same rows
    key_type = BinaryType() if binary_keys else StringType()
    fields = [StructField(key_column, key_type, False, {METADATA_KEY: described})]
    if isinstance(value_type, StructType):
        fields += [StructField(f.name, f.dataType, True) for f in value_type.fields]
    else:
        fields.append(StructField(value_column, value_type, True))
    if misfit_column is not None:
        fields.append(StructField(misfit_column, BooleanType(), True))
    return StructType(fields)


def _value_type(value_schema: StructType | None, value_format: str) -> DataType:
    if value_schema is not None:
        return value_schema
    return BinaryType() if value_format == "bytes" else StringType()


def read_store(
    spark: SparkSession,
    *,
    store: str,
    url: str | None = None,
    value_schema: str | StructType | None = None,
    position: PositionLike | None = None,
    consistent: bool = True,
    partitions: int | None = None,
    prefix: str | bytes = b"",
    token: str | None = None,
    verify: bool | str = True,
    cert: str | tuple[str, str] | None = None,
    page_size: int = 1000,
    key_column: str = "key",
    binary_keys: bool = False,
    value_column: str = "value",
    misfit_column: str | None = None,
    timeout: float = 30.0,
    deadline: float = 300.0,
) -> DataFrame:
    """Every row of ``store`` (whose key starts with ``prefix``) as a DataFrame, read at one position.

    Columns: ``key_column`` (text: a ``long`` or ``int`` key as its decimal text; binary with
    ``binary_keys``), then the fields of
    ``value_schema`` (a JSON store), else one ``value_column`` (string, or binary for bytes stores);
    values that do not fit the schema are null (``misfit_column=`` marks them). ``position``
    defaults to the store's position now; with ``consistent`` (the default) every page is read
    exactly ``as_of`` it, so the DataFrame is one version of the table however often and wherever
    it is computed (the store must keep history); ``consistent=False`` reads at least that position.
    The keys are split into ``partitions`` ranges (default: one per 250,000 keys), one Spark
    partition each. ``url``, ``token``, ``verify`` and ``cert`` default to the session's Spark conf,
    as for lookups.
    """
    url, token = connection(spark, url, token)
    checked, chosen = client_tls(spark, verify, cert)
    plan = plan_read(
        client_options(url, token, checked, timeout, deadline, chosen),
        store=store,
        value_schema=parse_struct(spark, value_schema) if isinstance(value_schema, str) else value_schema,
        position=position,
        consistent=consistent,
        partitions=partitions,
        prefix=wire.key_bytes(prefix),
        page_size=page_size,
        key_column=key_column,
        binary_keys=binary_keys,
        value_column=value_column,
        misfit_column=misfit_column,
    )
    count = len(plan.ranges)
    numbers = spark.range(0, count, 1, count)
    return numbers.mapInArrow(scan_task(plan.spec, plan.ranges, plan.schema.fieldNames()), plan.schema)

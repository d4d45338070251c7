"""A small store joined the way Spark joins a small table: read whole on the driver, broadcast.

A lookup join takes every row through a Python worker (``mapInArrow``): a task's rows go from the
JVM to Python as Arrow and back. For a 1M-row input that crossing alone costs about as much as
Spark's whole broadcast join of a 100k-row table, whatever the lookup does in between. Spark
itself broadcasts a table it estimates below ``spark.sql.autoBroadcastJoinThreshold`` (10 MiB by
default). So does a typed lookup of a store that small: when the lookup is planned, the driver
reads the store whole (Arrow scan pages, at the pinned position: at least it, or exactly it for a
consistent or ``as_of`` lookup), decodes the values with the lookup's schema, and hands them to
Spark as a local relation joined with a broadcast hint. The rows never leave the JVM.

The answers are the same as the per-row lookup's: a left (or inner) join on the key's bytes, one
row per input row (a store holds a key once), the value columns typed and named alike, each store
key compared as the bytes a lookup would ask for. The stored keys take the type of the row's key
(a string, or binary), so the rows are joined on their own key column, not a converted copy of
it: a string compares by its UTF-8 bytes, the stored keys are those bytes as they are. Only a
store whose values all fit the schema is broadcast, so its misfit count is known to be zero; any
misfit, a natural key format, an index, a read by time or a misfit column takes the per-row path.
The driver keeps the read for the next plans at the same copy and position
(:mod:`clients.spark.plan_cache`), so a job run again while the store has not moved reads nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession, functions
from pyspark.sql.types import (
    BinaryType,
    StringType,
    StructField,
    StructType,
)

from clients.client import StatestoreClient
from clients.lookup import LookupSpec, decoded
from clients.spark.local_tables import kept_frame
from clients.whole_store import read_whole

log = logging.getLogger("clients.spark")

DEFAULT_BROADCAST_BYTES = 10 * 1024 * 1024
"""Stored bytes (keys and JSON values) up to which a typed lookup broadcasts the store: the default of
Spark's own ``spark.sql.autoBroadcastJoinThreshold``."""

BROADCAST_KEY_FORMATS = ("bytes", "string")
"""Key formats whose stored key is the bytes of the key a row asks for (its UTF-8 text, or binary)."""


class Dimension:
    """A store read whole: its keys as stored (binary) and their decoded values, row for row; and
    the DataFrames made of them, one per session and column names, kept by Spark.

    Each DataFrame is one Spark keeps (:mod:`clients.spark.local_tables`): later jobs (a DataFrame
    collected again, a lookup planned again at the same position) broadcast the rows Spark holds,
    not the table again. Spark frees them once the DataFrame is dropped (with this object, when
    the driver's kept reads drop it, and with every DataFrame joined with it).
    """

    def __init__(self, keys: pa.Array, values: pa.Array) -> None:
        self.keys = keys
        self.values = values
        self.name = uuid.uuid4().hex[:12]
        self._frames: dict[tuple[int, str], tuple[SparkSession, DataFrame]] = {}
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.values.nbytes)

    @property
    def key_name(self) -> str:
        return f"__statestore_dimension_{self.name}"

    def frame(
        self, session: SparkSession, added: Sequence[StructField], text_keys: bool = False
    ) -> DataFrame:
        """This store as a DataFrame of ``session``: the key (binary, or ``text_keys`` a string of
        the same bytes) then the ``added`` columns."""
        key_type = StringType() if text_keys else BinaryType()
        schema = StructType(
            [StructField(self.key_name, key_type, False)]
            + [StructField(f.name, f.dataType, True) for f in added]
        )
        key = (id(session), schema.json())
        with self._lock:
            kept = self._frames.get(key)
            if kept is not None and kept[0] is session:
                return kept[1]
            values = self.values
            columns = values.flatten() if isinstance(values, pa.StructArray) else [values]
            keys = _as_text(self.keys) if text_keys else self.keys
            table = pa.Table.from_arrays([keys, *columns], names=schema.fieldNames())
            frame = kept_frame(session, table, schema)
            self._frames[key] = (session, frame)
            return frame


def _as_text(keys: pa.Array) -> pa.Array:
    """Binary keys as strings of the same bytes, unchecked: Spark compares strings by their bytes,
    so a key that is not UTF-8 still equals (only) a row key of the same bytes."""
    text = pa.large_string() if pa.types.is_large_binary(keys.type) else pa.string()
    return keys.view(text)


def estimated_bytes(store_keys: int, keys_and_documents: Sequence[tuple[Any, Any]]) -> int | None:
    """The store's stored keys and JSON values in bytes, estimated from a sample of them."""
    if not keys_and_documents:
        return None
    sampled = sum(
        len(str(key).encode()) + len(json.dumps(document, separators=(",", ":")).encode())
        for key, document in keys_and_documents
    )
    return store_keys * sampled // len(keys_and_documents)


def read_dimension(
    client: StatestoreClient,
    spec: LookupSpec,
    store_keys: int | None,
    sample: Sequence[tuple[Any, Any]],
    max_bytes: int,
) -> Dimension | None:
    """``spec``'s store read whole and decoded, when a sample of it says it fits ``max_bytes`` and
    every value fits the schema; ``None`` otherwise (the reason logged): the per-row path."""
    if max_bytes <= 0 or store_keys is None or spec.value_type is None:
        return None
    estimate = estimated_bytes(store_keys, sample)
    if estimate is None or estimate > max_bytes:
        return None

    with ThreadPoolExecutor(1, thread_name_prefix="statestore-broadcast") as threads:
        whole = read_whole(
            client, spec.store, spec.min_position, spec.as_of, max_bytes, partial(decoded, spec), threads
        )
    if whole is None:
        return None
    keys, (values, _, misfit) = whole
    misfits = pc.sum(misfit).as_py() or 0
    if misfits:
        log.info(
            "store %r has %d values that do not fit value_schema: looked up row by row, where they "
            "are counted", spec.store, misfits,
        )  # fmt: skip
        return None
    return Dimension(keys, values)


def broadcast_join(
    df: DataFrame,
    before: Sequence[StructField],
    key: Column,
    text_key: bool,
    dimension: Dimension,
    added: Sequence[StructField],
    how: str,
) -> DataFrame:
    """``df`` (of columns ``before``) joined on ``key`` (its key as the lookup asks it: a string
    compared by its bytes when ``text_key``, else binary) with ``dimension`` broadcast, the
    ``added`` value columns appended (with their metadata)."""
    small = dimension.frame(df.sparkSession, added, text_keys=text_key)
    on = key == functions.col(dimension.key_name)
    joined = df.join(functions.broadcast(small), on, how)
    return joined.select(
        *(_column(field.name) for field in before),
        *(_column(field.name).alias(field.name, metadata=field.metadata) for field in added),
    )


def _column(name: str) -> Column:
    return functions.col("`" + name.replace("`", "``") + "`")

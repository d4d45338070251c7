"""``spark.read.format("statestore_http")``: a store as a Python data source (PySpark 4.0 and newer).

The name is not plain ``statestore``: Spark itself owns that format (its State Data Source, which
reads the state of streaming queries) and a built-in format always wins over a Python data source.
Register it with :func:`clients.spark.register_data_source`, then::

    spark.read.format("statestore_http").option("store", "products")
        .schema("key string, name string, price double").load()

Options: ``store`` (required), ``url`` and ``token`` (default: the session's ``spark.statestore.*``
conf when registered), ``authFile``, ``position`` (default: the store's position at planning),
``consistent`` (``true``: read exactly as of the position, the default), ``partitions``, ``prefix``,
``pageSize``, ``binaryKeys``. Without ``.schema(...)`` the columns are ``key`` and ``value`` (the
stored document as text, or bytes); with it, the first column is the key and the others are fields
of the JSON values (a single string or binary column named ``value`` is the whole stored value).
The same planning and range reads as :func:`clients.spark.read_store`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from clients.client import StatestoreClient
from clients.spark.options import client_options
from clients.spark.read import KeyRange, ReadPlan, plan_read, read_range

_TRUE = ("true", "1", "yes")
FORMAT = "statestore_http"


class KeyRangePartition(InputPartition):
    """One key range of the read."""

    def __init__(self, key_range: KeyRange) -> None:
        super().__init__(key_range)
        self.key_range = key_range


class StatestoreDataSource(DataSource):
    """A statestore store, read at one position in parallel key ranges."""

    defaults: ClassVar[dict[str, str]] = {}

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _option(self, name: str, default: str | None = None) -> str | None:
        options: Any = self.options
        value = options.get(name)
        return str(value) if value is not None else self.defaults.get(name, default)

    def schema(self) -> StructType:
        binary = (self._option("binaryKeys", "false") or "").lower() in _TRUE
        with StatestoreClient(self._client_options()) as client:
            value_format = client.value_format(self._store())
        return StructType(
            [
                StructField("key", BinaryType() if binary else StringType(), True),
                StructField("value", BinaryType() if value_format == "bytes" else StringType(), True),
            ]
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        return StatestoreReader(self, schema)

    def _store(self) -> str:
        store = self._option("store")
        if not store:
            raise ValueError('the statestore data source needs .option("store", "<store name>")')
        return store

    def _client_options(self) -> Any:
        url = self._option("url")
        if not url:
            raise ValueError(
                'the statestore data source needs .option("url", ...) or spark.statestore.url in the '
                "Spark conf when register_data_source() is called"
            )
        token = self._option("token")
        token_file = self._option("authFile")
        if token is None and token_file is not None:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        return client_options(url, token, True, 30.0, 300.0)

    def plan(self, schema: StructType) -> ReadPlan:
        """Check the store, pin the position and split the keys, for ``schema``'s columns."""
        key_field, *value_fields = schema.fields
        binary = isinstance(key_field.dataType, BinaryType)
        whole = [(f.name, type(f.dataType)) for f in value_fields] in (
            [("value", StringType)],
            [("value", BinaryType)],
        )
        value_schema = None if whole else StructType(value_fields)
        partitions = self._option("partitions")
        return plan_read(
            self._client_options(),
            store=self._store(),
            value_schema=value_schema,
            position=self._option("position"),
            consistent=(self._option("consistent", "true") or "").lower() in _TRUE,
            partitions=int(partitions) if partitions else None,
            prefix=(self._option("prefix", "") or "").encode(),
            page_size=int(self._option("pageSize", "1000") or 1000),
            key_column=key_field.name,
            binary_keys=binary,
            value_column=value_fields[0].name if value_fields else "value",
            misfit_column=None,
        )


class StatestoreReader(DataSourceReader):
    """Plans once (the position is pinned when the query is planned), then reads one range a task."""

    def __init__(self, source: StatestoreDataSource, schema: StructType) -> None:
        self.plan = source.plan(schema)

    def partitions(self) -> Sequence[InputPartition]:
        return [KeyRangePartition(key_range) for key_range in self.plan.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        names = self.plan.schema.fieldNames()
        assert isinstance(partition, KeyRangePartition)
        with StatestoreClient(self.plan.spec.options) as client:
            for rows in read_range(client, self.plan.spec, partition.key_range):
                yield pa.RecordBatch.from_arrays(rows.columns, names=names)

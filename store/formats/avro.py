"""Avro values written by Confluent's ``AvroSerializer``, decoded with fastavro into JSON.

Every record is answered in one shape: the fields of the subject's latest registered version, by
name (a field the record's own schema lacks is ``null``, one the latest lacks is dropped), so
records written under older and newer versions read alike. Types in JSON: records and maps are
objects, arrays arrays, enums their symbol, unions the branch's value, ``bytes`` and ``fixed``
standard base64, ``decimal`` a string of the exact number, ``date`` ``YYYY-MM-DD``,
``time-*`` ``HH:MM:SS[.ffffff]``, ``timestamp-*`` RFC 3339 in UTC, ``uuid`` its text.
"""

from __future__ import annotations

import base64
import decimal
import io
import json
import struct
from collections.abc import Sequence
from typing import Any

import fastavro
import orjson

from store.formats.bad import UndecodableValues
from store.formats.errors import ShapeChangedError, UnknownSchemaError
from store.formats.schemas import SchemaSource

_HEADER = struct.Struct(">bI")  # magic byte 0, schema id


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


class AvroValues:
    """The ``ValueCodec`` of an ``avro`` store: Confluent-framed Avro to stored JSON documents."""

    def __init__(self, schemas: SchemaSource, store: str) -> None:
        self._schemas = schemas
        self._store = store
        self._parsed: dict[int, Any] = {}
        self._fields: list[str] | None = None
        # Schema ids whose records have the latest version's fields, in its order: their decoded
        # records are in the answered shape already (the common case: no copy per record).
        self._in_shape: set[int] = set()
        self._latest_id: int | None = None
        self._bad = UndecodableValues(store)

    def decode(self, values: Sequence[bytes | None]) -> list[bytes | None]:
        if self._fields is None:
            self._take_latest(self._schemas.latest())
        return [None if value is None else self._one(value) for value in values]

    def _take_latest(self, latest: tuple[int, dict[str, Any]] | None) -> None:
        if latest is None:
            return
        schema_id, document = latest
        parsed = json.loads(document["schema"])
        if isinstance(parsed, dict) and parsed.get("type") == "record":
            self._fields = [field["name"] for field in parsed["fields"]]
        self._in_shape = {i for i, writer in self._parsed.items() if self._has_latest_fields(writer)}
        self._latest_id = schema_id

    def _writer(self, schema_id: int) -> Any:
        parsed = self._parsed.get(schema_id)
        if parsed is None:
            document = self._schemas.schema(schema_id)  # raises while the registry is unavailable
            parsed = fastavro.parse_schema(json.loads(document["schema"]))
            self._parsed[schema_id] = parsed
            if self._has_latest_fields(parsed):
                self._in_shape.add(schema_id)
            if self._latest_id is None or schema_id > self._latest_id:
                # A version newer than the latest known: the shape follows it.
                before = self._fields
                self._take_latest(self._schemas.latest(refresh=True))
                if before is not None and self._fields != before:
                    raise ShapeChangedError(
                        f"schema id {schema_id} made the latest version of {self._schemas.subject}"
                        f" change its fields ({', '.join(self._fields or [])}): every value is decoded"
                        " again in the new shape"
                    )
        return parsed

    def _one(self, value: bytes) -> bytes:
        if len(value) < _HEADER.size or value[0] != 0:
            return self._bad.mark(
                "value-undecodable", f"not Confluent-framed Avro (magic byte {value[:1].hex() or 'missing'})"
            )
        _, schema_id = _HEADER.unpack_from(value)
        try:
            writer = self._writer(schema_id)
        except UnknownSchemaError as exc:
            return self._bad.mark("unknown-schema", str(exc))
        try:
            record = fastavro.schemaless_reader(io.BytesIO(value[_HEADER.size :]), writer, None)
        except Exception as exc:  # fastavro raises many kinds on corrupt input
            return self._bad.mark(
                "value-undecodable",
                f"bytes do not decode under schema id {schema_id}: {type(exc).__name__}: {exc}",
            )
        fields = self._fields
        if fields is not None and isinstance(record, dict) and schema_id not in self._in_shape:
            record = {name: record.get(name) for name in fields}
        try:
            return orjson.dumps(record, default=_json_default)
        except TypeError as exc:
            return self._bad.mark("value-undecodable", f"the decoded record has no JSON form: {exc}")

    def _has_latest_fields(self, writer: Any) -> bool:
        """Whether records of the ``writer`` schema have the latest version's fields, in order."""
        if self._fields is None or not isinstance(writer, dict) or writer.get("type") != "record":
            return False
        return [field["name"] for field in writer["fields"]] == self._fields

    def worker_codec(self) -> AvroValues:
        self._schemas.warm()
        self._fields, self._latest_id, self._in_shape = None, None, set()
        return AvroValues(self._schemas, self._store)

    def count_undecodable(self, count: int, example: str | None) -> None:
        self._bad.add(count, example)

    @property
    def undecodable_count(self) -> int:
        return self._bad.count

    @property
    def last_undecodable(self) -> str | None:
        return self._bad.last_reason

"""JSON Schema values written by Confluent's ``JSONSerializer``: the framing (magic byte, schema
id) checked against the registry, the JSON document kept as it is.

The serializer validated each document against its schema before writing it, so the store checks
only that the schema id is one the registry knows and that the payload is one JSON document.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import orjson

from store.formats.bad import UndecodableValues
from store.formats.errors import UnknownSchemaError
from store.formats.schemas import SchemaSource

_HEADER = struct.Struct(">bI")


class JsonSchemaValues:
    """The ``ValueCodec`` of a ``json_schema`` store: Confluent-framed JSON to stored JSON."""

    def __init__(self, schemas: SchemaSource, store: str) -> None:
        self._schemas = schemas
        self._store = store
        self._known: set[int] = set()
        self._latest_id: int | None = None
        self._bad = UndecodableValues(store)

    def decode(self, values: Sequence[bytes | None]) -> list[bytes | None]:
        return [None if value is None else self._one(value) for value in values]

    def _saw(self, schema_id: int) -> None:
        """Keep the subject's latest version current (answers type their values by it)."""
        self._known.add(schema_id)
        if self._latest_id is None or schema_id > self._latest_id:
            latest = self._schemas.latest(refresh=self._latest_id is not None)
            self._latest_id = max(schema_id, latest[0]) if latest is not None else schema_id

    def _one(self, value: bytes) -> bytes:
        if len(value) < _HEADER.size or value[0] != 0:
            return self._bad.mark("value-undecodable", "not Confluent-framed JSON (no magic byte 0)")
        _, schema_id = _HEADER.unpack_from(value)
        if schema_id not in self._known:
            try:
                self._schemas.schema(schema_id)  # raises while the registry is unavailable
            except UnknownSchemaError as exc:
                return self._bad.mark("unknown-schema", str(exc))
            self._saw(schema_id)
        payload = value[_HEADER.size :]
        try:
            orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            return self._bad.mark(
                "value-undecodable", f"the payload under schema id {schema_id} is not JSON: {exc}"
            )
        return payload

    def worker_codec(self) -> JsonSchemaValues:
        self._schemas.warm()
        return JsonSchemaValues(self._schemas, self._store)

    def count_undecodable(self, count: int, example: str | None) -> None:
        self._bad.add(count, example)

    @property
    def undecodable_count(self) -> int:
        return self._bad.count

    @property
    def last_undecodable(self) -> str | None:
        return self._bad.last_reason

"""Keys written through the Schema Registry, stored by their natural value (store.formats.keys):
the natural format follows the latest key schema, every version's bytes map to one stored key, a
key that cannot be decoded keeps the producer's bytes, and a change of natural format rebuilds."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Any, cast

import fastavro
import pytest

from store.formats.errors import ShapeChangedError, UnknownSchemaError
from store.formats.keys import RegistryKeys, natural_bytes, natural_format, stored_natural_format
from store.formats.schemas import SchemaSource


class Schemas:
    """The registry's key subject as a ``SchemaSource`` answers it: schemas by id, the latest."""

    subject = "accounts-key"

    def __init__(self, schemas: dict[int, Any]) -> None:
        self.schemas = {i: {"schema": json.dumps(s)} for i, s in schemas.items()}

    def schema(self, schema_id: int) -> dict[str, Any]:
        if schema_id not in self.schemas:
            raise UnknownSchemaError(f"no schema id {schema_id}")
        return self.schemas[schema_id]

    def latest(self, refresh: bool = False) -> tuple[int, dict[str, Any]] | None:
        newest = max(self.schemas)
        return newest, self.schemas[newest]


def avro_key(schema_id: int, schema: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


def codec(schemas: Schemas, directory: Path) -> RegistryKeys:
    return RegistryKeys(cast(SchemaSource, schemas), "avro", "accounts", directory)


def test_every_key_schema_versions_bytes_map_to_the_natural_bytes(tmp_path: Path) -> None:
    v2 = {"type": "long", "doc": "the account number"}
    keys = codec(Schemas({1: "long", 2: v2}), tmp_path)
    stored = keys.decode([avro_key(1, "long", 42), avro_key(2, v2, 42), avro_key(2, v2, -1)])
    assert stored == [struct.pack(">q", 42), struct.pack(">q", 42), struct.pack(">q", -1)]
    assert stored_natural_format(tmp_path) == "long"


def test_a_key_that_cannot_be_decoded_keeps_the_producers_bytes(tmp_path: Path) -> None:
    keys = codec(Schemas({1: "string"}), tmp_path)
    unknown, unframed = b"\x00\x00\x00\x00\x09\x02a", b"plain"
    assert keys.decode([avro_key(1, "string", "ab"), unknown, unframed]) == [b"ab", unknown, unframed]
    assert keys.undecodable_count == 2


def test_a_new_natural_format_rebuilds_and_is_kept_across_restarts(tmp_path: Path) -> None:
    schemas = Schemas({1: "int"})
    keys = codec(schemas, tmp_path)
    assert keys.decode([avro_key(1, "int", 7)]) == [struct.pack(">i", 7)]
    schemas.schemas[2] = {"schema": json.dumps("string")}
    with pytest.raises(ShapeChangedError, match="strings, not ints"):
        keys.decode([avro_key(2, "string", "7")])
    # Decided now: the rebuild stores every key as a string, an older one as its decimal text.
    assert keys.decode([avro_key(1, "int", 7), avro_key(2, "string", "x")]) == [b"7", b"x"]
    # After a restart the stored keys' format is known before any key is decoded again.
    restarted = codec(Schemas({1: "int"}), tmp_path)
    with pytest.raises(ShapeChangedError):
        restarted.decode([avro_key(1, "int", 7)])


def test_natural_formats_and_bytes_of_each_schema_kind() -> None:
    assert natural_format("json_schema", {"schema": json.dumps({"type": "integer"})}) == "long"
    assert natural_format("json_schema", {"schema": json.dumps({"type": "object"})}) == "string"
    assert (
        natural_format("avro", {"schema": json.dumps({"type": "record", "name": "K", "fields": []})})
        == "string"
    )
    assert natural_bytes({"region": "eu", "id": 4}, "string") == b'{"id":4,"region":"eu"}'
    with pytest.raises(ValueError, match="out of the range"):
        natural_bytes(2**31, "int")
    with pytest.raises(ValueError, match="no long"):
        natural_bytes(True, "long")

"""Keys written with Confluent's serializers (Avro, Protobuf, JSON Schema), stored by their natural value.

A producer's key bytes hold a magic byte, the schema id and the payload, so the same customer ``42``
has other bytes under every version of the key subject, and an Avro string's bytes start with its
length (no prefix scan could work on them). At ingest the store therefore decodes every key and
keeps the record under the key's *natural bytes*: what Kafka's plain serializers write for that
value. The subject's latest key schema decides the natural key format the store answers in:

- an integer (Avro ``long``/``int``, a Protobuf message of one integer field, a JSON Schema
  ``integer``): ``long`` (``int`` for Avro ``int`` and 32-bit Protobuf fields), 8 (4) bytes big-endian;
- anything else: ``string``, the UTF-8 text of a string key, the decimal text of a number, and for a
  record, message or object the compact JSON of its fields with the names sorted.

Keys written under older and newer key schema versions of one natural value are one stored key:
the latest write across the schema ids answers (``store.table.winners``). A key that cannot be
decoded is kept under the producer's bytes as they are (readable with ``key_encoding=base64``),
counted and logged.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fastavro
import orjson
from confluent_kafka.schema_registry.common.serde import SchemaId
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

from store.formats.errors import ShapeChangedError, UnknownSchemaError
from store.formats.schemas import SchemaSource

logger = logging.getLogger("store.formats")

_HEADER = struct.Struct(">bI")
_PACKERS = {"long": struct.Struct(">q"), "int": struct.Struct(">i")}
NATURAL_FILE = "natural-key-format"
"""The file of a store's key schemas directory naming the natural key format it stores keys in."""

_PROTOBUF_INT32 = {
    descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    descriptor_pb2.FieldDescriptorProto.TYPE_SINT32,
    descriptor_pb2.FieldDescriptorProto.TYPE_SFIXED32,
}
_PROTOBUF_INT64 = {
    descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    descriptor_pb2.FieldDescriptorProto.TYPE_SINT64,
    descriptor_pb2.FieldDescriptorProto.TYPE_SFIXED64,
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
    descriptor_pb2.FieldDescriptorProto.TYPE_FIXED32,
}


def _file(document: dict[str, Any]) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    proto.ParseFromString(base64.standard_b64decode(document["schema"]))
    return proto


def natural_format(key_format: str, document: dict[str, Any]) -> str:
    """The natural key format (``long``, ``int`` or ``string``) of keys under schema ``document``."""
    if key_format == "protobuf":
        messages = _file(document).message_type
        fields = messages[0].field if messages else []
        if len(fields) == 1 and fields[0].type in _PROTOBUF_INT32:
            return "int"
        return "long" if len(fields) == 1 and fields[0].type in _PROTOBUF_INT64 else "string"
    try:
        parsed = json.loads(document["schema"])
    except (ValueError, KeyError, TypeError):
        return "string"
    kind = parsed.get("type") if isinstance(parsed, dict) else parsed
    if key_format == "json_schema":
        return "long" if kind == "integer" else "string"
    return kind if kind in ("long", "int") else "string"


def stored_natural_format(schemas_dir: Path) -> str | None:
    """The natural key format a store keeps its keys in (``None``: no key decoded yet)."""
    try:
        text = (schemas_dir / NATURAL_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text if text in ("long", "int", "string") else None


def natural_bytes(value: Any, natural: str) -> bytes:
    """The stored bytes of a decoded key ``value`` in the ``natural`` format (``ValueError``: none)."""
    packer = _PACKERS.get(natural)
    if packer is not None:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"a {type(value).__name__} is no {natural}")
        try:
            return packer.pack(int(value))
        except struct.error as exc:
            raise ValueError(f"{value} is out of the range of a {natural}") from exc
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value).encode("ascii")
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def schema_id(key: bytes | None) -> int | None:
    """The key schema id a producer's Confluent-framed key bytes name (``None``: not framed)."""
    if key is None or len(key) < _HEADER.size or key[0] != 0:
        return None
    return int(_HEADER.unpack_from(key)[1])


class RegistryKeys:
    """Producer's key bytes to natural bytes, for a store whose ``key_format`` is ``avro``,
    ``protobuf`` or ``json_schema`` (same ``decode`` as a ``ValueCodec``, so ingest waits alike)."""

    def __init__(self, schemas: SchemaSource, key_format: str, store: str, schemas_dir: Path) -> None:
        self._schemas = schemas
        self._format = key_format
        self._store = store
        self._dir = schemas_dir
        self._readers: dict[int, Any] = {}
        # As decided before a restart: keys already stored are in it, so a change still rebuilds.
        self._natural: str | None = stored_natural_format(schemas_dir)
        self._latest_id: int | None = None
        self._lock = threading.Lock()
        self.undecodable_count = 0

    def decode(self, values: Sequence[bytes | None]) -> list[bytes | None]:
        return [None if key is None else self._one(key) for key in values]

    def _take_latest(self, fallback: dict[str, Any]) -> None:
        latest = self._schemas.latest(refresh=self._latest_id is not None)
        schema_id, document = latest if latest is not None else (None, fallback)
        natural, before = natural_format(self._format, document), self._natural
        self._latest_id = schema_id
        if natural != before:
            self._natural = natural
            self._dir.mkdir(parents=True, exist_ok=True)
            (self._dir / NATURAL_FILE).write_text(natural, encoding="utf-8")
        if before is not None and natural != before:
            raise ShapeChangedError(
                f"the latest key schema of {self._schemas.subject} makes keys {natural}s, not"
                f" {before}s: every key is stored again in the new format"
            )

    def _reader(self, schema_id: int) -> Any:
        reader = self._readers.get(schema_id)
        if reader is None:
            document = self._schemas.schema(schema_id)  # raises while the registry is unavailable
            reader = self._readers[schema_id] = self._parse(document)
            if self._natural is None or self._latest_id is None or schema_id > self._latest_id:
                self._take_latest(document)
        return reader

    def _parse(self, document: dict[str, Any]) -> Any:
        if self._format == "avro":
            return fastavro.parse_schema(json.loads(document["schema"]))
        if self._format == "protobuf":
            pool = descriptor_pool.DescriptorPool()
            proto = _file(document)
            pool.Add(proto)
            return pool, proto
        return None

    def _one(self, key: bytes) -> bytes:
        try:
            value, schema_id = self._value(key)
        except UnknownSchemaError as exc:
            return self._keep(key, str(exc))
        except (ValueError, EOFError, IndexError, struct.error) as exc:
            return self._keep(key, f"{type(exc).__name__}: {exc}")
        try:
            assert self._natural is not None
            return natural_bytes(value, self._natural)
        except ValueError as exc:
            return self._keep(key, f"under schema id {schema_id}: {exc}")

    def _value(self, key: bytes) -> tuple[Any, int]:
        """The decoded key and its schema id (``ValueError`` and kin: not a key of the format)."""
        if self._format == "protobuf":
            framing = SchemaId("PROTOBUF")
            try:
                message = framing.from_bytes(io.BytesIO(key)).read()
            except Exception as exc:  # a short or unframed key
                raise ValueError(f"not Confluent-framed Protobuf: {exc}") from exc
            assert framing.id is not None
            pool, proto = self._reader(framing.id)
            return _protobuf_key(pool, proto, framing.message_indexes or [0], message), framing.id
        if len(key) < _HEADER.size or key[0] != 0:
            raise ValueError(f"not Confluent-framed (magic byte {key[:1].hex() or 'missing'})")
        _, schema_id = _HEADER.unpack_from(key)
        reader = self._reader(schema_id)
        payload = key[_HEADER.size :]
        if self._format == "avro":
            try:
                return fastavro.schemaless_reader(io.BytesIO(payload), reader, None), schema_id
            except Exception as exc:  # fastavro raises many kinds on corrupt input
                raise ValueError(f"bytes do not decode under schema id {schema_id}: {exc}") from exc
        return orjson.loads(payload), schema_id

    def _keep(self, key: bytes, reason: str) -> bytes:
        with self._lock:
            self.undecodable_count += 1
            count = self.undecodable_count
        if count == 1 or count % 1000 == 0:
            logger.error(
                'store "%s": a %s key cannot be decoded (%s); its record is kept under the producer\'s'
                " bytes (read it with key_encoding=base64); %d so far",
                self._store,
                self._format,
                reason,
                count,
            )
        return key


def _protobuf_key(
    pool: descriptor_pool.DescriptorPool,
    proto: descriptor_pb2.FileDescriptorProto,
    indexes: Sequence[int],
    payload: bytes,
) -> Any:
    """A Protobuf key message: its one field's value, or its fields as a dict."""
    messages: Any = proto.message_type
    names = []
    for index in indexes:
        names.append(messages[index].name)
        messages = messages[index].nested_type
    name = ".".join([proto.package, *names] if proto.package else names)
    message = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))()
    try:
        message.ParseFromString(payload)
    except Exception as exc:  # protobuf raises DecodeError and kin
        raise ValueError(f"bytes do not decode as {name}: {exc}") from exc
    fields = message.DESCRIPTOR.fields
    if len(fields) == 1:
        return getattr(message, fields[0].name)
    return json_format.MessageToDict(message, preserving_proto_field_name=True)

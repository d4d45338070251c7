"""Protobuf values written by Confluent's ``ProtobufSerializer``, decoded with protobuf's own
runtime into JSON (``json_format.MessageToDict``, field names as in the ``.proto``).

The framing (magic byte, schema id, message indexes) is read by confluent-kafka's ``SchemaId``;
the schema comes from the registry as a serialized ``FileDescriptorProto``. Every record is answered
in one shape: the fields of the same-named message of the subject's latest version (missing ones
``null``). Types in JSON follow protobuf's JSON mapping: 64-bit integers as strings, ``bytes``
base64, enums their name, ``Timestamp`` RFC 3339, maps objects, unset scalars their default.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

import orjson
from confluent_kafka.schema_registry.common.serde import SchemaId
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

from store.formats.bad import UndecodableValues
from store.formats.errors import ShapeChangedError, UnknownSchemaError
from store.formats.schemas import SchemaSource


def _file(document: dict[str, Any]) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    proto.ParseFromString(base64.standard_b64decode(document["schema"]))
    return proto


def _message_name(proto: descriptor_pb2.FileDescriptorProto, indexes: Sequence[int]) -> str:
    """The full name of the message the Confluent message indexes point at."""
    messages: Any = proto.message_type
    names = []
    for index in indexes or [0]:
        message = messages[index]
        names.append(message.name)
        messages = message.nested_type
    return ".".join([proto.package, *names] if proto.package else names)


class ProtobufValues:
    """The ``ValueCodec`` of a ``protobuf`` store."""

    def __init__(self, schemas: SchemaSource, store: str) -> None:
        self._schemas = schemas
        self._store = store
        self._pools: dict[int, tuple[descriptor_pool.DescriptorPool, descriptor_pb2.FileDescriptorProto]] = {}
        self._latest: descriptor_pb2.FileDescriptorProto | None = None
        self._latest_id: int | None = None
        self._shapes: dict[str, list[str]] = {}
        self._bad = UndecodableValues(store)

    def decode(self, values: Sequence[bytes | None]) -> list[bytes | None]:
        if self._latest_id is None:
            self._take_latest(self._schemas.latest())
        return [None if value is None else self._one(value) for value in values]

    def _take_latest(self, latest: tuple[int, dict[str, Any]] | None) -> None:
        if latest is not None:
            self._latest_id, self._latest = latest[0], _file(latest[1])
            self._shapes = {}

    def _shape(self, name: str) -> list[str] | None:
        """The field names of message ``name`` in the latest version (``None``: not in it)."""
        if name not in self._shapes and self._latest is not None:
            short = name.rsplit(".", 1)[-1]
            for message in self._latest.message_type:
                if message.name == short:
                    self._shapes[name] = [field.name for field in message.field]
        return self._shapes.get(name)

    def _pool(
        self, schema_id: int
    ) -> tuple[descriptor_pool.DescriptorPool, descriptor_pb2.FileDescriptorProto]:
        known = self._pools.get(schema_id)
        if known is None:
            proto = _file(self._schemas.schema(schema_id))  # raises while the registry is unavailable
            pool = descriptor_pool.DescriptorPool()
            pool.Add(proto)
            known = self._pools[schema_id] = (pool, proto)
            if self._latest_id is None or schema_id > self._latest_id:
                before = self._latest
                self._take_latest(self._schemas.latest(refresh=True))
                if before is not None and self._latest is not None and before != self._latest:
                    raise ShapeChangedError(
                        f"schema id {schema_id} made a new latest version of {self._schemas.subject}:"
                        " every value is decoded again in its shape"
                    )
        return known

    def _one(self, value: bytes) -> bytes:
        framing = SchemaId("PROTOBUF")
        try:
            payload = framing.from_bytes(io.BytesIO(value))
        except Exception as exc:  # a short or unframed value
            return self._bad.mark("value-undecodable", f"not Confluent-framed Protobuf: {exc}")
        assert framing.id is not None
        try:
            pool, proto = self._pool(framing.id)
        except UnknownSchemaError as exc:
            return self._bad.mark("unknown-schema", str(exc))
        try:
            name = _message_name(proto, framing.message_indexes or [])
            message = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))()
            message.ParseFromString(payload.read())
            record = json_format.MessageToDict(
                message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )
        except Exception as exc:  # protobuf raises several kinds on corrupt input
            why = f"{type(exc).__name__}: {exc}"
            return self._bad.mark(
                "value-undecodable", f"bytes do not decode under schema id {framing.id}: {why}"
            )
        shape = self._shape(name)
        if shape is not None:
            record = {field: record.get(field) for field in shape}
        return orjson.dumps(record)

    def worker_codec(self) -> ProtobufValues:
        self._schemas.warm()
        self._latest, self._latest_id, self._shapes = None, None, {}
        return ProtobufValues(self._schemas, self._store)

    def count_undecodable(self, count: int, example: str | None) -> None:
        self._bad.add(count, example)

    @property
    def undecodable_count(self) -> int:
        return self._bad.count

    @property
    def last_undecodable(self) -> str | None:
        return self._bad.last_reason

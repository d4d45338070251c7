"""The Arrow type of the values a store decodes at ingest, from the latest schema of its subject.

The type follows the JSON the store answers (docs/reference/http-api.md, "Value formats"), so that
the same documents parse into it: numbers and booleans typed, records and messages as structs,
arrays as lists; text-shaped values (strings, enums, ``bytes`` and ``fixed`` as base64, decimals,
dates, times, timestamps, UUIDs, Protobuf's 64-bit integers and well-known types) as strings.
Maps and unions of several types are left out (a map's keys are data, not fields). The Spark DDL a
store serves (``StoreInfo.value_schema``) is written from the same type.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2

logger = logging.getLogger(__name__)

_AVRO = {
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.string(),
}
_JSON_SCHEMA = {"integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_(), "string": pa.string()}
_FIELD = descriptor_pb2.FieldDescriptorProto
# protobuf's JSON mapping: 64-bit integers are strings, so are bytes (base64) and enums (names).
_PROTOBUF = {
    _FIELD.TYPE_INT32: pa.int32(),
    _FIELD.TYPE_SINT32: pa.int32(),
    _FIELD.TYPE_SFIXED32: pa.int32(),
    _FIELD.TYPE_UINT32: pa.int64(),
    _FIELD.TYPE_FIXED32: pa.int64(),
    _FIELD.TYPE_DOUBLE: pa.float64(),
    _FIELD.TYPE_FLOAT: pa.float32(),
    _FIELD.TYPE_BOOL: pa.bool_(),
}
_DDL = {
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.string(): "STRING",
}


def _struct(fields: list[tuple[str, pa.DataType | None]]) -> pa.StructType | None:
    kept = [pa.field(name, typed) for name, typed in fields if typed is not None]
    return pa.struct(kept) if kept else None


def avro_type(avro: Any, named: dict[str, Any]) -> pa.DataType | None:
    """The Arrow type of the JSON form of Avro type ``avro`` (``None``: left out)."""
    if isinstance(avro, list):  # a union: typed when it is one type and null
        branches = [branch for branch in avro if branch != "null"]
        return avro_type(branches[0], named) if len(branches) == 1 else None
    if isinstance(avro, str):
        if avro in _AVRO:
            return _AVRO[avro]
        return avro_type(named[avro], named) if avro in named else None
    return _avro_object(avro, named) if isinstance(avro, dict) else None


def _avro_object(avro: dict[str, Any], named: dict[str, Any]) -> pa.DataType | None:
    """The Arrow type of an Avro type written as an object (a record, enum, array...)."""
    kind = avro.get("type")
    if avro.get("logicalType") is not None:
        return pa.string()
    if kind == "record":
        named[str(avro.get("name"))] = avro
        if avro.get("namespace"):
            named[f"{avro['namespace']}.{avro['name']}"] = avro
        return _struct([(f["name"], avro_type(f["type"], named)) for f in avro.get("fields", [])])
    if kind in ("enum", "fixed"):
        named[str(avro.get("name"))] = avro
        return pa.string()
    if kind == "array":
        item = avro_type(avro.get("items"), named)
        return None if item is None else pa.list_(item)
    if kind == "map":
        return None
    return avro_type(kind, named) if isinstance(kind, str | list) else None


def json_schema_type(schema: Any) -> pa.DataType | None:
    """The Arrow type of documents valid under JSON Schema ``schema`` (``None``: left out)."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: one type and null
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind in _JSON_SCHEMA:
        return _JSON_SCHEMA[kind]
    if kind == "array":
        item = json_schema_type(schema.get("items"))
        return None if item is None else pa.list_(item)
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return None
        return _struct([(name, json_schema_type(sub)) for name, sub in properties.items()])
    return None


def protobuf_type(proto: descriptor_pb2.FileDescriptorProto) -> pa.StructType | None:
    """The Arrow type of the JSON form of the file's first message (``json_format``, proto names)."""
    messages = {
        f".{proto.package}.{m.name}" if proto.package else f".{m.name}": m for m in proto.message_type
    }
    if not proto.message_type:
        return None
    return _message_type(proto.message_type[0], messages, 0)


def _message_type(message: Any, messages: dict[str, Any], depth: int) -> pa.StructType | None:
    fields: list[tuple[str, pa.DataType | None]] = []
    for field in message.field:
        typed: pa.DataType | None
        if field.type == _FIELD.TYPE_MESSAGE:
            nested = messages.get(field.type_name)
            if field.type_name.startswith(".google.protobuf."):
                typed = pa.string()  # well-known types: their JSON forms are text (Timestamp...)
            else:
                typed = None if nested is None or depth > 8 else _message_type(nested, messages, depth + 1)
        else:
            typed = _PROTOBUF.get(field.type, pa.string())
        if typed is not None and field.label == _FIELD.LABEL_REPEATED:
            typed = pa.list_(typed)
        fields.append((field.name, typed))
    return _struct(fields)


def value_type(value_format: str, document: dict[str, Any]) -> pa.StructType | None:
    """The Arrow struct of values written under the registered schema ``document``."""
    text = document.get("schema")
    if not isinstance(text, str):
        return None
    try:
        if value_format == "protobuf":
            proto = descriptor_pb2.FileDescriptorProto()
            proto.ParseFromString(base64.standard_b64decode(text))
            return protobuf_type(proto)
        parsed = json.loads(text)
    except Exception as exc:  # a schema the registry holds but this store cannot read
        logger.debug("no Arrow type for a %s schema: %s", value_format, exc)
        return None
    typed = json_schema_type(parsed) if value_format == "json_schema" else avro_type(parsed, {})
    return typed if isinstance(typed, pa.StructType) else None


def _ddl(typed: pa.DataType) -> str:
    if pa.types.is_struct(typed):
        return "STRUCT<" + ", ".join(f"{_quoted(f.name)}: {_ddl(f.type)}" for f in typed) + ">"
    if pa.types.is_list(typed):
        return f"ARRAY<{_ddl(typed.value_type)}>"
    return _DDL[typed]


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def ddl_of(struct: pa.StructType | None) -> str | None:
    """The Spark DDL (``name TYPE, ...``) of a value struct."""
    if struct is None:
        return None
    return ", ".join(f"{_quoted(field.name)} {_ddl(field.type)}" for field in struct)


class LatestValueType:
    """The value struct of a store's latest schema (``<schemas_dir>/latest.json``), read again when
    the file changes (a new version picked up at ingest)."""

    def __init__(self, value_format: str, schemas_dir: Path) -> None:
        self._format = value_format
        self._path = schemas_dir / "latest.json"
        self._known: tuple[tuple[int, int], pa.StructType | None] = ((-1, -1), None)

    def __call__(self) -> pa.StructType | None:
        try:
            stat = os.stat(self._path)
        except OSError:
            return None
        changed = (stat.st_mtime_ns, stat.st_ino)
        if changed != self._known[0]:
            try:
                latest = json.loads(self._path.read_text(encoding="utf-8"))
                typed = value_type(self._format, latest["schema"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.debug("no value type in %s: %s", self._path, exc)
                typed = None
            self._known = (changed, typed)
        return self._known[1]

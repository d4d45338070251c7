"""The Spark schema of a store whose values are decoded at ingest, derived from its Avro schema.

``StoreInfo.value_schema`` carries it as a Spark DDL string, so that ``lookup_join`` and
``lookup_udf`` type their columns without a ``value_schema`` argument. The DDL follows the JSON the
store answers (docs/http-api.md, "Avro values"): numbers and booleans typed, records as structs,
arrays as arrays; text-shaped values (strings, enums, ``bytes`` and ``fixed`` as base64, decimals,
dates, times, timestamps, UUIDs) as strings; maps are left out (their keys are data, not fields).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_PRIMITIVES = {
    "int": "INT",
    "long": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "string": "STRING",
    "bytes": "STRING",
}


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spark_type(avro: Any, named: dict[str, Any]) -> str | None:
    """The Spark SQL type of the JSON form of ``avro`` (``None``: not typed, left out)."""
    if isinstance(avro, list):  # a union: typed when it is one type and null
        branches = [branch for branch in avro if branch != "null"]
        return spark_type(branches[0], named) if len(branches) == 1 else None
    if isinstance(avro, str):
        if avro in _PRIMITIVES:
            return _PRIMITIVES[avro]
        return spark_type(named[avro], named) if avro in named else None
    if not isinstance(avro, dict):
        return None
    return _complex_type(avro, named)


def _complex_type(avro: dict[str, Any], named: dict[str, Any]) -> str | None:
    """The Spark SQL type of an Avro type given as an object (a record, enum, array...)."""
    kind = avro.get("type")
    if avro.get("logicalType") is not None:
        return "STRING"
    if kind == "record":
        return _record_type(avro, named)
    if kind in ("enum", "fixed"):
        named[str(avro.get("name"))] = avro
        return "STRING"
    if kind == "array":
        item = spark_type(avro.get("items"), named)
        return None if item is None else f"ARRAY<{item}>"
    if kind == "map":
        return None
    return spark_type(kind, named) if isinstance(kind, str | list) else None


def _record_type(avro: dict[str, Any], named: dict[str, Any]) -> str | None:
    named[str(avro.get("name"))] = avro
    if avro.get("namespace"):
        named[f"{avro['namespace']}.{avro['name']}"] = avro
    fields = []
    for field in avro.get("fields", []):
        typed = spark_type(field["type"], named)
        if typed is not None:
            fields.append(f"{_quoted(field['name'])}: {typed}")
    return f"STRUCT<{', '.join(fields)}>" if fields else None


def value_schema_ddl(schema_text: str) -> str | None:
    """The Spark DDL (``name TYPE, ...``) of the top-level Avro record ``schema_text``."""
    try:
        schema = json.loads(schema_text)
    except ValueError:
        return None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    named: dict[str, Any] = {}
    spark_type(schema, named)  # learns the named types the fields may refer to
    fields = []
    for field in schema.get("fields", []):
        typed = spark_type(field["type"], named)
        if typed is not None:
            fields.append(f"{_quoted(field['name'])} {typed}")
    return ", ".join(fields) or None


def stored_value_schema(schemas_dir: Path) -> str | None:
    """The DDL of the latest schema a store decoded with (kept in its schemas directory)."""
    try:
        latest = json.loads((schemas_dir / "latest.json").read_text(encoding="utf-8"))
        return value_schema_ddl(str(latest["schema"]["schema"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.debug("no value schema in %s: %s", schemas_dir, exc)
        return None

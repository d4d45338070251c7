"""The Spark DDL an avro store serves follows the JSON it answers."""

from __future__ import annotations

import json

from service.typed_values import ddl_of, value_type


def value_schema_ddl(text: str) -> str | None:
    return ddl_of(value_type("avro", {"schema": text}))


def test_avro_types_map_to_the_spark_types_of_their_json_form() -> None:
    schema = {
        "type": "record",
        "name": "Customer",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "n", "type": "int"},
            {"name": "ok", "type": "boolean"},
            {"name": "score", "type": "double"},
            {"name": "nick", "type": ["null", "string"]},
            {"name": "either", "type": ["int", "string"]},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            },
            {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["A"]}},
            {"name": "again", "type": "Tier"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "attrs", "type": {"type": "map", "values": "int"}},
            {
                "name": "address",
                "type": {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]},
            },
            {"name": "weird`name", "type": "string"},
        ],
    }
    assert value_schema_ddl(json.dumps(schema)) == (
        "`id` BIGINT, `n` INT, `ok` BOOLEAN, `score` DOUBLE, `nick` STRING, `price` STRING, `tier` STRING,"
        " `again` STRING, `tags` ARRAY<STRING>, `address` STRUCT<`city`: STRING>, `weird``name` STRING"
    )


def test_a_schema_that_is_not_a_record_has_no_ddl() -> None:
    assert value_schema_ddl('"string"') is None
    assert value_schema_ddl("not json") is None

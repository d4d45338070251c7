"""Planning a typed lookup on the driver: which fields the executors ask the service for."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import IntegerType, StructType

from clients.exceptions import SchemaMismatchError
from clients.spark import compat
from clients.spark.options import LookupOptions
from clients.spark.plan import PROJECTION_MIN_SAVING, plan_lookup, projection
from store import InMemoryStore
from tests.clients.conftest import ServeStores

NAMES = ("name", "price")


def test_projection_only_when_it_sheds_enough_bytes_a_value() -> None:
    small = [{"name": f"n{i}", "price": i, "tags": ["a", "b"]} for i in range(20)]
    assert projection(small, NAMES) is None
    padded = [{**d, "notes": "x" * PROJECTION_MIN_SAVING} for d in small]
    assert projection(padded, NAMES) == NAMES
    # On average: half the values padded twice as much sheds as much as all padded once.
    half = [{**d, "notes": "x" * 2 * PROJECTION_MIN_SAVING} if i % 2 else d for i, d in enumerate(small)]
    assert projection(half, NAMES) == NAMES
    assert projection([], NAMES) == NAMES  # nothing sampled: ask for what the schema needs
    assert projection(["not an object", 7], NAMES) is None


def test_a_planned_lookup_asks_for_its_fields_only_when_values_are_large(
    spark: SparkSession, serve_stores: ServeStores
) -> None:
    small, large = InMemoryStore("small"), InMemoryStore("large")
    for store, padding in ((small, ""), (large, "x" * 2 * PROJECTION_MIN_SAVING)):
        documents = [{"name": f"n{i}", "price": i, "notes": padding} for i in range(30)]
        store.apply([(0, i, f"p{i}".encode(), json.dumps(d).encode()) for i, d in enumerate(documents)])
    url = serve_stores({"small": (small, "json"), "large": (large, "json")})
    fields = {
        name: plan_lookup(
            LookupOptions(store=name, url=url, value_schema="name string, price double"), spark
        ).spec.fields
        for name in ("small", "large")
    }
    assert fields == {"small": None, "large": NAMES}


def test_a_planned_lookup_may_read_the_store_whole_only_for_whole_values(
    spark: SparkSession, serve_stores: ServeStores
) -> None:
    small, large = InMemoryStore("small"), InMemoryStore("large")
    for store, padding in ((small, ""), (large, "x" * 2 * PROJECTION_MIN_SAVING)):
        documents = [{"name": f"n{i}", "price": i, "notes": padding} for i in range(30)]
        store.apply([(0, i, f"p{i}".encode(), json.dumps(d).encode()) for i, d in enumerate(documents)])
    url = serve_stores({"small": (small, "json"), "large": (large, "json")})

    def planned(store: str, **options: object) -> tuple[int | None, int, str]:
        spec = plan_lookup(LookupOptions(store=store, url=url, **options), spark).spec  # type: ignore[arg-type]
        return spec.store_keys, spec.scan_bytes, spec.lookup_id

    keys, scan_bytes, lookup_id = planned("small", value_schema="name string, price double")
    assert (keys, scan_bytes) == (30, 64 * 1024 * 1024)  # the service's key count, the default bound
    assert lookup_id  # the store read whole is shared by this planned lookup's tasks only
    assert planned("small", scan_bytes=1000)[:2] == (30, 1000)
    assert planned("small", scan_bytes=0)[0] is None
    # Projected values (fields=) are not what a scan page answers: batch gets only.
    assert planned("large", value_schema="name string, price double")[0] is None
    with pytest.raises(ValueError, match="scan_bytes"):
        LookupOptions(store="small", scan_bytes=-1)


def test_a_value_schema_is_parsed_by_spark_once_per_process(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    parse = compat._parse_struct

    def counted(session: SparkSession, ddl: str) -> StructType:
        asked.append(ddl)
        return parse(session, ddl)

    monkeypatch.setattr(compat, "_PARSED", {})
    monkeypatch.setattr(compat, "_parse_struct", counted)
    first = compat.parse_struct(spark, "name string, price double")
    first.add("changed", IntegerType())  # a copy: what the next caller gets is not changed
    again = compat.parse_struct(spark, "name string, price double")
    other = compat.parse_struct(spark, "name string")
    assert again.simpleString() == "struct<name:string,price:double>"
    assert other.fieldNames() == ["name"]
    assert asked == ["name string, price double", "name string"]
    for _ in range(2):  # a failure is not kept: asked, and refused, every time
        with pytest.raises(SchemaMismatchError):
            compat.parse_struct(spark, "name strang,")
    assert asked[2:] == ["name strang,", "name strang,"]

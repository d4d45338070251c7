"""Planning a typed lookup on the driver: which fields the executors ask the service for."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import IntegerType, StringType, StructType

from clients.exceptions import SchemaMismatchError
from clients.lookup import LookupSpec
from clients.spark import compat, lookup_join, plan, plan_cache
from clients.spark.fields import PROJECTION_MIN_SAVING, projection
from clients.spark.options import LookupOptions, client_options
from clients.spark.plan import plan_lookup
from clients.wire import StoreInfo
from store import InMemoryStore
from tests.clients.conftest import ServeStores
from tests.clients.spark.test_lookups import BATCH_GETS, SCANS, requests_of
from wire.position import Position

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


def test_a_field_whose_name_is_not_a_plain_name_is_fetched_with_the_whole_value(
    spark: SparkSession, serve_stores: ServeStores
) -> None:
    # ``fields=a.b`` names the path a -> b, and ``fields=x,y`` two fields: asked so, the join would
    # answer null for a value that has the field. Whole values, however large.
    store = InMemoryStore("large")
    padding = "x" * 2 * PROJECTION_MIN_SAVING
    documents = [{"a.b": f"dotted {i}", "x,y": i, " c": True, "notes": padding} for i in range(30)]
    store.apply([(0, i, f"p{i}".encode(), json.dumps(d).encode()) for i, d in enumerate(documents)])
    url = serve_stores({"large": (store, "json")})
    for schema in ("`a.b` string", "`x,y` long", "` c` boolean"):
        options = LookupOptions(store="large", url=url, value_schema=schema)
        assert plan_lookup(options, spark).spec.fields is None
    facts = spark.createDataFrame([("p3",), ("p7",)], "id string")
    joined = lookup_join(facts, store="large", on="id", url=url, value_schema="`a.b` string, `x,y` long")
    assert sorted(tuple(row) for row in joined.collect()) == [("p3", "dotted 3", 3), ("p7", "dotted 7", 7)]


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


STORE_INFO = "/v1/stores/{store}"


def test_a_lookup_planned_again_on_an_unchanged_store_reuses_its_planned_read(
    spark: SparkSession, serve_stores: ServeStores, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan_cache, "plans", plan_cache.PlanCache())
    monkeypatch.setattr(plan, "plans", plan_cache.plans)
    store = InMemoryStore("items", keeps_history=True)
    store.apply([(0, i, f"k{i}".encode(), json.dumps({"name": f"n{i}"}).encode()) for i in range(30)])
    url = serve_stores({"items": (store, "json")})

    def planned(**options: Any) -> tuple[plan.Plan, Counter[str]]:
        lookup = LookupOptions(store="items", url=url, value_schema="name string", **options)
        planned, asked = requests_of(url, lambda: plan_lookup(lookup, spark))
        del asked["/metrics"]  # the scrape before it
        return planned, asked

    first, asked_first = planned()
    again, asked_again = planned()
    # The store's info, then its sample of values; planned again, the info only, and the same read.
    assert asked_first == {STORE_INFO: 1, SCANS: 1}
    assert asked_again == {STORE_INFO: 1}
    assert again.spec == first.spec
    assert again.spec.lookup_id  # names the read the tasks keep and share
    # Each planned lookup still counts its own misfits.
    assert again.info.lookup_id != first.info.lookup_id
    assert again.info.mismatch_counter is not first.info.mismatch_counter
    # Other options: another read. An exact read is checked once too.
    other, asked_other = planned(scan_bytes=1000)
    assert other.spec.lookup_id != first.spec.lookup_id
    assert asked_other == {STORE_INFO: 1, SCANS: 1}
    exact, asked_exact = planned(consistent=True)
    assert asked_exact == {STORE_INFO: 1, SCANS: 1, BATCH_GETS: 1}
    assert planned(consistent=True)[1] == {STORE_INFO: 1}
    assert planned(consistent=True)[0].spec == exact.spec
    # The store moves on: planned afresh, at the new position.
    store.apply([(0, 30, b"k1", json.dumps({"name": "changed"}).encode())])
    moved, asked_moved = planned()
    assert asked_moved == {STORE_INFO: 1, SCANS: 1}
    assert moved.spec.position == "0:31" != first.spec.position
    assert moved.spec.lookup_id != first.spec.lookup_id
    # Pinned elsewhere than the store's position (as_of an older one): never kept.
    for _ in range(2):
        assert planned(as_of="0:30")[1] == {STORE_INFO: 1, SCANS: 1, BATCH_GETS: 1}


def test_a_planned_read_is_kept_for_one_copy_of_the_store_at_one_position() -> None:
    info = StoreInfo.from_json(
        {"name": "items", "value_format": "json", "state": "READY", "position": "0:5", "copy_id": "a1"}
    )
    options = LookupOptions(store="items")
    read = plan_cache.KeptRead(
        LookupSpec(client_options("http://s", None, True, 1, 1), "items", "0:5", "json"), StringType()
    )
    cache = plan_cache.PlanCache(size=1)
    pinned = Position.parse("0:5")
    cache.put("key", info, pinned, options, read)
    assert cache.get("key", info, pinned, options) is read
    elsewhere = Position.parse("0:6")
    assert cache.get("key", info, elsewhere, options) is None  # pinned past the store's position
    rebuilt = dataclasses.replace(info, raw={**info.raw, "copy_id": "b2"})
    assert cache.get("key", rebuilt, pinned, options) is None  # another copy: a rebuild, a restart
    unnamed = dataclasses.replace(info, raw={k: v for k, v in info.raw.items() if k != "copy_id"})
    assert cache.get("key", unnamed, pinned, options) is None  # a service that names no copy
    for kept_not in (LookupOptions(store="items", index="by_x"), LookupOptions(store="items", at_times=True)):
        cache.put("other", info, pinned, kept_not, read)
        assert cache.get("other", info, pinned, kept_not) is None
    cache.put("newer", info, pinned, options, read)
    assert cache.get("key", info, pinned, options) is None  # the least recently used, dropped

"""One shard of a sharded store over HTTP, with in-memory stores: the ``sharding`` member of
``StoreInfo``, 421 ``wrong-shard`` for keys of other shards, positions read in part, the metrics."""

from __future__ import annotations

import json
from collections.abc import Callable

import pyarrow as pa
import pytest

from clients.partitioners import PARTITIONERS
from store import InMemoryStore, ShardingStatus
from tests.service.conftest import Service, assert_problem

PARTITIONS = 6
SHARDS = 3
SHARD = 1
CONFIG = {
    "name": "profiles",
    "topic": "profiles",
    "value_format": "json",
    "partitioner": "crc32",
    "history": {"retention_ms": 60_000},
}
KEYS = [f"user-{i}".encode() for i in range(60)]


def partition_of(key: bytes) -> int:
    return PARTITIONERS["crc32"](key, PARTITIONS)


def own(key: bytes) -> bool:
    return partition_of(key) % SHARDS == SHARD


@pytest.fixture
def shard(make_service: Callable[..., Service]) -> Service:
    """Shard 1 of 3 of ``profiles`` (crc32, 6 partitions): it holds partitions 1 and 4."""
    status = ShardingStatus(SHARDS, SHARD, "crc32", PARTITIONS, records_checked=40, misplaced_records=2)
    store = InMemoryStore("profiles", keeps_history=True, sharding=status)
    store.apply(
        [
            (partition_of(key), offset, key, json.dumps({"i": offset}).encode())
            for offset, key in enumerate(KEYS)
            if own(key)
        ]
    )
    return make_service({"profiles": store}, configs=[CONFIG], sharding={"shards": SHARDS, "shard": SHARD})


def test_store_info_says_which_partitions_the_shard_holds(shard: Service) -> None:
    info = shard.client.get("/v1/stores/profiles").json()
    assert info["sharding"] == {
        "shards": 3,
        "shard": 1,
        "partitions": [1, 4],
        "partitioner": "crc32",
        "routing": "partition",
        "topic_partitions": 6,
        "records_checked": 40,
        "misplaced_records": 2,
    }
    listed = shard.client.get("/v1/stores").json()["stores"]
    assert listed[0]["sharding"] == info["sharding"]


def test_own_keys_are_answered_and_keys_of_other_shards_get_421_naming_their_shard(shard: Service) -> None:
    mine = next(key for key in KEYS if own(key))
    theirs = next(key for key in KEYS if not own(key))
    assert shard.client.get(f"/v1/stores/profiles/keys/{mine.decode()}").status_code == 200
    problem = assert_problem(
        shard.client.get(f"/v1/stores/profiles/keys/{theirs.decode()}"), 421, "wrong-shard"
    )
    assert problem["shard"] == partition_of(theirs) % SHARDS
    assert problem["partition"] == partition_of(theirs)
    assert problem["store"] == "profiles"
    assert f"shard {problem['shard']} holds" in problem["detail"]
    absent_here = next(f"nobody-{i}".encode() for i in range(100) if own(f"nobody-{i}".encode()))
    assert_problem(shard.client.get(f"/v1/stores/profiles/keys/{absent_here.decode()}"), 404, "key-not-found")


def test_a_batch_with_a_key_of_another_shard_is_refused_whole(shard: Service) -> None:
    mine = [key.decode() for key in KEYS if own(key)]
    theirs = [key.decode() for key in KEYS if not own(key)]
    answered = shard.client.post("/v1/stores/profiles/keys:batchGet", json={"keys": mine})
    assert answered.status_code == 200
    assert all(value is not None for value in answered.json()["values"])
    refused = shard.client.post("/v1/stores/profiles/keys:batchGet", json={"keys": [*mine, *theirs]})
    problem = assert_problem(refused, 421, "wrong-shard")
    assert problem["misrouted_keys"] == len(theirs)
    assert problem["shard"] == partition_of(theirs[0].encode()) % SHARDS
    sink = pa.BufferOutputStream()
    batch = pa.record_batch([pa.array([*mine, theirs[0]], pa.binary())], names=["key"])
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    arrow = shard.client.post(
        "/v1/stores/profiles/keys:batchGet",
        content=sink.getvalue().to_pybytes(),
        headers={"Content-Type": "application/vnd.apache.arrow.stream"},
    )
    assert assert_problem(arrow, 421, "wrong-shard")["misrouted_keys"] == 1


def test_scans_answer_the_shards_own_keys(shard: Service) -> None:
    page = shard.client.get("/v1/stores/profiles/scan", params={"prefix": "user-", "limit": 1000}).json()
    assert [item["key"] for item in page["items"]] == sorted(key.decode() for key in KEYS if own(key))


def test_positions_naming_other_shards_partitions_are_read_in_part(shard: Service) -> None:
    position = shard.client.get("/v1/stores/profiles").json()["position"]
    whole = f"0:99,{position},2:99,3:99,5:99"
    mine = next(key.decode() for key in KEYS if own(key))
    pinned = shard.client.get(f"/v1/stores/profiles/keys/{mine}", params={"min_position": whole})
    assert pinned.status_code == 200
    exact = shard.client.get(f"/v1/stores/profiles/keys/{mine}", params={"as_of": whole})
    assert exact.status_code == 200
    assert exact.headers["Statestore-Position"] == position
    # Nothing of this shard's partitions at all: the empty table.
    empty = shard.client.get(f"/v1/stores/profiles/keys/{mine}", params={"as_of": "0:99,2:5"})
    assert_problem(empty, 404, "key-not-found")


def test_metrics_count_checked_and_misplaced_records(shard: Service) -> None:
    text = shard.client.get("/metrics").text
    assert 'statestore_misplaced_records_total{store="profiles"} 2.0' in text
    assert 'statestore_partition_checked_records_total{store="profiles"} 40.0' in text


def test_an_unsharded_service_reports_one_shard_and_checks_no_key(service: Service) -> None:
    info = service.client.get("/v1/stores/products").json()
    assert info["sharding"]["shards"] == 1
    assert info["sharding"]["partitioner"] == "murmur2"
    assert service.client.get("/v1/stores/products/keys/p1").status_code == 200

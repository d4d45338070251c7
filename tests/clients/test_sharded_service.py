"""Sharded stores end to end: three shard processes and one unsharded service of the same topics, on
the real broker, read through the client and through Spark.

Two 6-partition topics: ``profiles`` written by a producer placing keys as Java clients do
(confluent-kafka with ``partitioner: murmur2_random``), ``accounts`` by librdkafka's default
(``consistent_random``, so ``partitioner: crc32``). A third store reads ``accounts`` as if murmur2 had
written it: its records are counted as misplaced. One module-scoped set of services serves every test;
the last test stops a shard.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from clients import StatestoreClient
from clients.exceptions import ShardingError, StatestoreClientError, TransportError
from clients.partitioners import PARTITIONERS
from clients.spark import lookup_join, lookup_udf, read_store
from service.local.broker import LocalBroker
from service.local.shards import LocalShards
from tests.clients.conftest import wait_until_ready
from tests.support.kafka import Record, create_topic, latest_per_key, make_producer, produce, unique_topic
from wire.position import Position

PARTITIONS = 6
SHARDS = 3
HISTORY = {"retention_ms": 3_600_000}
SCHEMA = "name string, n long"


def rows(prefix: str, count: int, seed: int) -> list[Record]:
    """Records of ``count`` keys, some updated twice and some tombstoned, in a shuffled order."""
    rng = random.Random(seed)
    records: list[Record] = []
    for i in range(count):
        key = f"{prefix}-{i:04d}".encode()
        records.append((key, json.dumps({"name": f"{prefix} {i}", "n": i, "group": i % 9}).encode()))
        if i % 7 == 0:
            value = {"name": f"{prefix} {i} v2", "n": i * 10, "group": (i + 1) % 9}
            records.append((key, json.dumps(value).encode()))
        if i % 11 == 0:
            records.append((key, None))
    rng.shuffle(records)
    # Shuffling may put a key's update before its first write; the model follows the order sent.
    return records


@dataclass
class Deployment:
    """The services of this module and what was written to their topics."""

    broker: LocalBroker
    shards: LocalShards
    unsharded: str  # the unsharded service's URL
    topics: dict[str, str]
    models: dict[str, dict[bytes, bytes]]
    producers: dict[str, str]  # store -> librdkafka partitioner its topic's producer uses

    @property
    def url(self) -> str:
        return self.shards.url

    def write(self, store: str, records: list[Record]) -> None:
        producer = make_producer(self.broker.bootstrap_servers, partitioner=self.producers[store])
        produce(self.broker.bootstrap_servers, self.topics[store], records, producer=producer)
        self.models[store] = latest_per_key([*self.model_records(store), *records])

    def model_records(self, store: str) -> list[Record]:
        return list(self.models[store].items())


STORES = [
    {
        "name": "profiles",
        "partitioner": "murmur2",
        "history": HISTORY,
        "indexes": [{"name": "by_group", "field": "group"}],
    },
    {"name": "accounts", "partitioner": "crc32", "history": HISTORY},
    {"name": "accounts_as_murmur2", "partitioner": "murmur2"},
]


@pytest.fixture(scope="module")
def deployment(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    bootstrap = broker.bootstrap_servers
    topics = {"profiles": unique_topic("profiles"), "accounts": unique_topic("accounts")}
    producers = {"profiles": "murmur2_random", "accounts": "consistent_random"}
    models: dict[str, dict[bytes, bytes]] = {}
    for store, topic in topics.items():
        create_topic(bootstrap, topic, PARTITIONS)
        records = rows(store[:4], 400, seed=len(store))
        produce(bootstrap, topic, records, producer=make_producer(bootstrap, partitioner=producers[store]))
        models[store] = latest_per_key(records)
    config = {
        "kafka": {"bootstrap_servers": bootstrap},
        "stores": [
            {
                "name": store["name"],
                "topic": topics[str(store["name"]).removesuffix("_as_murmur2")],
                "value_format": "json",
                **{key: value for key, value in store.items() if key != "name"},
            }
            for store in STORES
        ],
    }
    base = tmp_path_factory.mktemp("sharded")
    with (
        LocalShards(config, SHARDS, base / "state", base / "logs", log_level="WARNING") as shards,
        LocalShards(config, 1, base / "unsharded-state", base / "unsharded-logs", log_level="WARNING") as one,
    ):
        for shard in range(SHARDS):
            wait_until_ready(shards.url_of(shard))
        wait_until_ready(one.url_of(0))
        yield Deployment(broker, shards, one.url_of(0), topics, models, producers)


@pytest.fixture(scope="module")
def client(deployment: Deployment) -> Iterator[StatestoreClient]:
    with StatestoreClient(deployment.url, deadline=20) as sharded:
        yield sharded


def decoded(model: dict[bytes, bytes]) -> dict[str, Any]:
    return {key.decode(): json.loads(value) for key, value in model.items()}


def every_key(deployment: Deployment, store: str) -> list[str]:
    """Every key ever written to the store's topic, and a few never written."""
    prefix = store[:4]
    return [f"{prefix}-{i:04d}" for i in range(410)]


@pytest.mark.parametrize("store", ["profiles", "accounts"])
def test_each_shard_holds_its_partitions_and_says_so(deployment: Deployment, store: str) -> None:
    for shard in range(SHARDS):
        info = httpx.get(f"{deployment.shards.url_of(shard)}/v1/stores/{store}").json()
        assert info["sharding"] == {
            "shards": SHARDS,
            "shard": shard,
            "partitions": [shard, shard + SHARDS],
            "partitioner": "murmur2" if store == "profiles" else "crc32",
            "routing": "partition",
            "topic_partitions": PARTITIONS,
            "records_checked": info["sharding"]["records_checked"],
            "misplaced_records": 0,
        }
        assert sorted(Position.parse(info["position"])) == [shard, shard + SHARDS]
        assert info["sharding"]["records_checked"] > 0
    unsharded = httpx.get(f"{deployment.unsharded}/v1/stores/{store}").json()["sharding"]
    assert (unsharded["shards"], unsharded["partitions"]) == (1, list(range(PARTITIONS)))


@pytest.mark.parametrize("store", ["profiles", "accounts"])
def test_every_key_read_through_the_client_equals_the_model(
    deployment: Deployment, client: StatestoreClient, store: str
) -> None:
    model = decoded(deployment.models[store])
    keys = every_key(deployment, store)
    assert client.get_many(store, keys) == [model.get(key) for key in keys]
    assert [client.get(store, key) for key in keys[:40]] == [model.get(key) for key in keys[:40]]
    with StatestoreClient(deployment.unsharded) as unsharded:
        assert unsharded.get_many(store, keys) == [model.get(key) for key in keys]


@pytest.mark.parametrize("store", ["profiles", "accounts"])
def test_scans_across_shards_are_complete_and_byte_ordered(
    deployment: Deployment, client: StatestoreClient, store: str
) -> None:
    model = decoded(deployment.models[store])
    assert list(client.scan(store, "", page_size=37)) == sorted(model.items())
    prefix = f"{store[:4]}-01"
    expected = sorted((k, v) for k, v in model.items() if k.startswith(prefix))
    assert list(client.scan(store, prefix, page_size=5)) == expected
    assert list(client.scan(store, prefix.encode(), page_size=5)) == [(k.encode(), v) for k, v in expected]


def test_index_lookups_across_shards_merge_every_shards_rows(
    deployment: Deployment, client: StatestoreClient
) -> None:
    model = decoded(deployment.models["profiles"])
    groups = {
        group: sorted((k, v) for k, v in model.items() if v["group"] == group) for group in (0, 4, 8, 99)
    }
    assert client.index_get_many("profiles", "by_group", list(groups)) == groups
    found = client.index_get_many("profiles", "by_group", [4], limit_per_value=7)
    assert found == {4: groups[4]}
    assert list(client.index_lookup("profiles", "by_group", 8, page_size=5)) == groups[8]


def test_a_key_asked_of_the_wrong_shard_gets_421_naming_the_right_one(deployment: Deployment) -> None:
    key = b"prof-0001"
    right = PARTITIONERS["murmur2"](key, PARTITIONS) % SHARDS
    wrong = (right + 1) % SHARDS
    answer = httpx.get(f"{deployment.shards.url_of(wrong)}/v1/stores/profiles/keys/{key.decode()}")
    assert answer.status_code == 421
    problem = answer.json()
    assert problem["type"] == "urn:statestore:problem:wrong-shard"
    assert problem["shard"] == right
    found = httpx.get(f"{deployment.shards.url_of(right)}/v1/stores/profiles/keys/{key.decode()}")
    assert found.status_code in (200, 404)
    batch = httpx.post(
        f"{deployment.shards.url_of(wrong)}/v1/stores/profiles/keys:batchGet", json={"keys": [key.decode()]}
    )
    assert batch.status_code == 421
    assert batch.json()["shard"] == right


def test_an_as_of_read_across_shards_equals_the_unsharded_read_at_that_position(
    deployment: Deployment, client: StatestoreClient
) -> None:
    pinned = client.consistent("profiles")
    assert sorted(pinned.position) == list(range(PARTITIONS))
    before = decoded(deployment.models["profiles"])
    # The table moves on: updates, new keys, tombstones, on every partition.
    deployment.write(
        "profiles",
        [
            (f"prof-{i:04d}".encode(), json.dumps({"name": "moved", "n": -i}).encode())
            for i in range(0, 400, 3)
        ]
        + [(f"prof-{i:04d}".encode(), None) for i in range(1, 400, 5)],
    )
    wait_for_model(deployment, client, "profiles")
    keys = every_key(deployment, "profiles")
    sharded = pinned.get_many(keys)
    with StatestoreClient(deployment.unsharded) as one:
        assert one.get_many("profiles", keys, as_of=pinned.position) == sharded
        assert list(one.scan("profiles", "prof-02", as_of=pinned.position)) == list(pinned.scan("prof-02"))
    assert sharded == [before.get(key) for key in keys]
    assert client.get_many("profiles", keys) == [decoded(deployment.models["profiles"]).get(k) for k in keys]


def wait_for_model(deployment: Deployment, client: StatestoreClient, store: str) -> None:
    """Until the sharded store answers the model (the writes just made are applied)."""
    model = decoded(deployment.models[store])
    keys = every_key(deployment, store)
    for _ in range(200):
        if client.get_many(store, keys) == [model.get(key) for key in keys]:
            return
        time.sleep(0.1)
    raise AssertionError(f"store {store} did not reach the model")


def test_a_mismatched_partitioner_is_detected(deployment: Deployment) -> None:
    misplaced = 0
    for shard in range(SHARDS):
        url = deployment.shards.url_of(shard)
        sharding = httpx.get(f"{url}/v1/stores/accounts_as_murmur2").json()["sharding"]
        misplaced += sharding["misplaced_records"]
        metrics = httpx.get(f"{url}/metrics").text
        counted = float(sharding["misplaced_records"])
        assert f'statestore_misplaced_records_total{{store="accounts_as_murmur2"}} {counted}' in metrics
        assert "partitioner murmur2" in deployment.shards.log_path(shard).read_text()
    assert misplaced > 0


def test_spark_lookups_route_every_key_from_the_executors(
    deployment: Deployment, spark: SparkSession
) -> None:
    model = decoded(deployment.models["accounts"])
    keys = every_key(deployment, "accounts")
    facts = spark.createDataFrame(pd.DataFrame({"id": range(len(keys)), "account": keys})).repartition(3)
    joined = lookup_join(
        facts, store="accounts", on="account", url=deployment.url, value_schema=SCHEMA, consistent=True
    )
    got = {row["account"]: row for row in joined.collect()}
    for key in keys:
        expected = model.get(key)
        assert (got[key]["name"], got[key]["n"]) == (
            (expected["name"], expected["n"]) if expected else (None, None)
        )
    whole = read_store(spark, store="accounts", url=deployment.url, value_schema=SCHEMA, partitions=3)
    assert sorted((row["key"], row["name"], row["n"]) for row in whole.collect()) == sorted(
        (key, value["name"], value["n"]) for key, value in model.items()
    )
    udf = lookup_udf(store="accounts", url=deployment.url, value_schema=SCHEMA)
    names = facts.select("account", udf(F.col("account")).alias("v")).select("account", "v.name").collect()
    assert {row["account"]: row["name"] for row in names} == {
        key: (model[key]["name"] if key in model else None) for key in keys
    }


class Misrouting(httpx.BaseTransport):
    """Real HTTP to the real shards, except that the next ``misroute`` key reads are sent to the
    shard after the one the client chose: the shard that gets them answers its own 421."""

    def __init__(self, deployment: Deployment) -> None:
        self._real = httpx.HTTPTransport()
        self._base_port = deployment.shards.base_port
        self.misroute = 0
        self.sent: list[tuple[int, str, int]] = []  # (shard, path, status)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        shard = (request.url.port or 0) - self._base_port
        if self.misroute and "/keys" in request.url.path:
            self.misroute -= 1
            shard = (shard + 1) % SHARDS
            request = httpx.Request(
                request.method,
                request.url.copy_with(port=self._base_port + shard),
                headers=request.headers,
                content=request.read(),
            )
        response = self._real.handle_request(request)
        self.sent.append((shard, request.url.path, response.status_code))
        return response

    def close(self) -> None:
        self._real.close()


def shard_of(key: str) -> int:
    return PARTITIONERS["murmur2"](key.encode(), PARTITIONS) % SHARDS


def test_after_a_real_421_the_client_reads_the_sharding_again_and_reads_the_right_shard(
    deployment: Deployment,
) -> None:
    model = decoded(deployment.models["profiles"])
    key = "prof-0002"
    right = shard_of(key)
    transport = Misrouting(deployment)
    with StatestoreClient(deployment.url, transport=transport, deadline=20) as client:
        assert client.get("profiles", "prof-0001") == model.get("prof-0001")  # reads the sharding
        transport.sent.clear()
        transport.misroute = 1
        assert client.get("profiles", key) == model.get(key)
        wrong = (right + 1) % SHARDS
        path = f"/v1/stores/profiles/keys/{key}"
        assert [(shard, sent, status) for shard, sent, status in transport.sent if sent == path] == [
            (wrong, path, 421),
            (right, path, 200 if key in model else 404),
        ]
        # Between the two: the sharding read again, from a real shard.
        between = transport.sent[1:-1]
        assert [(sent, status) for _, sent, status in between] == [("/v1/stores/profiles", 200)]


def test_after_a_real_421_for_a_batch_every_key_is_answered_from_its_shard(deployment: Deployment) -> None:
    model = decoded(deployment.models["profiles"])
    keys = every_key(deployment, "profiles")[:60]
    transport = Misrouting(deployment)
    with StatestoreClient(deployment.url, transport=transport, deadline=20) as client:
        assert client.get("profiles", keys[0]) == model.get(keys[0])
        transport.sent.clear()
        transport.misroute = 1
        assert client.get_many("profiles", keys) == [model.get(key) for key in keys]
    sent = [(sent, status) for _, sent, status in transport.sent]
    batch = "/v1/stores/profiles/keys:batchGet"
    # The misrouted batch is refused whole, the sharding read again, and then every shard answers
    # one batch of its own keys.
    reread = sent.index(("/v1/stores/profiles", 200))
    assert (batch, 421) in sent[:reread]
    after = [(shard, status) for shard, path, status in transport.sent[reread + 1 :] if path == batch]
    assert sorted(after) == [(shard, 200) for shard in range(SHARDS)]


def test_a_plain_url_to_one_real_shard_of_many_says_to_use_a_template(deployment: Deployment) -> None:
    keys = every_key(deployment, "profiles")[:30]
    assert {shard_of(key) for key in keys} == set(range(SHARDS))
    with (
        StatestoreClient(deployment.shards.url_of(0), deadline=20) as client,
        pytest.raises(ShardingError, match=r"URL template holding \{shard\}"),
    ):
        client.get_many("profiles", keys)


def test_one_shard_stopped_fails_its_keys_naming_it_while_the_others_answer(
    deployment: Deployment, client: StatestoreClient
) -> None:
    model = decoded(deployment.models["accounts"])
    keys = every_key(deployment, "accounts")
    down = 1
    on_down = [k for k in keys if PARTITIONERS["crc32"](k.encode(), PARTITIONS) % SHARDS == down]
    elsewhere = [k for k in keys if k not in on_down]
    deployment.shards.stop_shard(down)
    try:
        with pytest.raises(
            StatestoreClientError, match=rf"shard {down} \(http://127\.0\.0\.1:\d+\)"
        ) as failed:
            client.get_many("accounts", keys, deadline=2)
        assert isinstance(failed.value, TransportError) or isinstance(failed.value.__cause__, TransportError)
        with pytest.raises(StatestoreClientError, match=f"shard {down}"):
            client.get("accounts", on_down[0], deadline=1)
        assert client.get_many("accounts", elsewhere, deadline=5) == [model.get(k) for k in elsewhere]
        assert [client.get("accounts", k, deadline=5) for k in elsewhere[:10]] == [
            model.get(k) for k in elsewhere[:10]
        ]
    finally:
        deployment.shards.start_shard(down)
    wait_until_ready(deployment.shards.url_of(down))
    assert client.get_many("accounts", keys) == [model.get(k) for k in keys]

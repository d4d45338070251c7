"""as_of_time through the service: the real broker, real RocksDB, real uvicorn. Every get, batch get
(one time per key, JSON and Arrow), scan and index read equals the brute-force model; a time below
the floor is 410, a malformed time 422, a store without history 400."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from confluent_kafka import Producer

from service.app import create_app
from service.local.broker import LocalBroker
from service.settings import Settings, store_configs
from store import Store, StoreTuning
from tests.service.conftest import assert_problem
from tests.service.test_integration import wait_ready
from tests.support.kafka import make_producer
from tests.support.server import serve_app
from tests.support.timed import Stamped, compacted, produce_stamped, table_at, value_at

ARROW = "application/vnd.apache.arrow.stream"
TUNING = StoreTuning().replace(metadata_check_interval_seconds=0.5, history_prune_interval_seconds=0.1)
KEYS = [f"k{i}" for i in range(8)]
PARTITIONS = 2


@pytest.fixture
def serve(broker: LocalBroker) -> Iterator[Callable[[list[dict[str, Any]], Path], httpx.Client]]:
    """Factory: one service over real ``Store``s (started here, stopped at the end)."""
    with contextlib.ExitStack() as stack:

        def make(stores: list[dict[str, Any]], state_dir: Path) -> httpx.Client:
            settings = Settings(
                kafka={"bootstrap_servers": broker.bootstrap_servers}, state_dir=state_dir, stores=stores
            )
            built = {c.name: Store(dataclasses.replace(c, tuning=TUNING)) for c in store_configs(settings)}
            for store in built.values():
                store.start()
                stack.callback(store.stop)
            url = stack.enter_context(serve_app(create_app(settings, built)))
            return stack.enter_context(httpx.Client(base_url=url, timeout=30))

        yield make


def records(rng: random.Random, n: int, low: int, high: int) -> list[tuple[bytes, bytes | None, int, int]]:
    out = []
    for _ in range(n):
        key = rng.choice(KEYS)
        value = None if rng.random() < 0.2 else json.dumps({"g": rng.choice("xy"), "n": rng.randrange(99)})
        out.append(
            (
                key.encode(),
                None if value is None else value.encode(),
                rng.randint(low, high),
                int(key[1:]) % PARTITIONS,
            )
        )
    return out


def produce_after_ready(
    producer: Producer, topic: str, rng: random.Random, before: list[Stamped]
) -> tuple[list[Stamped], str]:
    """Three more rounds of records, out of order across rounds (some stamped below the last ones):
    the topic's log as a compacted store keeps it from ``before`` on, and the position past it."""
    log: list[Stamped] = compacted(before)
    for low in (4_000, 2_500, 6_000):
        log += produce_stamped(producer, topic, records(rng, 20, low, low + 2_500))
    end = ",".join(f"{p}:{max(r.offset for r in log if r.partition == p) + 1}" for p in range(PARTITIONS))
    return log, end


def rfc3339(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def decoded(value: bytes | None) -> Any:
    return None if value is None else json.loads(value)


def test_every_read_as_of_a_time_equals_the_model(
    make_topic: Callable[..., str], broker: LocalBroker, serve: Callable[..., httpx.Client], tmp_path: Path
) -> None:
    rng = random.Random(7)
    topic, plain_topic = make_topic(partitions=PARTITIONS), make_topic(partitions=1)
    producer = make_producer(broker.bootstrap_servers)
    before = produce_stamped(producer, topic, records(rng, 12, 1_000, 2_000))
    floor = max(r.timestamp for r in before)
    history = {"retention_offsets": 1_000_000}
    client = serve(
        [
            {
                "name": "prices",
                "topic": topic,
                "value_format": "json",
                "history": history,
                "indexes": [{"name": "by_g", "field": "g"}],
            },
            {"name": "plain", "topic": plain_topic, "value_format": "json"},
        ],
        tmp_path / "state",
    )
    wait_ready(client)
    log, end = produce_after_ready(producer, topic, rng, before)
    times = sorted({floor, *(r.timestamp for r in log if r.timestamp >= floor), 10_000})
    wait = {"min_position": end, "timeout_ms": 20_000}

    for at in times[::2]:
        model = table_at(log, at)
        for key in KEYS[:4]:
            got = client.get(f"/v1/stores/prices/keys/{key}", params={**wait, "as_of_time": str(at)})
            expected = model.get(key.encode())
            assert got.status_code == (404 if expected is None else 200), (at, key, got.text)
            if expected is not None:
                assert got.json() == json.loads(expected)
        scanned = client.get(
            "/v1/stores/prices/scan", params={**wait, "as_of_time": rfc3339(at), "limit": 100}
        )
        assert {i["key"]: i["value"] for i in scanned.json()["items"]} == {
            k.decode(): json.loads(v) for k, v in model.items()
        }, at
        index = client.get("/v1/stores/prices/indexes/by_g/x", params={**wait, "as_of_time": str(at)})
        assert {i["key"] for i in index.json()["items"]} == {
            k.decode() for k, v in model.items() if json.loads(v)["g"] == "x"
        }, at

    keys = [rng.choice(KEYS) for _ in range(60)]
    per_key = [rng.choice(times) for _ in keys]
    expected_values = [decoded(value_at(log, k.encode(), t)) for k, t in zip(keys, per_key, strict=True)]
    as_json = client.post(
        "/v1/stores/prices/keys:batchGet",
        params=wait,
        json={"keys": keys, "as_of_times": [t if i % 2 else rfc3339(t) for i, t in enumerate(per_key)]},
    )
    assert as_json.status_code == 200, as_json.text
    assert as_json.json()["values"] == expected_values
    table = pa.table({"key": pa.array(keys), "as_of_time": pa.array(per_key, pa.timestamp("ms"))})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    as_arrow = client.post(
        "/v1/stores/prices/keys:batchGet",
        params=wait,
        content=sink.getvalue().to_pybytes(),
        headers={"Content-Type": ARROW},
    )
    assert as_arrow.status_code == 200, as_arrow.text
    answer = pa.ipc.open_stream(as_arrow.content).read_all()
    assert [decoded(v) for v in answer["value"].to_pylist()] == expected_values
    # Keys asked again are answered from their timelines, which the memory report counts.
    memory = client.get("/v1/stores/prices").json()["memory"]
    assert 0 < memory["timeline_entries"] <= len(KEYS)
    assert memory["timeline_bytes"] >= 16 * memory["timeline_entries"]
    gauges = dict(line.rsplit(" ", 1) for line in client.get("/metrics").text.splitlines() if " " in line)
    assert float(gauges['statestore_timeline_entries{store="prices"}']) == memory["timeline_entries"]
    assert float(gauges['statestore_timeline_bytes{store="prices"}']) == memory["timeline_bytes"]

    expired = client.get("/v1/stores/prices/keys/k1", params={"as_of_time": str(floor - 1)})
    problem = assert_problem(expired, 410, "history-expired")
    assert problem["time_floor"] == floor
    assert problem["as_of_time"] == floor - 1
    below = client.post(
        "/v1/stores/prices/keys:batchGet", json={"keys": ["k1", "k2"], "as_of_times": [floor, floor - 1]}
    )
    assert assert_problem(below, 410, "history-expired")["time_floor"] == floor
    bad = client.get("/v1/stores/prices/keys/k1", params={"as_of_time": "yesterday"})
    assert assert_problem(bad, 422, "invalid-parameter")
    uneven = client.post(
        "/v1/stores/prices/keys:batchGet", json={"keys": ["k1", "k2"], "as_of_times": [floor]}
    )
    assert assert_problem(uneven, 400, "malformed-request")
    both = client.post(
        "/v1/stores/prices/keys:batchGet",
        params={"as_of_time": str(floor)},
        json={"keys": ["k1"], "as_of_times": [floor]},
    )
    assert assert_problem(both, 422, "invalid-parameter")
    # An empty batch with its empty times is an empty answer, not a time read of nothing.
    empty = client.post("/v1/stores/prices/keys:batchGet", json={"keys": [], "as_of_times": []})
    assert empty.status_code == 200, empty.text
    assert empty.json()["values"] == []
    plain = client.get("/v1/stores/plain/keys/k1", params={"as_of_time": str(floor)})
    assert assert_problem(plain, 400, "history-not-kept")

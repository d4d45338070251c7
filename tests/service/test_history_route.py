"""``GET /v1/stores/{store}/history`` on the real broker, real RocksDB and real uvicorn: the pages,
read as of one position, answer every key as of every time as the brute-force model does; a time
below the floor is 410, no ``as_of_time`` 422, a store without history 400, a page above the limit
413, and the OpenAPI document lists the route only for stores that keep history."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import httpx
import pyarrow as pa

from service.local.broker import LocalBroker
from store import EVERY_TIME
from tests.service.conftest import assert_problem
from tests.service.test_as_of_time import KEYS, PARTITIONS, produce_after_ready, records, serve  # noqa: F401  (fixture)
from tests.service.test_integration import wait_ready
from tests.support.kafka import make_producer
from tests.support.timed import produce_stamped, value_at

ARROW = "application/vnd.apache.arrow.stream"
Rows = dict[bytes, list[tuple[int, bytes | None, bool]]]


def read_pages(
    client: httpx.Client, params: dict[str, str], limit: int
) -> tuple[Rows, dict[bytes, bytes], int]:
    """Every key's rows, the first page's schema metadata, and the pages read."""
    rows: Rows = {}
    pages, first_metadata, position = 0, {}, None
    after: str | None = None
    while True:
        asked = {**params, "limit": str(limit), **({} if after is None else {"after": after})}
        if position is not None:  # later pages exactly as of the first one's position
            asked.pop("min_position", None)
            asked.pop("timeout_ms", None)
            asked["as_of"] = position
        answer = client.get("/v1/stores/prices/history", params=asked)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == ARROW
        position = position or answer.headers["statestore-position"]
        table = pa.ipc.open_stream(answer.content).read_all()
        assert table.schema.names == ["key", "time", "value", "unsettled"]
        assert table.schema.field("time").type == pa.timestamp("ms")
        metadata = table.schema.metadata or {}
        first_metadata = first_metadata or metadata
        pages += 1
        times = [EVERY_TIME if t is None else t for t in table.column("time").cast(pa.int64()).to_pylist()]
        columns = zip(table.column("key").to_pylist(), times, table.column("value").to_pylist(), strict=True)
        for key, time, value in columns:
            rows.setdefault(key, []).append((time, value, False))
        if b"next_after" not in metadata:
            return rows, first_metadata, pages
        after = metadata[b"next_after"].decode()


def first_row(rows: Rows, key: bytes, at: int) -> bytes | None:
    for time, value, _ in rows.get(key, []):
        if time <= at:
            return value
    return None


def test_the_history_pages_answer_every_key_as_of_every_time(
    make_topic: Callable[..., str],
    broker: LocalBroker,
    serve: Callable[..., httpx.Client],  # noqa: F811  (the fixture)
    tmp_path: Path,
) -> None:
    rng = random.Random(31)
    topic, plain_topic = make_topic(partitions=PARTITIONS), make_topic(partitions=1)
    producer = make_producer(broker.bootstrap_servers)
    before = produce_stamped(producer, topic, records(rng, 12, 1_000, 2_000))
    floor = max(r.timestamp for r in before)
    history = {"retention_offsets": 1_000_000}
    client = serve(
        [
            {"name": "prices", "topic": topic, "value_format": "json", "history": history},
            {"name": "plain", "topic": plain_topic, "value_format": "json"},
        ],
        tmp_path / "state",
    )
    wait_ready(client)
    log, end = produce_after_ready(producer, topic, rng, before)
    wait = {"min_position": end, "timeout_ms": "20000"}
    client.get("/v1/stores/prices", params=wait)
    rows, metadata, pages = read_pages(client, {**wait, "as_of_time": str(floor)}, limit=3)
    assert metadata[b"time_floor"] == str(floor).encode()
    assert pages > 2
    times = sorted(
        {floor, *(t + d for r in log for t in [r.timestamp] for d in (-1, 0, 1) if t + d >= floor)}
    )
    for key in [*KEYS, "never"]:
        for at in times:
            assert first_row(rows, key.encode(), at) == value_at(log, key.encode(), at), (key, at)

    below = client.get("/v1/stores/prices/history", params={"as_of_time": str(floor - 1)})
    assert assert_problem(below, 410, "history-expired")["time_floor"] == floor
    assert_problem(client.get("/v1/stores/prices/history"), 422, "invalid-parameter")
    assert_problem(
        client.get("/v1/stores/plain/history", params={"as_of_time": "5"}), 400, "history-not-kept"
    )
    too_many = client.get("/v1/stores/prices/history", params={"as_of_time": str(floor), "limit": "100000"})
    assert_problem(too_many, 413, "page-too-large")
    paths = client.get("/openapi.json").json()["paths"]
    assert "/v1/stores/prices/history" in paths
    assert "/v1/stores/plain/history" not in paths
    options = paths["/v1/stores/prices/history"]["get"]["parameters"][-1]
    assert options["required"] is True
    assert options["schema"]["required"] == ["as_of_time"]

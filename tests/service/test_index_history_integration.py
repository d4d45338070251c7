"""Index lookups and as_of reads through the service over real stores: the real broker, real RocksDB,
real uvicorn servers."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, Message

from service.app import create_app
from service.local.broker import LocalBroker
from service.settings import Settings, store_configs
from store import Position, Store, StoreTuning
from tests.service.test_integration import wait_ready
from tests.support.kafka import make_producer
from tests.support.server import serve_app

ARROW = "application/vnd.apache.arrow.stream"
TUNING = StoreTuning().replace(
    metadata_check_interval_seconds=0.5,
    backoff_initial_seconds=0.05,
    backoff_max_seconds=0.5,
    history_prune_interval_seconds=0.1,
)


@dataclasses.dataclass(frozen=True)
class Delivered:
    partition: int
    offset: int
    key: bytes
    value: bytes | None


def produce_logged(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> list[Delivered]:
    """Produce keyed records and return each with the partition and offset the broker gave it."""
    producer = make_producer(bootstrap)
    delivered: list[Delivered] = []
    errors: list[KafkaError] = []

    def report(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
        else:
            delivered.append(Delivered(message.partition(), message.offset(), message.key(), message.value()))

    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=report)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return delivered


def end_of(log: list[Delivered]) -> Position:
    ends: dict[int, int] = {}
    for record in log:
        ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
    return Position(ends)


def table_at(log: list[Delivered], position: Position | None = None) -> dict[bytes, bytes]:
    """The model: each key's last record below ``position`` on its partition (all records without)."""
    table: dict[bytes, bytes] = {}
    for record in sorted(log, key=lambda r: (r.partition, r.offset)):
        if position is not None and record.offset >= position.get(record.partition, 0):
            continue
        if record.value is None:
            table.pop(record.key, None)
        else:
            table[record.key] = record.value
    return table


def rows_of(table: dict[bytes, bytes], ticker: str) -> list[str]:
    return sorted(k.decode() for k, v in table.items() if orjson.loads(v)["ticker"] == ticker)


@pytest.fixture
def serve(broker: LocalBroker) -> Iterator[Callable[..., tuple[httpx.Client, dict[str, Store]]]]:
    """Factory: one service instance over real ``Store``s (started here, stopped at the end)."""
    with contextlib.ExitStack() as stack:

        def make(stores: list[dict[str, Any]], state_dir: Path) -> tuple[httpx.Client, dict[str, Store]]:
            settings = Settings(
                kafka={"bootstrap_servers": broker.bootstrap_servers}, state_dir=state_dir, stores=stores
            )
            built = {c.name: Store(dataclasses.replace(c, tuning=TUNING)) for c in store_configs(settings)}
            for store in built.values():
                store.start()
                stack.callback(store.stop)
            url = stack.enter_context(serve_app(create_app(settings, built)))
            client = stack.enter_context(httpx.Client(base_url=url, timeout=30))
            return client, built

        yield make


POSITIONS = {
    "name": "positions",
    "value_format": "json",
    "indexes": [{"name": "by_ticker", "field": "ticker"}],
}


def test_positions_and_tickers_both_directions_while_both_change(
    make_topic: Callable[..., str], broker: LocalBroker, serve: Callable[..., Any], tmp_path: Path
) -> None:
    positions_topic, tickers_topic = make_topic(partitions=3), make_topic(partitions=2)
    bootstrap = broker.bootstrap_servers
    symbols = ["AAPL", "MSFT", "GOOG", "IBM", "BRK/B"]
    ticker_log = produce_logged(
        bootstrap,
        tickers_topic,
        [(s.encode(), orjson.dumps({"symbol": s, "name": f"{s} Inc."})) for s in symbols],
    )
    rng = random.Random(11)
    position_log = produce_logged(
        bootstrap,
        positions_topic,
        [
            (f"pos-{i:03}".encode(), orjson.dumps({"ticker": rng.choice(symbols), "qty": i}))
            for i in range(60)
        ],
    )
    client, _ = serve(
        [
            {**POSITIONS, "topic": positions_topic},
            {"name": "tickers", "topic": tickers_topic, "value_format": "json"},
        ],
        tmp_path / "state",
    )
    wait_ready(client)

    for round_number in range(4):
        positions, tickers = table_at(position_log), table_at(ticker_log)
        wait = {"timeout_ms": 20_000}
        p_at = {**wait, "min_position": str(end_of(position_log))}
        t_at = {**wait, "min_position": str(end_of(ticker_log))}
        # A position's ticker: the position, then its ticker by key (absent once the ticker is deleted).
        some = sorted(positions)[::7]
        answer = client.post(
            "/v1/stores/positions/keys:batchGet", params=p_at, json={"keys": [k.decode() for k in some]}
        )
        wanted = [orjson.loads(positions[k])["ticker"] for k in some]
        assert [v["ticker"] for v in answer.json()["values"]] == wanted
        looked_up = client.post("/v1/stores/tickers/keys:batchGet", params=t_at, json={"keys": wanted}).json()
        assert looked_up["values"] == [
            orjson.loads(tickers[t.encode()]) if t.encode() in tickers else None for t in wanted
        ]
        single = client.get(f"/v1/stores/tickers/keys/{wanted[0].replace('/', '%2F')}", params=t_at)
        assert single.status_code == (200 if wanted[0].encode() in tickers else 404)
        # A ticker's positions: through the index, one value at a time (paged) and in one batch.
        for symbol in symbols:
            keys: list[str] = []
            after: str | None = None
            while True:
                query = {**p_at, "limit": 4, **({"after": after} if after else {})}
                page = client.get(
                    f"/v1/stores/positions/indexes/by_ticker/{symbol.replace('/', '%2F')}", params=query
                )
                assert page.status_code == 200, page.text
                assert all(
                    orjson.loads(positions[i["key"].encode()]) == i["value"] for i in page.json()["items"]
                )
                keys += [item["key"] for item in page.json()["items"]]
                after = page.json()["next_after"]
                if after is None:
                    break
            assert keys == rows_of(positions, symbol), (round_number, symbol)
        batch = _arrow_index_batch(client, [*symbols, "NONE"], p_at)
        for symbol in symbols:
            pairs = zip(batch["value"], batch["key"], strict=True)
            matched = [k.decode() if k is not None else None for v, k in pairs if v == symbol]
            assert matched == (rows_of(positions, symbol) or [None])
        assert batch["key"][-1] is None
        assert batch["value"][-1] == "NONE"

        # Both tables change: positions move between tickers or are deleted, tickers are renamed
        # or deleted (their positions then point at no ticker).
        changes: list[tuple[bytes, bytes | None]] = []
        for key in rng.sample(sorted(positions), 12):
            changes.append(
                (
                    key,
                    None if rng.random() < 0.3 else orjson.dumps({"ticker": rng.choice(symbols), "qty": -1}),
                )
            )
        changes += [
            (f"pos-new-{round_number}".encode(), orjson.dumps({"ticker": symbols[round_number], "qty": 0}))
        ]
        position_log += produce_logged(bootstrap, positions_topic, changes)
        renamed = symbols[round_number].encode()
        ticker_changes: list[tuple[bytes, bytes | None]] = [
            (renamed, orjson.dumps({"symbol": renamed.decode(), "name": f"v{round_number}"}))
        ]
        if round_number == 2:
            ticker_changes.append((b"IBM", None))
        ticker_log += produce_logged(bootstrap, tickers_topic, ticker_changes)


def _arrow_index_batch(
    client: httpx.Client, values: list[str], params: dict[str, Any]
) -> dict[str, list[Any]]:
    table = pa.table({"value": pa.array(values, pa.string())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    response = client.post(
        "/v1/stores/positions/indexes/by_ticker:batchGet",
        params=params,
        content=sink.getvalue().to_pybytes(),
        headers={"content-type": ARROW},
    )
    assert response.status_code == 200, response.text
    answer: dict[str, list[Any]] = pa.ipc.open_stream(response.content).read_all().to_pydict()
    return answer


def _reads_as_of(
    client: httpx.Client, position: Position, keys: list[str], symbols: list[str]
) -> dict[str, Any]:
    """Every kind of read as of ``position``: keys, a scan, index lookups (GET and batch)."""
    at = {"as_of": str(position), "timeout_ms": 20_000}
    got = client.post("/v1/stores/positions/keys:batchGet", params=at, json={"keys": keys})
    assert got.status_code == 200, got.text
    assert Position.parse(got.headers["Statestore-Position"]) == position
    scan = client.get("/v1/stores/positions/scan", params={**at, "prefix": "pos-", "limit": 1000}).json()
    lookups = {
        s: client.get(f"/v1/stores/positions/indexes/by_ticker/{s}", params={**at, "limit": 1000}).json()
        for s in symbols
    }
    return {
        "values": got.json()["values"],
        "scan": scan,
        "lookups": lookups,
        "batch": _arrow_index_batch(client, symbols, at),
        "single": client.get(f"/v1/stores/positions/keys/{keys[0]}", params=at).status_code,
    }


def test_two_replicas_answer_as_of_reads_identically(
    make_topic: Callable[..., str], broker: LocalBroker, serve: Callable[..., Any], tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    bootstrap = broker.bootstrap_servers
    symbols = ["AAPL", "MSFT", "IBM"]
    rng = random.Random(5)

    def changes(count: int) -> list[tuple[bytes, bytes | None]]:
        return [
            (
                f"pos-{rng.randrange(40):02}".encode(),
                None
                if rng.random() < 0.2
                else orjson.dumps({"ticker": rng.choice(symbols), "n": rng.randrange(10**6)}),
            )
            for _ in range(count)
        ]

    config = [{**POSITIONS, "topic": topic, "history": {"retention_offsets": 100_000}}]
    log = produce_logged(bootstrap, topic, changes(80))
    first, _ = serve(config, tmp_path / "first")
    wait_ready(first)
    # The second replica starts later, then falls behind: it is stopped while the topic moves on.
    with contextlib.ExitStack() as second_stack:
        second_settings = Settings(
            kafka={"bootstrap_servers": bootstrap}, state_dir=tmp_path / "second", stores=config
        )
        second_store = Store(dataclasses.replace(store_configs(second_settings)[0], tuning=TUNING))
        second_store.start()
        second_stack.callback(second_store.stop)
        url = second_stack.enter_context(serve_app(create_app(second_settings, {"positions": second_store})))
        with httpx.Client(base_url=url, timeout=30) as second:
            wait_ready(second)
    positions: list[Position] = [end_of(log)]
    for _ in range(3):
        log += produce_logged(bootstrap, topic, changes(60))
        positions.append(end_of(log))
    keys = [f"pos-{i:02}" for i in range(40)]
    answers_first = [_reads_as_of(first, p, keys, symbols) for p in positions]

    # Restarted on its own state directory, it catches up and answers the same for the same positions.
    second_again, _ = serve(config, tmp_path / "second")
    wait_ready(second_again)
    answers_second = [_reads_as_of(second_again, p, keys, symbols) for p in reversed(positions)][::-1]
    assert answers_first == answers_second
    for position, answer in zip(positions, answers_first, strict=True):
        model = table_at(log, position)
        assert answer["values"] == [
            orjson.loads(model[k.encode()]) if k.encode() in model else None for k in keys
        ]
        assert [item["key"] for item in answer["scan"]["items"]] == sorted(k.decode() for k in model)
        for symbol in symbols:
            assert [item["key"] for item in answer["lookups"][symbol]["items"]] == rows_of(model, symbol)
    assert answers_first[0] != answers_first[-1], "the table never changed between the positions"


def test_retention_expiry_is_410_with_the_floor(
    make_topic: Callable[..., str], broker: LocalBroker, serve: Callable[..., Any], tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    bootstrap = broker.bootstrap_servers
    log = produce_logged(bootstrap, topic, [(b"pos-1", b'{"ticker":"AAPL","v":0}')])
    client, _ = serve(
        [{**POSITIONS, "topic": topic, "history": {"retention_offsets": 5}}], tmp_path / "state"
    )
    wait_ready(client)
    start = end_of(log)
    assert client.get("/v1/stores/positions").json()["history"] == {
        "floor": str(start),
        "retention_ms": None,
        "retention_offsets": 5,
    }
    for v in range(1, 21):
        log += produce_logged(bootstrap, topic, [(b"pos-1", orjson.dumps({"ticker": "AAPL", "v": v}))])
    head = end_of(log)
    floor = Position({0: head[0] - 5})
    deadline = time.monotonic() + 30
    info = client.get("/v1/stores/positions", params={"min_position": str(head)}).json()
    while info["history"]["floor"] != str(floor) and time.monotonic() < deadline:
        time.sleep(0.05)
        info = client.get("/v1/stores/positions").json()
    assert info["history"]["floor"] == str(floor)

    for response in (
        client.get("/v1/stores/positions/keys/pos-1", params={"as_of": str(start)}),
        client.post(
            "/v1/stores/positions/keys:batchGet", params={"as_of": str(start)}, json={"keys": ["pos-1"]}
        ),
        client.get("/v1/stores/positions/indexes/by_ticker/AAPL", params={"as_of": str(start)}),
    ):
        body = response.json()
        assert response.status_code == 410, response.text
        assert body["type"] == "urn:statestore:problem:history-expired"
        assert (body["store"], body["floor"], body["as_of"]) == ("positions", str(floor), str(start))
    at_floor = client.get("/v1/stores/positions/keys/pos-1", params={"as_of": str(floor)})
    assert at_floor.status_code == 200
    assert at_floor.json() == orjson.loads(table_at(log, floor)[b"pos-1"])
    assert at_floor.json()["v"] == floor[0] - 1  # the record at offset v holds v

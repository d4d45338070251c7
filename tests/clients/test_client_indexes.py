"""Index lookups and exact (``as_of``) reads, sync and async, against the real service fed by the broker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from clients import AsyncStatestoreClient, StatestoreClient
from clients import exceptions as e
from clients.retry import RetryPolicy
from service.local.broker import LocalBroker
from tests.clients.conftest import real_service
from tests.clients.portfolio import INDEX, TICKERS, by_ticker, position, position_round
from tests.support.kafka import create_topic, make_producer, unique_topic
from tests.support.stores import Delivered, end_of, model_as_of, produce_logged, wait_until
from wire.position import Position

NO_RETRY = RetryPolicy(max_attempts=1)


def partition_of(key: bytes) -> int:
    return sum(key) % 2


class Portfolio:
    """The service, a producer and every record delivered so far (the model's input)."""

    def __init__(self, url: str, topics: dict[str, str], producer: Producer) -> None:
        self.url = url
        self.topics = topics
        self.producer = producer
        self.delivered: dict[str, list[Delivered]] = {name: [] for name in topics}

    def produce(self, store: str, records: list[tuple[bytes | None, bytes | None]]) -> Position:
        """Produce, wait until the service has read it all, and return the position now."""
        self.delivered[store] += produce_logged(
            self.producer, self.topics[store], records, partitions=partition_of
        )
        end = end_of(self.delivered[store])
        with StatestoreClient(self.url) as client:
            wait_until(lambda: client.position(store).reaches(end), 30, f"{store} at {end}")
        return end

    def model(self, store: str, as_of: Position) -> dict[bytes, bytes]:
        return model_as_of(self.delivered[store], as_of)


@pytest.fixture(scope="module")
def portfolio(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portfolio]:
    names = ("positions", "plain", "shortlived")
    topics = {name: unique_topic(name) for name in names}
    producer = make_producer(broker.bootstrap_servers)
    seeded: dict[str, list[Delivered]] = {}
    for name, topic in topics.items():
        create_topic(broker.bootstrap_servers, topic, partitions=2)
        # History starts where the store is when first READY; every partition starts non-empty.
        seeds = [(b"seed-0", b'{"seed": 0}'), (b"seed-1", b'{"seed": 1}')]
        seeded[name] = produce_logged(producer, topic, seeds, partitions=lambda key: key[-1] - ord("0"))
    stores = {name: (topics[name], "json") for name in names}
    extra: dict[str, dict[str, Any]] = {
        "positions": {**INDEX, "history": {"retention_offsets": 100_000}},
        "plain": INDEX,
        "shortlived": {"history": {"retention_offsets": 3}},
    }
    with real_service(broker.bootstrap_servers, tmp_path_factory.mktemp("state"), stores, extra) as url:
        portfolio = Portfolio(url, topics, producer)
        portfolio.delivered.update(seeded)
        yield portfolio


def test_as_of_reads_and_index_lookups_answer_exactly_the_model_at_each_position(
    portfolio: Portfolio,
) -> None:
    first = portfolio.produce("positions", position_round(seed=1, count=300, ids=120))
    second = portfolio.produce("positions", position_round(seed=2, count=200, ids=120))
    keys = [f"pos-{i:04d}" for i in range(125)]
    with StatestoreClient(portfolio.url, batch_size=40) as client:
        assert client.position("positions") == second
        for as_of in (first, second):
            model = portfolio.model("positions", as_of)
            expected = {k.decode(): json.loads(v) for k, v in model.items()}
            assert client.get_many("positions", keys, as_of=as_of) == [expected.get(k) for k in keys]
            assert client.get("positions", "pos-0007", as_of=as_of) == expected.get("pos-0007")
            positions = {k: v for k, v in expected.items() if k.startswith("pos-")}
            assert dict(client.scan("positions", "pos-", page_size=17, as_of=as_of)) == positions
            index = by_ticker(model)
            assert client.index_get_many(
                "positions", "by_ticker", TICKERS, as_of=as_of, limit_per_value=9
            ) == {symbol: index.get(symbol, []) for symbol in TICKERS}
            for symbol in ("AAPL", "BRK/B", "Zoë", "NOPE"):
                found = list(client.index_lookup("positions", "by_ticker", symbol, as_of=as_of, page_size=7))
                assert found == index.get(symbol, [])
        # The two versions differ, so the answers above could not both be right by accident.
        assert portfolio.model("positions", first) != portfolio.model("positions", second)
        # A consistent view reads the position it was made at, whatever comes after.
        view = client.consistent("positions")
        assert view.position == second
        portfolio.produce("positions", [(b"pos-0001", position(1, "IBM", 99_999)), (b"pos-0002", None)])
        latest = client.get_many("positions", ["pos-0001", "pos-0002"])
        assert latest == [{"ticker": "IBM", "quantity": 99_999, "account": "acct-1"}, None]
        then = {k.decode(): json.loads(v) for k, v in portfolio.model("positions", second).items()}
        assert view.get_many(["pos-0001", "pos-0002"]) == [then.get("pos-0001"), then.get("pos-0002")]
        assert view.index_get_many("by_ticker", ["IBM"]) == {
            "IBM": by_ticker(portfolio.model("positions", second)).get("IBM", [])
        }

    async def read_async() -> None:
        async with AsyncStatestoreClient(portfolio.url, batch_size=40) as client:
            view = await client.consistent("positions", second)
            model = portfolio.model("positions", second)
            index = by_ticker(model)
            assert await view.index_get_many("by_ticker", TICKERS) == {s: index.get(s, []) for s in TICKERS}
            assert [kv async for kv in view.index_lookup("by_ticker", "MSFT", page_size=5)] == index["MSFT"]
            assert {k: v async for k, v in view.scan("pos-", page_size=50)} == {
                k.decode(): json.loads(v) for k, v in model.items() if k.startswith(b"pos-")
            }
            present = min(k for k in model if k.startswith(b"pos-"))
            assert await view.get(present.decode()) == json.loads(model[present])
            assert await view.get("pos-9999") is None

    asyncio.run(read_async())


def test_index_pages_paged_on_beyond_the_batch_limit_in_row_key_order(portfolio: Portfolio) -> None:
    big = [(f"big-{i:03d}".encode(), position(i, "BIG", i)) for i in range(60)]
    at = portfolio.produce("plain", big)
    expected = [(f"big-{i:03d}", json.loads(position(i, "BIG", i))) for i in range(60)]
    with StatestoreClient(portfolio.url) as client:
        assert list(client.index_lookup("plain", "by_ticker", "BIG", page_size=7)) == expected
        answer = client.index_get_many(
            "plain", "by_ticker", ["BIG", "NONE", "BIG"], limit_per_value=8, min_position=at
        )
        assert answer == {"BIG": expected, "NONE": []}
        table = client.index_arrow("plain", "by_ticker", pa.array(["NONE", "BIG"]), limit_per_value=25)
        assert table.column("value").to_pylist() == ["NONE"] + ["BIG"] * 60
        assert table.column("key").to_pylist() == [None] + [k.encode() for k, _ in expected]


def test_index_and_history_problems_are_typed(portfolio: Portfolio) -> None:
    with StatestoreClient(portfolio.url, retry=NO_RETRY) as client:
        with pytest.raises(e.UnknownIndexError):
            list(client.index_lookup("positions", "by_nothing", "AAPL"))
        with pytest.raises(e.UnknownIndexError):
            client.index_get_many("shortlived", "by_ticker", ["AAPL"])
        with pytest.raises(e.HistoryNotKeptError):
            client.get("plain", "big-001", as_of="0:1")
        with pytest.raises(e.HistoryNotKeptError):
            client.index_get_many("plain", "by_ticker", ["BIG"], as_of="0:1")
        with pytest.raises(ValueError, match="not both"):
            client.get("positions", "pos-0001", as_of="0:1", min_position="0:1")
        with pytest.raises(e.InvalidPositionError):
            client.get("positions", "pos-0001", as_of="yesterday")


def test_an_as_of_older_than_the_retained_history_is_refused_with_the_floor(portfolio: Portfolio) -> None:
    early = portfolio.produce("shortlived", [(b"k", b'{"v": 0}')])
    for version in range(1, 30):
        portfolio.produce("shortlived", [(b"k", json.dumps({"v": version}).encode())])
    with StatestoreClient(portfolio.url, retry=NO_RETRY) as client:

        def expired() -> bool:
            try:
                client.get("shortlived", "k", as_of=early)
            except e.HistoryExpiredError:
                return True
            return False

        # Old versions are pruned in the background, a bounded amount at a time.
        wait_until(expired, 30, "the early position to fall out of the retained history")
        with pytest.raises(e.HistoryExpiredError) as caught:
            client.get("shortlived", "k", as_of=early)
        floor = caught.value.floor
        assert floor is not None
        assert floor.reaches(early)
        assert floor != early
        assert client.get("shortlived", "k", as_of=floor) == json.loads(
            portfolio.model("shortlived", floor)[b"k"]
        )


def test_views_of_both_flavours_offer_every_read_at_their_position(portfolio: Portfolio) -> None:
    first = portfolio.produce(
        "positions", [(b"view-1", position(1, "VIEWS", 1)), (b"view-2", position(2, "VIEWS", 2))]
    )
    second = portfolio.produce("positions", [(b"view-2", None)])
    then, now = (portfolio.model("positions", at) for at in (first, second))
    rows_then, rows_now = (by_ticker(model)["VIEWS"] for model in (then, now))
    assert rows_then != rows_now
    keys = pa.array([b"view-1", b"view-2"], pa.binary())
    views = pa.array(["VIEWS"])
    with StatestoreClient(portfolio.url, retry=NO_RETRY) as client:
        consistent, pinned = client.consistent("positions", first), client.pinned("positions")
        assert consistent.index_arrow("by_ticker", views).column("key").to_pylist() == [b"view-1", b"view-2"]
        assert list(pinned.index_lookup("by_ticker", "VIEWS")) == rows_now
        assert pinned.index_get_many("by_ticker", ["VIEWS"]) == {"VIEWS": rows_now}
        assert pinned.index_arrow("by_ticker", views).column("key").to_pylist() == [b"view-1"]
    with StatestoreClient(portfolio.url, retry=NO_RETRY, deadline=1.0) as client:
        ahead = client.pinned("positions", {0: 10**9, 1: 10**9})
        with pytest.raises(e.PositionNotReachedError):
            ahead.index_get_many("by_ticker", ["VIEWS"])

    async def read_async() -> None:
        async with AsyncStatestoreClient(portfolio.url, retry=NO_RETRY) as client:
            consistent = await client.consistent("positions", first)
            assert (await consistent.get_arrow(keys)).to_pylist() == [then[b"view-1"], then[b"view-2"]]
            assert (await consistent.index_arrow("by_ticker", views)).num_rows == 2
            pinned = await client.pinned("positions")
            assert [row async for row in pinned.index_lookup("by_ticker", "VIEWS")] == rows_now
            assert await pinned.index_get_many("by_ticker", ["VIEWS"]) == {"VIEWS": rows_now}
            assert (await pinned.get_arrow(keys)).to_pylist() == [now[b"view-1"], None]

    asyncio.run(read_async())

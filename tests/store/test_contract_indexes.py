"""The index contract every store backend keeps (in memory and RocksDB): what the HTTP index routes
are tested with over the in-memory store, the real store answers the same way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from service.local.broker import LocalBroker
from store import MAX_SCAN_LIMIT, IndexSpec, IndexStatus, ScanLimitError, UnknownIndexError
from tests.store.test_contract import Backend, opened_backend

INDEXES = (IndexSpec("by_ticker", "ticker"), IndexSpec("by_qty", "lot.qty"))
TICKERS = ["AAPL", "MSFT", "BRK/B", "Ünï €"]


def position_row(i: int) -> bytes:
    return orjson.dumps({"id": i, "ticker": TICKERS[i % 4], "lot": {"qty": i % 3}})


ROWS = [(f"pos-{i:03}".encode(), position_row(i)) for i in range(60)]
# Rows that no index holds: no such field, not an object on the way, not JSON, a value not indexable.
UNINDEXED = [
    (b"odd-1", b'{"name": "no ticker"}'),
    (b"odd-2", b'{"ticker": {"nested": "AAPL"}, "lot": 3}'),
    (b"odd-3", b"not json"),
    (b"odd-4", b'{"ticker": null, "lot": {"qty": [1]}}'),
    (b"odd-5", b""),
]


def expected(ticker: str) -> list[tuple[bytes, bytes]]:
    return sorted((key, value) for key, value in ROWS if orjson.loads(value)["ticker"] == ticker)


@pytest.fixture(scope="module", params=["memory", "rocksdb"])
def indexed(
    request: pytest.FixtureRequest, broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    """A store of each kind with ``INDEXES``, holding ``ROWS`` and ``UNINDEXED`` (read only)."""
    directory = tmp_path_factory.mktemp("indexed")
    with opened_backend(request.param, broker, directory, indexes=INDEXES) as opened:
        # Reversed, over partitions: the order rows arrive in is not the order lookups answer.
        opened.write(list(reversed(ROWS[30:])), partition=1)
        opened.write(list(reversed(ROWS[:30])) + UNINDEXED, partition=0)
        yield opened


@pytest.fixture(params=["memory", "rocksdb"])
def writable(request: pytest.FixtureRequest, broker: LocalBroker, tmp_path: Path) -> Iterator[Backend]:
    with opened_backend(request.param, broker, tmp_path, indexes=INDEXES) as opened:
        yield opened


def lookup(
    backend: Backend, index: str, value: bytes, after: bytes | None = None
) -> list[tuple[bytes, bytes]]:
    with backend.store.view() as view:
        return view.index_scan(index, value, after=after).items


@pytest.mark.parametrize("ticker", TICKERS)
def test_a_lookup_answers_the_rows_with_the_value_in_row_key_order(indexed: Backend, ticker: str) -> None:
    with indexed.store.view() as view:
        page = view.index_scan("by_ticker", ticker.encode())
    assert page.items == expected(ticker)
    assert page.next_after is None


def test_a_number_in_a_nested_field_is_looked_up_by_its_json_text(indexed: Backend) -> None:
    qty_one = sorted((key, value) for key, value in ROWS if orjson.loads(value)["lot"]["qty"] == 1)
    assert lookup(indexed, "by_qty", b"1") == qty_one
    assert lookup(indexed, "by_qty", b"1.0") == []
    assert lookup(indexed, "by_qty", b'"1"') == []


def test_rows_without_an_indexable_value_are_in_no_index(indexed: Backend) -> None:
    asked = [("by_ticker", b"AAPL"), ("by_ticker", b"null"), ("by_qty", b"3"), ("by_qty", b"[1]")]
    for index, value in asked:
        assert not any(key.startswith(b"odd") for key, _ in lookup(indexed, index, value))
    assert lookup(indexed, "by_ticker", b"") == []
    assert lookup(indexed, "by_ticker", b"aapl") == []
    assert lookup(indexed, "by_ticker", b"AAP") == []  # an index matches whole values, not prefixes


@pytest.mark.parametrize("limit", [1, 4, 14, 15, 16])
def test_paging_a_lookup_with_next_after_visits_every_row_once(indexed: Backend, limit: int) -> None:
    seen: list[tuple[bytes, bytes]] = []
    after: bytes | None = None
    pages = 0
    with indexed.store.view() as view:
        while True:
            page = view.index_scan("by_ticker", b"AAPL", after=after, limit=limit)
            pages += 1
            assert len(page.items) <= limit
            seen += page.items
            if page.next_after is None:
                break
            assert len(page.items) == limit
            assert page.next_after == page.items[-1][0]
            after = page.next_after
    assert seen == expected("AAPL")
    # A page that holds exactly the rest of the rows says there is no more.
    assert pages == -(-len(expected("AAPL")) // limit)


@pytest.mark.parametrize("after", [b"", b"pos-020", b"pos-0201", b"pos-058", b"zzz", b"a"])
def test_the_after_cursor_of_a_lookup_is_strictly_after(indexed: Backend, after: bytes) -> None:
    rows = [row for row in expected("MSFT") if row[0] > after]
    assert lookup(indexed, "by_ticker", b"MSFT", after=after) == rows


def test_an_unknown_index_and_a_limit_below_one_are_refused(indexed: Backend) -> None:
    with indexed.store.view() as view:
        with pytest.raises(UnknownIndexError) as unknown:
            view.index_scan("by_name", b"AAPL")
        assert unknown.value.index == "by_name"
        assert list(unknown.value.known) == ["by_qty", "by_ticker"]
        for limit in (0, -1):
            with pytest.raises(ScanLimitError, match="at least 1"):
                view.index_scan("by_ticker", b"AAPL", limit=limit)


def test_the_status_names_every_index_ready(indexed: Backend) -> None:
    assert indexed.store.status().indexes == {
        "by_ticker": IndexStatus(field="ticker", state="ready", rows_indexed=None),
        "by_qty": IndexStatus(field="lot.qty", state="ready", rows_indexed=None),
    }


def test_updates_move_rows_between_values_and_tombstones_and_bad_values_drop_them(writable: Backend) -> None:
    aapl = b'{"ticker": "AAPL"}'
    writable.write([(b"r1", aapl), (b"r2", aapl), (b"r3", aapl)])
    with writable.store.view() as before:
        writable.write([(b"r1", b'{"ticker": "MSFT"}'), (b"r2", None), (b"r3", b"oops")])
        # A view taken before the writes answers lookups as of its own position.
        assert [key for key, _ in before.index_scan("by_ticker", b"AAPL").items] == [b"r1", b"r2", b"r3"]
    assert lookup(writable, "by_ticker", b"AAPL") == []
    assert lookup(writable, "by_ticker", b"MSFT") == [(b"r1", b'{"ticker": "MSFT"}')]
    writable.write([(b"r3", b'{"ticker": "AAPL", "v": 2}'), (b"r2", aapl)])
    assert lookup(writable, "by_ticker", b"AAPL") == [(b"r2", aapl), (b"r3", b'{"ticker": "AAPL", "v": 2}')]


def test_lookup_pages_are_bounded_by_max_scan_limit(writable: Backend) -> None:
    keys = [b"m/%06d" % i for i in range(MAX_SCAN_LIMIT + 5)]
    writable.write([(key, b'{"ticker": "X"}') for key in keys])
    with writable.store.view() as view:
        page = view.index_scan("by_ticker", b"X", limit=MAX_SCAN_LIMIT * 10)
        assert [key for key, _ in page.items] == keys[:MAX_SCAN_LIMIT]
        assert page.next_after == keys[MAX_SCAN_LIMIT - 1]
        rest = view.index_scan("by_ticker", b"X", after=page.next_after, limit=MAX_SCAN_LIMIT * 10)
        assert [key for key, _ in rest.items] == keys[MAX_SCAN_LIMIT:]
        assert rest.next_after is None

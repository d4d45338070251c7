"""The ``as_of`` contract every store backend keeps (in memory and RocksDB): reads pinned to a
position, the history floor, and the refusals; what the HTTP ``as_of`` tests rely on of the
in-memory store, the real store answers the same way."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from service.local.broker import LocalBroker
from store import (
    HistoryExpiredError,
    HistoryNotKeptError,
    HistorySpec,
    IndexSpec,
    Position,
    PositionNotReachedError,
)
from tests.store.test_contract import Backend, opened_backend
from tests.support.stores import read_table

INDEXES = (IndexSpec("by_ticker", "ticker"),)
KEEP_ALL = HistorySpec(retention_offsets=1_000_000)


def row(ticker: str, qty: int) -> bytes:
    return orjson.dumps({"ticker": ticker, "qty": qty})


def opened(
    request: pytest.FixtureRequest, broker: LocalBroker, directory: Path, history: HistorySpec
) -> contextlib.AbstractContextManager[Backend]:
    return opened_backend(request.param, broker, directory, indexes=INDEXES, history=history)


@pytest.fixture(params=["memory", "rocksdb"])
def versions(
    request: pytest.FixtureRequest, broker: LocalBroker, tmp_path: Path
) -> Iterator[tuple[Backend, list[Position]]]:
    """A store of each kind keeping history, written in three versions over two partitions:

    first:  p1=AAPL/1 p2=AAPL/2 (partition 0), p3=MSFT/3 (partition 1)
    second: p1 moved to MSFT, p3 deleted
    third:  p4=AAPL/4
    """
    with opened(request, broker, tmp_path, KEEP_ALL) as backend:
        backend.write([(b"p1", row("AAPL", 1)), (b"p2", row("AAPL", 2))], partition=0)
        first = backend.write([(b"p3", row("MSFT", 3))], partition=1)
        backend.write([(b"p1", row("MSFT", 1))], partition=0)
        second = backend.write([(b"p3", None)], partition=1)
        third = backend.write([(b"p4", row("AAPL", 4))], partition=0)
        yield backend, [first, second, third]


def at(backend: Backend, position: Position) -> dict[bytes, bytes]:
    with backend.store.view(as_of=position) as view:
        return read_table(view)


def test_every_read_as_of_a_position_answers_that_version(versions: tuple[Backend, list[Position]]) -> None:
    backend, (first, second, third) = versions
    assert at(backend, first) == {b"p1": row("AAPL", 1), b"p2": row("AAPL", 2), b"p3": row("MSFT", 3)}
    assert at(backend, second) == {b"p1": row("MSFT", 1), b"p2": row("AAPL", 2)}
    assert at(backend, third) == {b"p1": row("MSFT", 1), b"p2": row("AAPL", 2), b"p4": row("AAPL", 4)}
    with backend.store.view(as_of=first) as view:
        assert view.position() == first
        assert view.get(b"p1") == row("AAPL", 1)
        assert view.get_many([b"p4", b"p3", b"p1"]) == [None, row("MSFT", 3), row("AAPL", 1)]
        assert [key for key, _ in view.prefix_scan(b"p", after=b"p1", limit=1).items] == [b"p2"]
        assert [key for key, _ in view.index_scan("by_ticker", b"AAPL").items] == [b"p1", b"p2"]
        assert [key for key, _ in view.index_scan("by_ticker", b"MSFT").items] == [b"p3"]
        paged = view.index_scan("by_ticker", b"AAPL", limit=1)
        assert (paged.items, paged.next_after) == ([(b"p1", row("AAPL", 1))], b"p1")
    with backend.store.view(as_of=second) as view:
        assert [key for key, _ in view.index_scan("by_ticker", b"MSFT").items] == [b"p1"]
        assert view.index_scan("by_ticker", b"AAPL", limit=1).next_after is None  # p2 was the last
    with backend.store.view() as latest:
        assert latest.position() == third == backend.store.position()


def test_partitions_an_as_of_does_not_name_count_as_zero(versions: tuple[Backend, list[Position]]) -> None:
    backend, (first, _, third) = versions
    only_partition_0 = Position({0: third[0]})
    with backend.store.view(as_of=only_partition_0) as view:
        # The view's position names every partition of the store, those not asked at 0.
        assert view.position() == Position({p: only_partition_0.get(p, 0) for p in third})
        assert view.get(b"p3") is None  # written to partition 1, not visible at 1:0
        assert view.get(b"p4") == row("AAPL", 4)
    assert at(backend, Position()) == {}
    assert at(backend, Position({1: first[1]})) == {b"p3": row("MSFT", 3)}


def test_an_as_of_ahead_of_the_store_is_refused_and_answers_once_reached(
    versions: tuple[Backend, list[Position]],
) -> None:
    backend, (_, _, third) = versions
    ahead = Position({0: third[0] + 1})
    with pytest.raises(PositionNotReachedError), backend.store.view(as_of=ahead):
        pass
    written = backend.write([(b"p5", row("IBM", 5))], partition=0)
    assert written.reaches(ahead)
    assert at(backend, ahead)[b"p5"] == row("IBM", 5)


def test_history_is_kept_from_before_the_first_write(versions: tuple[Backend, list[Position]]) -> None:
    backend, (first, _, _) = versions
    floor = backend.store.history_floor()
    assert floor is not None
    assert Position().reaches(floor), f"the floor {floor} is above the empty position"
    assert first.reaches(floor)


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
def test_a_store_without_history_refuses_as_of(kind: str, broker: LocalBroker, tmp_path: Path) -> None:
    with opened_backend(kind, broker, tmp_path, indexes=INDEXES) as backend:
        written = backend.write([(b"k", b"v")], partition=0)
        assert backend.store.history_floor() is None
        with pytest.raises(HistoryNotKeptError), backend.store.view(as_of=written):
            pass
        with backend.store.view() as view:
            assert view.get(b"k") == b"v"


@pytest.fixture(params=["memory", "rocksdb"])
def short(request: pytest.FixtureRequest, broker: LocalBroker, tmp_path: Path) -> Iterator[Backend]:
    """A store of each kind keeping the last 2 offsets of each partition."""
    with opened(request, broker, tmp_path, HistorySpec(retention_offsets=2)) as backend:
        yield backend


def wait_for_floor(backend: Backend, floor: Position, timeout: float = 60) -> Position:
    """The store's history floor once it reaches ``floor`` (the real store moves it on its own
    schedule, the in-memory one at once)."""
    deadline = time.monotonic() + timeout
    while True:
        current = backend.store.history_floor()
        if current is not None and current.reaches(floor):
            return current
        assert time.monotonic() < deadline, f"the history floor never reached {floor}: {current}"
        time.sleep(0.05)


def test_below_the_floor_an_as_of_is_history_expired_and_at_it_exact(short: Backend) -> None:
    positions = [short.write([(b"k", str(i).encode()), (b"j%d" % i, b"x")], partition=0) for i in range(4)]
    end = positions[-1]
    assert end[0] == 8
    floor = wait_for_floor(short, Position({0: 6}))
    assert floor[0] == 6
    with pytest.raises(HistoryExpiredError) as expired, short.store.view(as_of=positions[1]):
        pass
    assert expired.value.floor == floor
    assert "keeps history from position" in str(expired.value)
    with short.store.view(as_of=Position({0: 6})) as view:
        assert view.get(b"k") == b"2"
        assert view.get_many([b"j2", b"j3", b"j0"]) == [b"x", None, b"x"]
    assert at(short, end)[b"k"] == b"3"

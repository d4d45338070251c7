"""The read contract every store backend keeps: the in-memory store and the real RocksDB store.

The real store is fed through the broker, the in-memory one through ``apply``; both must answer
the same questions the same way (byte order, cursors, bounds, snapshots, position waits).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Producer

from service.local.broker import LocalBroker
from store import (
    MAX_SCAN_LIMIT,
    HistorySpec,
    IndexSpec,
    InMemoryStore,
    Position,
    ScanLimitError,
    ServableStore,
    Store,
    StoreClosedError,
    StoreConfig,
    StoreError,
    StoreState,
)
from tests.support.kafka import Record, create_topic, make_producer, unique_topic
from tests.support.stores import FAST, produce_tracked, read_table


@dataclasses.dataclass
class Backend:
    """A store under test and the way to write to it; ``write`` returns once the store has it."""

    store: ServableStore
    write: Callable[..., Position]
    stop: Callable[[], None]


def memory_backend(indexes: Sequence[IndexSpec] = (), history: HistorySpec | None = None) -> Backend:
    store = InMemoryStore("contract", indexes=indexes, history=history)
    offsets: dict[int, int] = {}

    def write(records: Sequence[Record], partition: int = 0) -> Position:
        batch = []
        for key, value in records:
            assert key is not None
            offset = offsets.get(partition, 0)
            batch.append((partition, offset, key, value))
            offsets[partition] = offset + 1
        store.apply(batch)
        return store.status().position

    return Backend(store, write, store.stop)


def rocksdb_backend(
    broker: LocalBroker,
    directory: Path,
    producer: Producer,
    indexes: Sequence[IndexSpec] = (),
    history: HistorySpec | None = None,
) -> Backend:
    topic = unique_topic("contract")
    create_topic(broker.bootstrap_servers, topic, partitions=3)
    store = Store(
        StoreConfig(
            name="contract",
            topic=topic,
            kafka={"bootstrap.servers": broker.bootstrap_servers},
            state_dir=directory,
            # History retention is applied often, so that a test can wait for it.
            tuning=FAST.replace(history_prune_interval_seconds=0.05),
            indexes=tuple(indexes),
            history=history,
        )
    )
    store.start()
    assert store.wait_until_ready(60), store.status()

    def write(records: Sequence[Record], partition: int | None = None) -> Position:
        written = produce_tracked(producer, topic, records, partition=partition)
        assert store.wait_for_position(written, 60), (written, store.status())
        return store.position()

    return Backend(store, write, store.stop)


@contextlib.contextmanager
def opened_backend(
    kind: str,
    broker: LocalBroker,
    directory: Path,
    indexes: Sequence[IndexSpec] = (),
    history: HistorySpec | None = None,
) -> Iterator[Backend]:
    """An empty, serving store of ``kind`` with ``indexes`` and ``history``, stopped on exit."""
    if kind == "memory":
        yield memory_backend(indexes, history)
        return
    producer = make_producer(broker.bootstrap_servers, **{"enable.idempotence": "true"})
    backend = rocksdb_backend(broker, directory, producer, indexes, history)
    try:
        yield backend
    finally:
        with contextlib.suppress(StoreError):
            backend.stop()


@pytest.fixture(params=["memory", "rocksdb"])
def backend(request: pytest.FixtureRequest, broker: LocalBroker, tmp_path: Path) -> Iterator[Backend]:
    """An empty, serving store of each kind, for tests that write."""
    with opened_backend(request.param, broker, tmp_path) as opened:
        yield opened


@pytest.fixture(scope="module", params=["memory", "rocksdb"])
def binary_backend(
    request: pytest.FixtureRequest, broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    """A store of each kind holding ``BINARY_KEYS``, shared by the tests that only read."""
    with opened_backend(request.param, broker, tmp_path_factory.mktemp("contract")) as opened:
        opened.write([(key, value_of(key)) for key in BINARY_KEYS])
        yield opened


BINARY_KEYS = [
    b"\x00",
    b"\x00\x00",
    b"\x00\xff",
    b"a",
    b"a\x00",
    b"a\xfe",
    b"a\xff",
    b"a\xff\x00",
    b"a\xff\xff",
    b"ab",
    b"b",
    b"\x7f",
    b"\x80",
    b"\xfe\xff",
    b"\xff",
    b"\xff\x00",
    b"\xff\xff",
    b"\xff\xff\xff",
]


def value_of(key: bytes) -> bytes:
    return b"v:" + key


def scan_keys(backend: Backend, prefix: bytes, after: bytes | None = None, limit: int = 1000) -> list[bytes]:
    with backend.store.view() as view:
        return [key for key, _ in view.prefix_scan(prefix, after=after, limit=limit).items]


def test_get_and_get_many_answer_values_in_request_order(binary_backend: Backend) -> None:
    with binary_backend.store.view() as view:
        for key in BINARY_KEYS:
            assert view.get(key) == value_of(key)
        assert view.get(b"absent") is None
        assert view.get(b"a\xff\x01") is None
        asked = [b"b", b"absent", b"\x00", b"b", b"\xff\xff\xff"]
        assert view.get_many(asked) == [
            value_of(b"b"),
            None,
            value_of(b"\x00"),
            value_of(b"b"),
            value_of(b"\xff\xff\xff"),
        ]
        assert view.get_many([]) == []


def test_updates_replace_values_and_tombstones_delete_keys(backend: Backend) -> None:
    backend.write([(b"k1", b"one"), (b"k2", b"two"), (b"k3", b"three"), (b"empty", b"")], partition=0)
    backend.write([(b"k1", b"uno"), (b"k2", None), (b"k4", None)], partition=0)
    with backend.store.view() as view:
        assert view.get_many([b"k1", b"k2", b"k3", b"k4"]) == [b"uno", None, b"three", None]
        # An empty value is a value, not a tombstone.
        assert view.get(b"empty") == b""
        assert read_table(view) == {b"k1": b"uno", b"k3": b"three", b"empty": b""}


def test_empty_prefix_scans_every_key_in_byte_order(binary_backend: Backend) -> None:
    assert scan_keys(binary_backend, b"") == sorted(BINARY_KEYS)
    with binary_backend.store.view() as view:
        page = view.prefix_scan(b"")
        assert page.next_after is None
        assert all(value == value_of(key) for key, value in page.items)


@pytest.mark.parametrize(
    "prefix",
    [
        b"a",
        b"a\xff",
        b"a\xff\xff",
        b"\xff",
        b"\xff\xff",
        b"\xff\xff\xff",
        b"\xff\xff\xff\xff",
        b"\x00",
        b"zz",
    ],
)
def test_prefix_scan_returns_exactly_the_keys_starting_with_the_prefix(
    binary_backend: Backend, prefix: bytes
) -> None:
    assert scan_keys(binary_backend, prefix) == sorted(k for k in BINARY_KEYS if k.startswith(prefix))


@pytest.mark.parametrize(
    ("prefix", "after"),
    [
        (b"", b"a"),  # after a present key: that key is excluded
        (b"", b"a\x01"),  # after an absent key
        (b"a", b"a\xff"),
        (b"a", b"\x00"),  # after sorts before the prefix: start at the prefix
        (b"a", b"a"),  # after equal to the prefix
        (b"a", b"b"),  # after beyond the prefix range: nothing
        (b"\xff", b"\xff\x00"),
        (b"", b"\xff\xff\xff"),  # after the last key: nothing
    ],
)
def test_after_cursor_is_strictly_after(binary_backend: Backend, prefix: bytes, after: bytes) -> None:
    expected = sorted(k for k in BINARY_KEYS if k.startswith(prefix) and k > after)
    assert scan_keys(binary_backend, prefix, after=after) == expected


@pytest.mark.parametrize("limit", [1, 2, 5, 17, 18])
def test_paging_with_next_after_visits_every_key_once(binary_backend: Backend, limit: int) -> None:
    seen: list[bytes] = []
    after: bytes | None = None
    pages = 0
    with binary_backend.store.view() as view:
        while True:
            page = view.prefix_scan(b"", after=after, limit=limit)
            pages += 1
            assert len(page.items) <= limit
            seen += [key for key, _ in page.items]
            if page.next_after is None:
                break
            assert len(page.items) == limit
            assert page.next_after == page.items[-1][0]
            after = page.next_after
    assert seen == sorted(BINARY_KEYS)
    # A page that holds exactly the rest of the keys says there is no more.
    assert pages == -(-len(BINARY_KEYS) // limit)


@pytest.mark.parametrize("limit", [0, -1])
def test_a_limit_below_one_is_refused(binary_backend: Backend, limit: int) -> None:
    with binary_backend.store.view() as view, pytest.raises(ScanLimitError, match="at least 1"):
        view.prefix_scan(b"", limit=limit)


def test_scan_pages_are_bounded_by_max_scan_limit(backend: Backend) -> None:
    keys = [b"m/%06d" % i for i in range(MAX_SCAN_LIMIT + 5)]
    backend.write([(key, b"x") for key in keys])
    with backend.store.view() as view:
        page = view.prefix_scan(b"m/", limit=MAX_SCAN_LIMIT * 10)
        assert len(page.items) == MAX_SCAN_LIMIT
        assert page.next_after == keys[MAX_SCAN_LIMIT - 1]
        rest = view.prefix_scan(b"m/", after=page.next_after, limit=MAX_SCAN_LIMIT * 10)
        assert [key for key, _ in rest.items] == keys[MAX_SCAN_LIMIT:]
        assert rest.next_after is None


def test_a_view_keeps_answering_its_snapshot_while_writes_land(backend: Backend) -> None:
    first = backend.write([(b"k1", b"old"), (b"k2", b"old"), (b"gone", b"here")], partition=0)
    with backend.store.view() as old:
        assert old.position() == first
        second = backend.write([(b"k1", b"new"), (b"k3", b"new"), (b"gone", None)], partition=0)
        assert second.reaches(first)
        assert second != first
        # The old view still answers the version it was taken at, position included.
        assert old.position() == first
        assert old.get(b"k1") == b"old"
        assert old.get_many([b"k3", b"gone"]) == [None, b"here"]
        assert read_table(old) == {b"k1": b"old", b"k2": b"old", b"gone": b"here"}
        with backend.store.view() as new:
            assert new.position() == second
            assert read_table(new) == {b"k1": b"new", b"k2": b"old", b"k3": b"new"}


def test_latest_answers_a_keys_value_and_the_position_a_view_would(backend: Backend) -> None:
    store = backend.store
    written = backend.write([(b"k1", b"one"), (b"empty", b""), (b"gone", b"here")], partition=0)
    for _ in range(2):  # the second time from the hot-key cache
        assert store.latest(b"k1") == (b"one", written)
        assert store.latest(b"empty") == (b"", written)  # an empty value is a value
        assert store.latest(b"absent") == (None, written)
    later = backend.write([(b"k1", b"uno"), (b"gone", None)], partition=0)
    assert later != written
    answers = {key: store.latest(key) for key in (b"k1", b"empty", b"gone", b"absent")}
    with store.view() as view:
        assert answers == {key: (view.get(key), view.position()) for key in answers}
    assert answers[b"k1"] == (b"uno", later)
    assert answers[b"gone"] == (None, later)


def test_latest_answers_each_value_with_the_position_it_is_the_value_at_while_writes_land(
    backend: Backend,
) -> None:
    # One key, rewritten write after write: each position the store reaches has exactly one value
    # of it, and a read must never pair a value with another write's position.
    store = backend.store
    value_at = {backend.write([(b"k", b"0")], partition=0)[0]: b"0"}
    reads: list[tuple[bytes | None, Position]] = []
    writing, progress = threading.Event(), threading.Condition()
    writing.set()

    def read() -> None:
        while writing.is_set():
            answer = store.latest(b"k")
            with progress:
                reads.append(answer)
                progress.notify_all()

    reader = threading.Thread(target=read, name="latest-reader")
    reader.start()
    try:
        for n in range(1, 40):
            value_at[backend.write([(b"k", b"%d" % n)], partition=0)[0]] = b"%d" % n
            with progress:  # the read under way may have begun before the write; the next one not
                wanted = len(reads) + 2
                assert progress.wait_for(lambda at=wanted: len(reads) >= at, 60), "the reader stopped"
    finally:
        writing.clear()
        reader.join(timeout=60)
    assert len(value_at) == 40
    assert len({position for _, position in reads}) >= 40
    # A write the broker appended twice (a retried batch) moves the position, not the value.
    written = sorted(value_at.items(), reverse=True)

    def value_at_or_below(offset: int) -> bytes:
        return next(value for at, value in written if at <= offset)

    assert [(value, position) for value, position in reads if value_at_or_below(position[0]) != value] == []


def test_wait_for_position_returns_at_once_when_reached_and_false_on_timeout(backend: Backend) -> None:
    reached = backend.write([(b"k", b"v")], partition=0)
    assert backend.store.wait_for_position(reached, timeout=5)
    assert backend.store.wait_for_position(Position(), timeout=5)
    assert not backend.store.wait_for_position(Position({0: reached[0] + 1000}), timeout=0.2)


def test_wait_for_position_wakes_up_when_a_write_reaches_it(backend: Backend) -> None:
    before = backend.write([(b"k", b"v0")], partition=0)
    wanted = Position({0: before[0] + 1})
    outcome: list[bool] = []
    waiter = threading.Thread(
        target=lambda: outcome.append(backend.store.wait_for_position(wanted, timeout=60))
    )
    waiter.start()
    backend.write([(b"k", b"v1")], partition=0)
    waiter.join(timeout=90)
    assert outcome == [True]
    with backend.store.view() as view:
        assert view.position().reaches(wanted)
        assert view.get(b"k") == b"v1"


def test_a_listener_hears_of_every_write_until_removed(backend: Backend) -> None:
    before = backend.write([(b"k", b"v0")], partition=0)
    assert backend.store.position() == before
    heard: list[Position] = []
    remove = backend.store.add_listener(lambda: heard.append(backend.store.position()))
    written = backend.write([(b"k", b"v1")], partition=0)
    assert written in heard  # called once the position readers see has moved
    assert backend.store.position() == written
    remove()
    count = len(heard)
    backend.write([(b"k", b"v2")], partition=0)
    assert len(heard) == count


def test_a_stopped_store_refuses_new_views(backend: Backend) -> None:
    backend.write([(b"k", b"v")])
    states = [backend.store.state]
    backend.stop()
    states.append(backend.store.state)
    assert states == [StoreState.READY, StoreState.STOPPED]
    with pytest.raises(StoreClosedError), backend.store.view():
        pass
    with pytest.raises(StoreClosedError):
        backend.store.latest(b"k")


def test_status_after_writes_shows_the_position_no_lag_and_every_record_applied(backend: Backend) -> None:
    backend.write([(b"a", b"1"), (b"b", b"2")], partition=0)
    written = backend.write([(b"a", None), (b"c", b"3")], partition=1)
    status = backend.store.status()
    assert (status.name, status.state, status.restore, status.last_error) == (
        "contract",
        StoreState.READY,
        None,
        None,
    )
    assert backend.store.readable
    assert backend.store.corruption is None
    assert status.position == written == backend.store.position()
    # The end offsets may also name partitions without records yet (at 0).
    assert status.end_offsets.reaches(status.position)
    assert status.position.reaches(status.end_offsets)
    assert status.total_lag == 0
    assert set(status.lag.values()) == {0}
    assert status.records_applied_total == 4
    assert status.null_key_records == 0
    assert status.indexes == {}
    assert status.sharding is not None
    assert (status.sharding.shards, status.sharding.shard, status.sharding.misplaced_records) == (1, 0, 0)

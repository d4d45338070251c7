"""The keys counted exactly (``store.table.key_count``), on the real broker and real RocksDB: keys
overwritten many times on the live path, tombstones, a restart and a bulk restore all leave the
count equal to the keys the model holds at the count's position."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from service.local.broker import LocalBroker
from store import Position, RocksDBOptions, Store, StoreStatus
from store.table.engine import Engine
from store.table.key_count import KeyCount, KeyCounter, records_since
from tests.support.kafka import Record, latest_per_key, make_producer
from tests.support.stores import bulk_tuning, mixed_records, produce_tracked, wait_until

ANCHOR = b"anchor"  # a key present throughout: overwriting it changes no count


class Phases:
    """Records produced phase by phase to one topic, the model of the table, and the end reached."""

    def __init__(self, servers: str, topic: str) -> None:
        self.producer = make_producer(servers)
        self.topic = topic
        self.records: list[Record] = []
        self.end = Position()

    def produce(self, records: Sequence[Record]) -> Position:
        self.records += records
        self.end = self.end.merged(produce_tracked(self.producer, self.topic, records))
        return self.end

    def keys(self) -> int:
        return len(latest_per_key(self.records))

    def counted_after(self, store: Store, most_keys: int) -> StoreStatus:
        """Produce overwrites of ``ANCHOR`` past the share that makes a count due again, so that a
        count starts at or after the end so far; the status once a count reached that end."""
        reached = self.end
        self.produce([(ANCHOR, b"again-%d" % i) for i in range(2 * most_keys + 1)])
        return counted_at(store, reached)


def counted_at(store: Store, reached: Position) -> StoreStatus:
    """The store's status once its keys were counted at ``reached`` or later."""

    def counted() -> bool:
        position = store.status().counted_keys_position
        return position is not None and position.reaches(reached)

    wait_until(counted, 60, f"keys counted at {reached} or later")
    return store.status()


def test_keys_overwritten_and_deleted_on_the_live_path_are_counted_exactly_also_after_a_restart(
    broker: LocalBroker,
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    state_dir: Path,
) -> None:
    servers = broker.bootstrap_servers
    topic = make_topic(partitions=3)
    phases = Phases(servers, topic)
    keys = [b"key-%04d" % i for i in range(300)]
    phases.produce([(ANCHOR, b"0"), *((key, b"first") for key in keys)])
    store = make_store(topic)
    assert store.wait_until_ready(60), store.status()
    first = counted_at(store, phases.end)
    assert first.counted_keys == 301

    # Every key written ten times more, on the live path (after READY).
    phases.produce([(key, b"v%d" % round_) for round_ in range(10) for key in keys])
    overwritten = phases.counted_after(store, 301)
    assert overwritten.counted_keys == phases.keys() == 301

    # A third of the keys deleted, a few of them twice, one never written.
    phases.produce([*((key, None) for key in keys[::3]), (keys[0], None), (b"never-written", None)])
    deleted = phases.counted_after(store, 301)
    assert deleted.counted_keys == phases.keys() == 201
    assert deleted.counted_keys_position is not None

    # The count is stored with the copy: the restarted store shows it as soon as it is READY.
    store.stop()
    again = make_store(topic, directory=state_dir)
    assert again.wait_until_ready(60), again.status()
    assert again.status().counted_keys == 201


def test_a_bulk_restore_is_counted_once_ready(
    broker: LocalBroker, make_topic: Callable[..., str], make_store: Callable[..., Store]
) -> None:
    servers = broker.bootstrap_servers
    topic = make_topic(partitions=3)
    phases = Phases(servers, topic)
    # Many chunks, each with its keys' overwrites and tombstones: the files overlap.
    end = phases.produce(mixed_records(6_000, keys=800, seed=29, tombstone_every=4))
    store = make_store(topic, tuning=bulk_tuning(min_records=500, chunk_records=1_000))
    assert store.wait_until_ready(60), store.status()
    counted = counted_at(store, end)
    assert counted.counted_keys == phases.keys()
    assert 0 < phases.keys() < 800


def _put(engine: Engine, keys: range) -> None:
    batch = engine.new_batch()
    for i in keys:
        batch.put(b"k%05d" % i, b"v")
    engine.write(batch)


def test_a_count_runs_a_page_a_step_from_one_view_and_again_once_a_quarter_changed(tmp_path: Path) -> None:
    engine = Engine(tmp_path / "db", RocksDBOptions())
    _put(engine, range(1_000))
    counter = KeyCounter(engine, Position({0: 1_000}))
    assert counter.count is None
    counter.step(Position({0: 1_000}), page=300)
    _put(engine, range(5_000, 5_001))  # written after the count took its view
    for _ in range(3):
        assert counter.count is None
        assert counter.counting
        counter.step(Position({0: 1_001}), page=300)
    assert counter.count == KeyCount(1_000, Position({0: 1_000}))
    assert not counter.counting
    # Not due until more than a quarter of the count was applied since.
    counter.step(Position({0: 1_250}))
    assert not counter.counting
    assert counter.count == KeyCount(1_000, Position({0: 1_000}))
    counter.step(Position({0: 1_251}))
    assert counter.count == KeyCount(1_001, Position({0: 1_251}))
    # Stored: a counter of the copy opened again finds it, unless the copy is behind it (data lost
    # in a crash).
    counter.stop()
    engine.close()
    engine = Engine(tmp_path / "db", RocksDBOptions())
    assert KeyCounter(engine, Position({0: 1_300})).count == KeyCount(1_001, Position({0: 1_251}))
    assert KeyCounter(engine, Position({0: 1_200})).count is None
    engine.close()


@pytest.mark.parametrize(
    ("counted", "position", "since"),
    [
        ({0: 5}, {0: 9, 1: 3}, 7),  # a partition new since the count counts from 0
        ({0: 5, 1: 2}, {0: 5, 1: 2}, 0),
        ({0: 5}, {0: 4}, None),  # behind the count
    ],
)
def test_records_since(counted: dict[int, int], position: dict[int, int], since: int | None) -> None:
    assert records_since(counted, Position(position)) == since

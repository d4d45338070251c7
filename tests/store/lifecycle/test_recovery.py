"""Recovery: a recreated topic, added partitions, a broker that goes away and comes back, a store
directory held by another process, and a corrupt store directory."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from service.local.broker import LocalBroker
from store import Position, Store, StoreLockedError, StoreState
from tests.support.kafka import Record, create_topic, latest_per_key, make_producer
from tests.support.stores import (
    StoreProcess,
    assert_equals_model,
    mixed_records,
    produce_tracked,
    table_of,
    wait_until,
)

pytestmark = pytest.mark.slow


def converged(store: Store, model: dict[bytes, bytes], end: Position) -> Callable[[], bool]:
    """A condition: the store is READY and reads exactly ``model`` at ``end``."""

    def check() -> bool:
        if store.state is not StoreState.READY:
            return False
        try:
            table, position = table_of(store)
        except Exception:  # a view raced with a copy being swapped in: ask again
            return False
        return position == end and table == model

    return check


def store_warnings(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        r.getMessage() for r in caplog.records if r.name.startswith("store") and r.levelno >= logging.WARNING
    )


def test_a_recreated_topic_makes_the_store_rebuild_from_the_new_data(
    own_broker: LocalBroker, make_store: Callable[..., Store], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    servers = own_broker.bootstrap_servers
    create_topic(servers, "products", partitions=3)
    old = mixed_records(4_000, keys=1_000, seed=11)
    old_end = produce_tracked(make_producer(servers), "products", old)
    store = make_store("products", bootstrap_servers=servers)
    assert store.wait_until_ready(60), store.status()
    assert_equals_model(store, latest_per_key(old), old_end)

    # The topic is deleted and created again (an empty broker at the same address), with other data.
    own_broker.restart()
    create_topic(servers, "products", partitions=3)
    new: list[Record] = [(b"new-%04d" % i, b"v%d" % i) for i in range(600)] + [(b"new-0001", None)]
    new_end = produce_tracked(make_producer(servers), "products", new)

    wait_until(converged(store, latest_per_key(new), new_end), 90, "the store to equal the recreated topic")
    assert store.status().stale is False
    assert "recreated" in store_warnings(caplog)


def test_partitions_missing_from_the_stored_position_are_read_from_their_start(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    # The broker here cannot add partitions to a topic (no CreatePartitions), so the store meets
    # partitions its stored position does not know the other way: partitions that were empty.
    topic = make_topic(partitions=4)
    records: list[Record] = [(b"a-%03d" % i, b"zero") for i in range(300)]
    end = produce_tracked(producer, topic, records, partition=0)
    first = make_store(topic)
    assert first.wait_until_ready(60), first.status()
    assert set(first.position()) == {0}
    first.stop()

    added: list[Record] = [(b"b-%03d" % i, b"two") for i in range(50)]
    end = end.merged(produce_tracked(producer, topic, added, partition=2))
    late: list[Record] = [(b"c-%03d" % i, b"three") for i in range(70)]
    end = end.merged(produce_tracked(producer, topic, late, partition=3))
    second = make_store(topic)
    assert second.wait_until_ready(60), second.status()
    assert second.wait_for_position(end, 60)
    assert_equals_model(second, latest_per_key(records + added + late), end)
    assert second.status().records_applied_total == len(added) + len(late)


def test_the_store_outlives_a_broker_outage(
    own_broker: LocalBroker, make_store: Callable[..., Store]
) -> None:
    servers = own_broker.bootstrap_servers
    create_topic(servers, "prices", partitions=3)
    records = mixed_records(3_000, keys=800, seed=13)
    end = produce_tracked(make_producer(servers), "prices", records)
    store = make_store("prices", bootstrap_servers=servers)
    assert store.wait_until_ready(60), store.status()
    model = latest_per_key(records)

    own_broker.stop()
    wait_until(lambda: store.status().last_error is not None, 60, "the store to notice the outage")
    # Still serving what it had, still READY.
    assert store.state is StoreState.READY
    assert table_of(store) == (model, end)

    # The broker comes back empty (memory storage): the topic is recreated with new data.
    own_broker.start()
    wait_until(lambda: store.state is not StoreState.FAILED, 5, "the store not to fail")
    create_topic(servers, "prices", partitions=3)
    again = mixed_records(1_500, keys=300, seed=14)
    again_end = produce_tracked(make_producer(servers), "prices", again)
    wait_until(converged(store, latest_per_key(again), again_end), 90, "the store to follow the broker back")

    # And it keeps following it.
    more: list[Record] = [(b"after-outage", b"1")]
    again_end = again_end.merged(produce_tracked(make_producer(servers), "prices", more))
    assert store.wait_for_position(again_end, 30), store.status()
    with store.view() as view:
        assert view.get(b"after-outage") == b"1"


def test_a_store_directory_held_by_another_process_is_refused_by_name(
    broker: LocalBroker, make_topic: Callable[..., str], make_store: Callable[..., Store], state_dir: Path
) -> None:
    topic = make_topic(partitions=3)
    holder = StoreProcess(
        {
            "bootstrap_servers": broker.bootstrap_servers,
            "topic": topic,
            "state_dir": str(state_dir),
            "name": "held",
        }
    )
    try:
        holder.wait_for(lambda line: line.get("state") == "READY", 60)
        refused = make_store(topic, name="held", start=False)
        with pytest.raises(StoreLockedError) as raised:
            refused.start()
        assert str(state_dir / "held") in str(raised.value)
        # A retry cannot fix this: the store says FAILED, and why.
        assert refused.state is StoreState.FAILED
        assert not refused.wait_until_ready(0)
        assert refused.status().last_error == str(raised.value)
        refused.stop()
        assert refused.state is StoreState.STOPPED
    finally:
        holder.kill()

    # The kernel released the lock with the process: the directory opens now.
    reopened = make_store(topic, name="held")
    assert reopened.wait_until_ready(60), reopened.status()


def test_a_second_store_on_the_same_directory_in_one_process_is_refused(
    make_topic: Callable[..., str], make_store: Callable[..., Store]
) -> None:
    topic = make_topic(partitions=1)
    first = make_store(topic)
    assert first.wait_until_ready(60)
    with pytest.raises(StoreLockedError, match="locked"):
        make_store(topic)
    assert first.state is StoreState.READY


@pytest.mark.parametrize("damage", ["CURRENT", "MANIFEST", "sst", "everything"])
def test_a_corrupt_store_directory_is_rebuilt_from_the_topic(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    caplog: pytest.LogCaptureFixture,
    damage: str,
) -> None:
    topic = make_topic(partitions=3)
    records = mixed_records(3_000, keys=700, seed=15)
    end = produce_tracked(producer, topic, records)
    first = make_store(topic)
    assert first.wait_until_ready(60), first.status()
    first.stop()

    db = first.config.path / "db"
    damaged = 0
    for path in db.iterdir():
        if not path.is_file() or path.name == "LOCK":
            continue
        if (
            (damage in ("CURRENT", "everything") and path.name == "CURRENT")
            or (damage in ("MANIFEST", "everything") and path.name.startswith("MANIFEST"))
            or (damage in ("sst", "everything") and path.suffix == ".sst")
        ):
            path.write_bytes(os.urandom(max(path.stat().st_size, 64)))
            damaged += 1
    assert damaged, sorted(p.name for p in db.iterdir())

    caplog.set_level(logging.WARNING)
    second = make_store(topic)
    assert second.wait_until_ready(60), second.status()
    assert_equals_model(second, latest_per_key(records), end)
    assert second.status().records_applied_total == len(records)
    assert "cannot open the RocksDB database" in store_warnings(caplog)

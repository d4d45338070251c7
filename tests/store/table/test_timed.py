"""Reads as of a time on the real broker and real RocksDB: every get, batch of per-key times, prefix
scan and index scan equals the brute-force model (greatest timestamp at or below the time, ties by
offset) with out-of-order timestamps, tombstones and re-inserts on several partitions; a time below
the floor, or one the versions cannot settle, is refused; pruning keeps what a time read needs."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Producer

from store import (
    HistoryExpiredError,
    HistoryNotKeptError,
    HistorySpec,
    IndexSpec,
    Position,
    Store,
    TimeExpiredError,
)
from store.table.timed_reader import TimedReader
from tests.support.stores import FAST, bulk_tuning, read_index, read_table, wait_until
from tests.support.timed import Stamped, compacted, produce_stamped, table_at, value_at

PARTITIONS = 3
KEYS = [b"a", b"ab", b"b", b"b\x00", b"c", b"d", b"e"]
BY_GROUP = IndexSpec("by_group", "g")
GROUPS = [b"x", b"y"]
TUNING = FAST.replace(history_prune_interval_seconds=0.05)


def partition_of(key: bytes) -> int:
    return KEYS.index(key) % PARTITIONS


def value(rng: random.Random) -> bytes | None:
    if rng.random() < 0.2:
        return None
    return json.dumps({"g": rng.choice(GROUPS).decode(), "n": rng.randrange(1000)}).encode()


def stamped_batch(
    rng: random.Random, size: int, low: int, high: int
) -> list[tuple[bytes, bytes | None, int, int]]:
    """Records of random keys with timestamps drawn from ``[low, high]``: out of order within it."""
    batch = []
    for _ in range(size):
        key = rng.choice(KEYS)
        batch.append((key, value(rng), rng.randint(low, high), partition_of(key)))
    return batch


def probe_times(records: Sequence[Stamped], floor: int) -> list[int]:
    """Every version's time, one before and after it, the floor, and a time past every record."""
    times = {floor, max(r.timestamp for r in records) + 1_000}
    for record in records:
        times.update({record.timestamp - 1, record.timestamp, record.timestamp + 1})
    return sorted(t for t in times if t >= floor)


def assert_exact_at(store: Store, records: Sequence[Stamped], at: int, as_of: Position | None = None) -> None:
    expected = table_at(records, at, as_of)
    with store.view(as_of, at_time=at) as view:
        assert isinstance(view, TimedReader)
        asked = [*KEYS, b"never-written"]
        assert view.get_many(asked) == [expected.get(key) for key in asked], at
        assert read_table(view, page_size=2) == expected, at
        assert read_table(view, b"b", page_size=1) == {
            k: v for k, v in expected.items() if k.startswith(b"b")
        }
        for group in GROUPS:
            wanted = {k: v for k, v in expected.items() if json.loads(v)["g"] == group.decode()}
            assert read_index(view, BY_GROUP.name, group, page=2) == wanted, (at, group)


@pytest.mark.parametrize("hot_entries", [0, 1_000], ids=["seeks", "timelines"])
def test_time_reads_equal_the_model_with_out_of_order_timestamps_and_tombstones(
    hot_entries: int, make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    rng = random.Random(29)
    topic = make_topic(partitions=PARTITIONS)
    # Before the store starts: history begins after these, their times bounded per partition.
    before = produce_stamped(producer, topic, stamped_batch(rng, 20, 1_000, 2_000))
    records = compacted(before)
    # Without a hot-key cache every read seeks; with one, keys asked again read their timelines.
    tuning = TUNING.replace(read_cache_entries=hot_entries)
    store = make_store(
        topic, name="t", tuning=tuning, indexes=(BY_GROUP,), history=HistorySpec(retention_offsets=10**6)
    )
    assert store.wait_until_ready(60), store.status()
    floor = max(r.timestamp for r in before)
    with pytest.raises(HistoryExpiredError), store.view(at_time=floor - 1):
        pass
    # After history began: out of order within each batch and across batches, never below the floor.
    for low in (5_000, 3_000, 8_000, 2_500):
        records += produce_stamped(producer, topic, stamped_batch(rng, 25, low, low + 3_000))
    end = Position({p: max(r.offset for r in records if r.partition == p) + 1 for p in range(PARTITIONS)})
    assert store.wait_for_position(end, 60), store.status()
    for at in probe_times(records, floor):
        assert_exact_at(store, records, at)
    # Pinned to an older position: only the records below it count.
    after = records[len(compacted(before)) :]
    middle = Position(
        {p: (end[p] + min(r.offset for r in after if r.partition == p)) // 2 for p in range(PARTITIONS)}
    )
    for at in probe_times(records, floor)[::3]:
        assert_exact_at(store, records, at, middle)
    # One time per key.
    times = [rng.choice(probe_times(records, floor)) for _ in range(40)]
    keys = [rng.choice(KEYS) for _ in times]
    with store.view(at_time=min(times)) as view:
        assert isinstance(view, TimedReader)
        assert view.get_many_at(keys, times) == [
            value_at(records, k, t) for k, t in zip(keys, times, strict=True)
        ]
        with pytest.raises(HistoryExpiredError):
            view.get_many_at([b"a"], [floor - 1])


def test_a_late_record_behind_the_history_start_is_refused_for_its_key_only(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=1)
    records = produce_stamped(producer, topic, [(b"k", b"old", 1_000, 0), (b"j", b"j0", 2_000, 0)])
    store = make_store(topic, name="late", tuning=TUNING, history=HistorySpec(retention_offsets=10**6))
    assert store.wait_until_ready(60), store.status()
    # Stamped 1_500: before or after "old" (1_000)? Here after, but the store no longer knows "old"'s time.
    records += produce_stamped(producer, topic, [(b"k", b"late", 1_500, 0), (b"j", b"j1", 3_000, 0)])
    assert store.wait_for_position(Position({0: 4}), 60)
    with store.view(at_time=2_500) as view:
        assert isinstance(view, TimedReader)
        with pytest.raises(HistoryExpiredError, match="b'k'"):
            view.get(b"k")
        assert view.get(b"j") == value_at(records, b"j", 2_500) == b"j0"
    with store.view(at_time=3_000) as view:
        assert view.get(b"j") == b"j1"


def test_pruning_keeps_an_older_offset_with_a_greater_timestamp_and_raises_the_time_floor(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=1)
    store = make_store(topic, name="pruned", tuning=TUNING, history=HistorySpec(retention_offsets=4))
    assert store.wait_until_ready(60), store.status()
    # "x" at offset 0 is newer in time than at offset 1: as of 6_000 the answer is "first".
    records = produce_stamped(producer, topic, [(b"x", b"first", 5_000, 0), (b"x", b"second", 4_000, 0)])
    records += produce_stamped(producer, topic, [(b"y", str(i).encode(), 6_000 + i, 0) for i in range(10)])
    assert store.wait_for_position(Position({0: 12}), 60)
    wait_until(lambda: (store.history_floor() or {}).get(0, 0) == 8, 30, "the history floor to move")

    # Offsets 0-7 are below the floor: the time floor is the greatest of their times, 6_005.
    def refused(at: int) -> bool:
        try:
            with store.view(at_time=at):
                return False
        except HistoryExpiredError:
            return True

    wait_until(lambda: refused(6_004), 30, "the time floor to rise")
    assert not refused(6_005)
    at = 6_005
    with store.view(at_time=at) as view:
        assert view.get(b"x") == value_at(records, b"x", at) == b"first"
        assert view.get(b"y") == value_at(records, b"y", at)
    with pytest.raises(HistoryExpiredError), store.view(at_time=5_000):
        pass


def test_a_store_without_history_refuses_times(
    make_topic: Callable[..., str], make_store: Callable[..., Store]
) -> None:
    store = make_store(make_topic(partitions=1), name="plain")
    assert store.wait_until_ready(60)
    with pytest.raises(HistoryNotKeptError), store.view(at_time=1):
        pass


def test_a_store_restored_in_bulk_knows_its_time_floor_and_answers_exactly(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="store")
    rng = random.Random(5)
    topic = make_topic(partitions=PARTITIONS)
    # Flushed a hundred at a time: many batches a partition, so that the local broker's too-low
    # "latest" offset (the base offset of a partition's last batch + 1) still asks for a bulk restore.
    planned = stamped_batch(rng, 1_500, 1_000, 4_000)
    before = [
        r
        for start in range(0, len(planned), 100)
        for r in produce_stamped(producer, topic, planned[start : start + 100])
    ]
    tuning = bulk_tuning(min_records=500, chunk_records=400).replace(history_prune_interval_seconds=0.05)
    store = make_store(
        topic, name="bulk", tuning=tuning, indexes=(BY_GROUP,), history=HistorySpec(retention_offsets=10**6)
    )
    assert store.wait_until_ready(60), store.status()
    assert any("bulk restore of" in r.getMessage() for r in caplog.records), "the restore must go in bulk"
    floor = max(r.timestamp for r in before)
    with pytest.raises(HistoryExpiredError), store.view(at_time=floor - 1):
        pass
    records = compacted(before)
    records += produce_stamped(producer, topic, stamped_batch(rng, 40, 4_000, 7_000))
    end = Position(
        {p: max(r.offset for r in before + records if r.partition == p) + 1 for p in range(PARTITIONS)}
    )
    assert store.wait_for_position(end, 60), store.status()
    for at in probe_times(records, floor)[::4]:
        assert_exact_at(store, records, at)


def test_records_applied_while_history_was_off_leave_the_times_unknown(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce_stamped(producer, topic, [(b"k", b"v", 5_000, 0)])
    plain = make_store(topic, name="switched", directory=tmp_path / "switched")
    assert plain.wait_until_ready(60)
    plain.stop()
    # History turned on later: when "k" was written is unknown, so no time is answered.
    timed = make_store(
        topic, name="switched", directory=tmp_path / "switched", history=HistorySpec(retention_offsets=100)
    )
    assert timed.wait_until_ready(60)
    with pytest.raises(TimeExpiredError) as refused, timed.view(at_time=10**15):
        pass
    assert refused.value.floor is None
    with timed.view() as view:
        assert view.get(b"k") == b"v"

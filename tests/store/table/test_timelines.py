"""Hot keys' timelines (reads as of a time without a seek) never outlive a write: a key written
after its timeline was kept is answered with its new versions, and a view taken before the write
answers from its own snapshot without keeping anything for later views."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Producer

from store import HistorySpec, Position, Store
from store.table.timed_reader import TimedReader
from tests.support.stores import FAST
from tests.support.timed import Stamped, produce_stamped, value_at

KEYS = [b"a", b"b", b"c"]


def answers(store: Store, records: list[Stamped], times: list[int]) -> None:
    """Every key at every time, three times (a key missed twice is admitted: the third read is
    answered from the timelines the second kept)."""
    keys = [key for key in KEYS for _ in times]
    at = times * len(KEYS)
    for _ in range(3):
        with store.view(at_time=min(at)) as view:
            assert isinstance(view, TimedReader)
            assert view.get_many_at(keys, at) == [
                value_at(records, k, t) for k, t in zip(keys, at, strict=True)
            ]


def hot_store(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer, a2: bytes
) -> tuple[Store, str, list[Stamped]]:
    """A READY store keeping history, its topic, and the four records produced to it since: "a"
    twice (its second value ``a2``), "b" once, "c" deleted."""
    topic = make_topic(partitions=1)
    store = make_store(topic, name="hot", tuning=FAST, history=HistorySpec(retention_offsets=10**6))
    assert store.wait_until_ready(60), store.status()
    records = produce_stamped(
        producer,
        topic,
        [(b"a", b"a1", 1_000, 0), (b"b", b"b1", 1_500, 0), (b"a", a2, 3_000, 0), (b"c", None, 2_000, 0)],
    )
    assert store.wait_for_position(Position({0: 4}), 60)
    return store, topic, records


def test_a_write_drops_the_timeline_of_its_key_and_an_older_view_keeps_none(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    store, topic, records = hot_store(make_topic, make_store, producer, b"a2")
    times = [999, 1_000, 1_499, 1_500, 2_000, 2_500, 3_000, 9_000]
    answers(store, records, times)

    # A view taken now, read only after the next records are applied: it answers as of its own
    # position, and keeps no timeline a later view would read.
    with store.view(at_time=900) as older:
        assert isinstance(older, TimedReader)
        # Out of order in time: "a" at 2_000 comes between its two versions; "b" is deleted.
        later = produce_stamped(producer, topic, [(b"a", b"a3", 2_000, 0), (b"b", None, 2_600, 0)])
        assert store.wait_for_position(Position({0: 6}), 60)
        keys = [key for key in KEYS for _ in times]
        at = times * len(KEYS)
        assert older.get_many_at(keys, at) == [value_at(records, k, t) for k, t in zip(keys, at, strict=True)]
    answers(store, records + later, times)


def kept_timelines(store: Store) -> tuple[int, int]:
    memory = store.status().memory
    assert memory is not None
    return memory.timeline_entries, memory.timeline_bytes


def test_the_memory_report_counts_the_kept_timelines_and_a_write_uncounts_its_key(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    store, topic, records = hot_store(make_topic, make_store, producer, b"a22")
    assert kept_timelines(store) == (0, 0)
    answers(store, records, [999, 2_000, 9_000])
    # Each version: its 16 bytes of time and offset fields and its value. Every key also has its
    # base version (absent before history began): a: base, a1, a22; b: base, b1; c: base, tombstone.
    assert kept_timelines(store) == (3, 3 * 16 + 2 + 3 + 2 * 16 + 2 + 2 * 16)

    later = produce_stamped(producer, topic, [(b"a", b"a3", 2_000, 0)])
    assert store.wait_for_position(Position({0: 5}), 60)
    assert kept_timelines(store) == (2, 2 * 16 + 2 + 2 * 16)
    answers(store, records + later, [999, 2_000, 9_000])
    assert kept_timelines(store) == (3, 4 * 16 + 2 + 3 + 2 + 2 * 16 + 2 + 2 * 16)

"""A store's history read whole, page by page (real broker, real RocksDB): every key's rows answer
it as of every time exactly as the per-key read and the brute-force model do (out-of-order
timestamps, tombstones, re-inserts, several partitions, keys never written since history began,
pinned older positions), a time the versions do not settle is unsettled where the per-key read
refuses it, and pages are bounded by rows and bytes."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from store import HistoryExpiredError, HistoryRows, HistorySpec, Position, Store
from store.table import timed
from store.table.timed_reader import TimedReader
from tests.store.table.test_timed import KEYS, PARTITIONS, TUNING, probe_times, stamped_batch
from tests.support.timed import Stamped, compacted, produce_stamped, value_at

Answers = dict[bytes, list[tuple[int, bytes | None, bool]]]


def read_whole(store: Store, at: int, as_of: Position | None, limit: int) -> tuple[Answers, int | None, int]:
    """Every key's rows ``(time, value, unsettled)``, the time floor, and the pages read."""
    rows: Answers = {}
    after: bytes | None = None
    pages = 0
    floor: int | None = None
    while True:
        with store.view(as_of, at_time=at) as view:
            assert isinstance(view, TimedReader)
            page = view.history_page(after, limit, 10**9)
        assert page is not None
        pages += 1
        floor = page.time_floor
        check_page(page, limit)
        start = 0
        for key, count in zip(page.keys, page.counts.tolist(), strict=True):
            assert key not in rows, "a key's rows come in one page"
            rows[key] = [
                (int(page.times[i]), page.values[i], bool(page.unsettled[i]))
                for i in range(start, start + count)
            ]
            start += count
        if page.next_after is None:
            return rows, floor, pages
        after = page.next_after


def check_page(page: HistoryRows, limit: int) -> None:
    assert page.keys == sorted(page.keys)
    assert int(page.counts.sum()) == len(page.times) == len(page.values) == len(page.unsettled)
    start = 0
    for count in page.counts.tolist():
        times = page.times[start : start + count].tolist()
        assert times == sorted(times, reverse=True), "a key's rows run newest first"
        start += count


def answer(rows: Answers, key: bytes, at: int) -> tuple[bytes | None, bool]:
    """The rule a reader of the pages applies: the key's first row at or below ``at``."""
    for time, value, unsettled in rows.get(key, []):
        if time <= at:
            return value, unsettled
    return None, False


def per_key(store: Store, key: bytes, at: int, as_of: Position | None) -> bytes | HistoryExpiredError | None:
    with store.view(as_of, at_time=at) as view:
        try:
            return view.get(key)
        except HistoryExpiredError as exc:
            return exc


@pytest.mark.parametrize("limit", [1, 4, 1_000])
def test_the_whole_history_answers_every_time_as_the_model_and_the_per_key_read(
    limit: int, make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    rng = random.Random(limit)
    topic = make_topic(partitions=PARTITIONS)
    # "solo" is written before history began and never since: its table value answers every time.
    solo = [(b"solo", b'{"g": "x", "n": 1}', 1_500, 1)]
    before = produce_stamped(producer, topic, [*stamped_batch(rng, 20, 1_000, 2_000), *solo])
    store = make_store(topic, name="whole", tuning=TUNING, history=HistorySpec(retention_offsets=10**6))
    assert store.wait_until_ready(60), store.status()
    records: list[Stamped] = compacted(before)
    for low in (5_000, 3_000, 8_000, 2_500):
        records += produce_stamped(producer, topic, stamped_batch(rng, 25, low, low + 3_000))
    end = Position({p: max(r.offset for r in records if r.partition == p) + 1 for p in range(PARTITIONS)})
    assert store.wait_for_position(end, 60), store.status()
    floor = max(r.timestamp for r in before)
    after = records[len(compacted(before)) :]
    middle = Position(
        {p: (end[p] + min(r.offset for r in after if r.partition == p)) // 2 for p in range(PARTITIONS)}
    )
    for as_of in (None, middle):
        pinned = None if as_of is None else dict(as_of)
        rows, time_floor, pages = read_whole(store, floor, as_of, limit)
        assert time_floor == floor
        if limit == 1:
            assert pages >= len(rows), "one key a page"
        assert rows[b"solo"] == [(timed.NO_TIME, b'{"g": "x", "n": 1}', False)]
        for key in [*KEYS, b"solo", b"never-written"]:
            for at in probe_times(records, floor):
                value, unsettled = answer(rows, key, at)
                assert not unsettled
                assert value == value_at(records, key, at, pinned) == per_key(store, key, at, as_of), (
                    key,
                    at,
                )


def test_versions_a_late_record_leaves_unsettled_are_marked_where_the_per_key_read_refuses(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=1)
    records = produce_stamped(producer, topic, [(b"k", b"old", 1_000, 0), (b"j", b"j0", 2_000, 0)])
    store = make_store(topic, name="late", tuning=TUNING, history=HistorySpec(retention_offsets=10**6))
    assert store.wait_until_ready(60), store.status()
    # "late" is stamped 1_500, below the pre-history bound 2_000: before or after "old"? Unknown.
    records += produce_stamped(
        producer, topic, [(b"k", b"late", 1_500, 0), (b"j", b"j1", 3_000, 0), (b"k", b"new", 4_000, 0)]
    )
    assert store.wait_for_position(Position({0: 5}), 60)
    rows, floor, _ = read_whole(store, 2_000, None, 100)
    assert floor == 2_000
    for at in (2_000, 2_500, 3_999):
        assert answer(rows, b"k", at) == (b"late", True)
        assert isinstance(per_key(store, b"k", at, None), HistoryExpiredError)
    assert answer(rows, b"k", 4_000) == (b"new", False) == (per_key(store, b"k", 4_000, None), False)
    for at in (2_000, 2_999, 3_000):
        assert answer(rows, b"j", at) == (value_at(records, b"j", at), False)
    assert rows[b"j"][-1][0] == timed.NO_TIME, "the base version counts for every time"


def test_a_page_past_the_byte_bound_is_refused(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=1)
    store = make_store(topic, name="big", tuning=TUNING, history=HistorySpec(retention_offsets=10**6))
    assert store.wait_until_ready(60), store.status()
    produce_stamped(producer, topic, [(b"k%d" % i, b"x" * 1_000, 5_000 + i, 0) for i in range(50)])
    assert store.wait_for_position(Position({0: 50}), 60)
    with store.view(at_time=5_000) as view:
        assert isinstance(view, TimedReader)
        assert view.history_page(None, 100, 20_000) is None
        page = view.history_page(None, 10, 20_000)
        # A key has two versions here (its base, absent, and its record): 10 versions are 5 keys.
        assert page is not None
        assert len(page.keys) == 5
        assert page.next_after == b"k12"

"""The in-memory store's reads as of a time: the same answers and refusals as the real store's
(``store.table.timed``), so the HTTP tests built on it see what a real store serves."""

from __future__ import annotations

import pytest

from store import (
    HistoryNotKeptError,
    HistorySpec,
    IndexSpec,
    InMemoryStore,
    Position,
    TimedKeyValueStore,
    TimeExpiredError,
)

# p1: 10 then 30, a late record stamped 20 in between (out of order); p2: 15, deleted at 25.
RECORDS = [
    (0, 0, b"p1", b'{"t":"a"}'),
    (0, 1, b"p2", b'{"t":"b"}'),
    (0, 2, b"p1", b'{"t":"c"}'),
    (0, 3, b"p1", b'{"t":"d"}'),
    (0, 4, b"p2", None),
]
TIMES = [10, 15, 30, 20, 25]


def timed_store(history: HistorySpec | None = None) -> InMemoryStore:
    store = InMemoryStore("s", indexes=[IndexSpec("by_t", "t")], keeps_history=True, history=history)
    store.apply(RECORDS, timestamps=TIMES)
    return store


def test_a_read_as_of_a_time_answers_the_greatest_timestamp_at_or_below_it() -> None:
    with timed_store().view(at_time=22) as view:
        assert view.get_many([b"p1", b"p2"]) == [b'{"t":"d"}', b'{"t":"b"}']
        assert [key for key, _ in view.prefix_scan(b"p").items] == [b"p1", b"p2"]
        assert [key for key, _ in view.index_scan("by_t", b"d").items] == [b"p1"]
        assert isinstance(view, TimedKeyValueStore)
        times = [9, 10, 20, 29, 30, 15, 24, 25]
        keys = [b"p1"] * 5 + [b"p2"] * 3
        a, b, c, d = (b'{"t":"%s"}' % t for t in (b"a", b"b", b"c", b"d"))
        assert view.get_many_at(keys, times) == [None, a, d, d, c, b, b, None]


def test_as_of_a_position_and_a_time_counts_only_records_below_the_position() -> None:
    with timed_store().view(as_of=Position({0: 3}), at_time=100) as view:
        assert view.get_many([b"p1", b"p2"]) == [b'{"t":"c"}', b'{"t":"b"}']


def test_below_the_time_floor_a_time_is_refused_never_guessed() -> None:
    # Offsets 0 to 2 are below the history floor: their greatest timestamp, 30, is the time floor.
    store = timed_store(HistorySpec(retention_offsets=2))
    with pytest.raises(TimeExpiredError) as refused, store.view(at_time=29):
        pass
    assert (refused.value.as_of, refused.value.floor) == (29, 30)
    with store.view(at_time=30) as view:
        assert isinstance(view, TimedKeyValueStore)
        assert view.get(b"p1") == b'{"t":"c"}'
        with pytest.raises(TimeExpiredError):
            view.get_many_at([b"p1", b"p2"], [30, 12])


def test_records_without_timestamps_or_history_answer_no_time() -> None:
    untimed = InMemoryStore("s", keeps_history=True)
    untimed.apply(RECORDS)
    with pytest.raises(TimeExpiredError) as refused, untimed.view(at_time=100):
        pass
    assert refused.value.floor is None
    with pytest.raises(HistoryNotKeptError), InMemoryStore("s").view(at_time=100):
        pass


def test_its_history_read_whole_holds_each_key_newest_first_by_whole_keys() -> None:
    with timed_store().view(at_time=0) as view:
        assert isinstance(view, TimedKeyValueStore)
        first = view.history_page(None, 3, 10_000)
        assert first is not None
        # p1's three versions fill the page; p2 comes next.
        assert (first.keys, first.counts.tolist(), first.next_after) == ([b"p1"], [3], b"p1")
        assert first.times.tolist() == [30, 20, 10]
        assert first.values == [b'{"t":"c"}', b'{"t":"d"}', b'{"t":"a"}']
        assert first.time_floor == -(2**63)
        last = view.history_page(b"p1", 3, 10_000)
        assert last is not None
        assert (last.keys, last.times.tolist(), last.values, last.next_after) == (
            [b"p2"], [25, 15], [None, b'{"t":"b"}'], None,
        )  # fmt: skip
        assert not last.unsettled.any()
        assert view.history_page(None, 10, 10) is None  # past max_bytes

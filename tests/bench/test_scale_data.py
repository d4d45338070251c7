"""The cold keys of the benchmarks: no key asked twice by one reader, nor by two readers of the
same caches, until the table is used up."""

from __future__ import annotations

import itertools

import pytest

from bench.scale_data import BATCH, FreshKeys, key, key_streams, wrapped_note


def _asked(stream: FreshKeys, batches: int) -> list[bytes]:
    return [k for _ in range(batches) for k in stream.batch()]


def test_a_stream_asks_each_key_of_its_range_once_before_it_wraps() -> None:
    stream = FreshKeys(10 * BATCH, 2 * BATCH, 5 * BATCH)
    asked = _asked(stream, 3)
    assert asked == [key(i) for i in range(2 * BATCH, 5 * BATCH)]
    assert not stream.wrapped
    assert stream.batch() == [key(i) for i in range(2 * BATCH, 3 * BATCH)]
    assert stream.wrapped


def test_readers_of_the_same_caches_take_disjoint_ranges_covering_the_table() -> None:
    records = 7 * BATCH + 3
    streams = key_streams(
        records, {"json": "service", "arrow": "service", "fresh": "service", "redis": "redis"}
    )
    service = [set(_asked(streams[name], 2)) for name in ("json", "arrow", "fresh")]
    assert all(len(keys) == 2 * BATCH for keys in service)
    assert len(service[0] | service[1] | service[2]) == 3 * 2 * BATCH
    ranges = sorted((streams[n].start, streams[n].stop) for n in ("json", "arrow", "fresh"))
    assert ranges[0][0] == 0
    assert ranges[-1][1] == records
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    # Another server's caches hold nothing the service's readers asked: it has the table whole.
    assert (streams["redis"].start, streams["redis"].stop) == (0, records)


def test_the_note_names_the_readers_that_asked_keys_again() -> None:
    streams = key_streams(3 * BATCH, {"a": "one", "b": "one"})
    _asked(streams["a"], 1)
    assert wrapped_note(streams) is None
    _asked(streams["b"], 3)
    note = wrapped_note(streams)
    assert note is not None
    assert "b (" in note
    assert "a (" not in note


def test_an_empty_range_is_refused() -> None:
    with pytest.raises(ValueError, match="no keys"):
        FreshKeys(BATCH, BATCH, BATCH)

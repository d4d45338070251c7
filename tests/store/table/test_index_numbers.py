"""Index keys of JSON numbers are their text as written, on real RocksDB; an index stored under the
former rule (numbers as parsed) is rebuilt when the store opens."""

from __future__ import annotations

from collections.abc import Callable

import rocksdict
from confluent_kafka import Producer

from store import IndexSpec, Store
from tests.support.stores import produce_tracked, read_index

BY_ID = IndexSpec("by_id", "id")

# Each written number, and the rows that must share its entry: none share one.
NUMBERS = {
    b"12345678901234567890123": b"big",
    b"12345678901234567890124": b"big+1",  # the same float as the line above
    b"18446744073709551616": b"2^64",
    b"18446744073709551617": b"2^64+1",
    b"1e2": b"exp",
    b"100": b"hundred",
    b"100.0": b"hundred.0",
    b"1.50": b"frac",
    b"-0": b"minus-zero",
    b"0": b"zero",
    b"-3": b"minus-three",
}


def _rows() -> list[tuple[bytes, bytes | None]]:
    return [(key, b'{"id": ' + text + b', "n": 1.0}') for text, key in NUMBERS.items()]


def _assert_numbers_found_by_their_text(store: Store) -> None:
    table = dict(_rows())
    with store.view() as view:
        for text, key in NUMBERS.items():
            assert read_index(view, "by_id", text) == {key: table[key]}, text
        # The float renderings the former rule stored find nothing.
        for rendering in (b"1.2345678901234568e+22", b"1.8446744073709552e+19", b"1.5", b"100.0 "):
            assert read_index(view, "by_id", rendering) == {}, rendering


def test_numbers_are_indexed_as_written(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=2)
    end = produce_tracked(producer, topic, _rows())
    store = make_store(topic, indexes=(BY_ID,))
    assert store.wait_until_ready(60), store.status()
    assert store.wait_for_position(end, 60), store.status()
    assert store.wait_for_indexes(60), store.status()
    _assert_numbers_found_by_their_text(store)


def _store_as_the_former_rule_did(store: Store) -> None:
    """Rewrite the stopped store's index as the former rule stored it: state without an encoding,
    numbers as parsed (one entry for both big integers, ``100.0`` for ``1e2``)."""
    path = str(store.config.path / "db")
    options = rocksdict.Options(raw_mode=True)
    families = rocksdict.Rdict.list_cf(path, options)
    db = rocksdict.Rdict(path, options, column_families=dict.fromkeys(families, options))
    try:
        meta, index = db.get_column_family("meta"), db.get_column_family("index")
        assert meta[b"index/by_id"] == b"id\nready\n2"
        meta[b"index/by_id"] = b"id\nready"
        for entry in list(index.keys()):
            del index[entry]
        for old_text, key in ((b"1.2345678901234568e+22", b"big"), (b"100.0", b"exp")):
            index[BY_ID.entry_key(old_text, key)] = b""
        db.flush()
    finally:
        db.close()


def test_an_index_stored_under_the_former_rule_is_rebuilt(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer
) -> None:
    topic = make_topic(partitions=2)
    end = produce_tracked(producer, topic, _rows())
    first = make_store(topic, indexes=(BY_ID,))
    assert first.wait_until_ready(60), first.status()
    assert first.wait_for_position(end, 60), first.status()
    assert first.wait_for_indexes(60), first.status()
    first.stop()
    _store_as_the_former_rule_did(first)

    again = make_store(topic, indexes=(BY_ID,))
    assert again.wait_until_ready(60), again.status()
    assert again.wait_for_indexes(60), again.status()
    _assert_numbers_found_by_their_text(again)
    with again.view() as view:
        assert read_index(view, "by_id", b"1.2345678901234568e+22") == {}

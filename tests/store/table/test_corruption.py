"""Corruption in a store's files: only "not found" means absent. A read that fails for any other
reason is an error on every read path (never ``None``, never a short page); the store marks that
copy corrupt, logs it once and replaces it with a copy rebuilt from the topic.

The end-to-end cases over HTTP (503 ``store-corrupt``, status, metrics, the background
verification, a restart before the rebuild ended) are in ``tests/faults/test_corruption.py``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rocksdict
from confluent_kafka import Producer

from store import (
    MAX_SCAN_LIMIT,
    HistorySpec,
    IndexSpec,
    Position,
    ReadOnlyKeyValueStore,
    Store,
    StoreReadError,
)
from store.table.corruption import is_absent, named_file, read_error
from store.table.engine import Engine
from store.table.snapshot_reader import SnapshotReader
from store.tuning import RocksDBOptions
from tests.support.damage import compact, flip_first_block
from tests.support.kafka import latest_per_key
from tests.support.refusals import refuse_writes
from tests.support.stores import FAST, assert_equals_model, produce_tracked

# No background verification: these cases are about what reads find.
TUNING = FAST.replace(verify_interval_seconds=0)
KEYS = 2_000
SMALLEST, LARGEST = b"key-00000", b"key-%05d" % (KEYS - 1)  # in the first and the last data block
INDEXES = (IndexSpec("by_group", "group"),)
HISTORY = HistorySpec(retention_offsets=1_000_000)


def value(i: int) -> bytes:
    return json.dumps({"group": f"g{i % 3}", "n": i, "pad": "x" * 40}).encode()


def corrupt_table(tmp_path: Path) -> tuple[Engine, Path]:
    """An engine over a table of ``KEYS`` keys whose first data block has flipped bytes."""
    db = tmp_path / "db"
    engine = Engine(db, RocksDBOptions())
    batch = engine.new_batch()
    for i in range(KEYS):
        batch.put(b"key-%05d" % i, value(i))
    engine.write(batch)
    engine.flush()
    engine.close()
    flipped = flip_first_block(db, SMALLEST)
    return Engine(db, RocksDBOptions()), flipped


def test_rocksdict_tells_absence_from_failure_only_by_the_message_the_store_relies_on(
    tmp_path: Path,
) -> None:
    engine, flipped = corrupt_table(tmp_path)
    try:
        snapshot = engine.snapshot()
        with pytest.raises(Exception) as absent:
            snapshot[b"no-such-key"]
        assert is_absent(absent.value)
        with pytest.raises(Exception) as failed:
            snapshot[SMALLEST]
        assert not is_absent(failed.value)
        error = read_error(failed.value)
        assert isinstance(error, StoreReadError)
        assert error.file == str(flipped)
        assert "Corruption" in error.engine_message
        closed = rocksdict.Rdict(str(tmp_path / "other"))
        closed.close()
        with pytest.raises(rocksdict.DbClosedError):
            closed.get(b"k")
        del snapshot
    finally:
        engine.close()


def test_named_file_finds_the_file_in_rocksdb_messages() -> None:
    assert (
        named_file(
            "Corruption: block checksum mismatch: stored = 1, computed = 2  in /s/db/000008.sst offset 5"
        )
        == "/s/db/000008.sst"
    )
    assert named_file("IO error: While open a file for random read: /s/db/000012.sst: No such file") == (
        "/s/db/000012.sst"
    )
    assert named_file("Corruption: bad record in /s/db/MANIFEST-000005") == "/s/db/MANIFEST-000005"
    assert named_file("Corruption: something without a file") is None


def test_every_engine_read_path_raises_on_a_failed_read_and_absence_stays_absence(tmp_path: Path) -> None:
    engine, flipped = corrupt_table(tmp_path)
    try:
        reader = SnapshotReader(engine.snapshot(), Position(), engine.index_snapshot(), {})
        with pytest.raises(StoreReadError) as failed:
            reader.get(SMALLEST)
        assert failed.value.file == str(flipped)
        with pytest.raises(StoreReadError):
            reader.get_many([LARGEST, SMALLEST])
        with pytest.raises(StoreReadError):  # not a short page with next_after None
            reader.prefix_scan(b"key-", limit=MAX_SCAN_LIMIT)
        with pytest.raises(StoreReadError):
            engine.get_latest([LARGEST, SMALLEST])
        with pytest.raises(StoreReadError):
            engine.get(SMALLEST)
        with pytest.raises(StoreReadError):
            engine.verify_page("default", None, KEYS)
        # Reads of good blocks and of absent keys answer as before.
        assert reader.get(LARGEST) == value(KEYS - 1)
        assert reader.get_many([b"no-such-key", LARGEST]) == [None, value(KEYS - 1)]
        assert engine.get_latest([b"no-such-key"]) == [None]
        assert engine.get(b"no-such-key") is None
        assert engine.get(LARGEST) == value(KEYS - 1)
        assert reader.prefix_scan(b"zzz").items == []
        reader.release()
    finally:
        engine.close()


# Reads of a view that reach the first data block of the table (``SMALLEST`` is in it).
READS: dict[str, tuple[bool, Callable[[ReadOnlyKeyValueStore], Any]]] = {
    "get": (False, lambda view: view.get(SMALLEST)),
    "get_many": (False, lambda view: view.get_many([LARGEST, SMALLEST])),
    # LARGEST enters the hot-key cache first; the key that is not cached is read and fails.
    "get_many_partly_cached": (False, lambda view: (view.get(LARGEST), view.get_many([LARGEST, SMALLEST]))),
    "prefix_scan": (False, lambda view: view.prefix_scan(b"key-", limit=MAX_SCAN_LIMIT)),
    "index_scan": (False, lambda view: view.index_scan("by_group", b"g0", limit=MAX_SCAN_LIMIT)),
    "as_of_get_many": (True, lambda view: view.get_many([LARGEST, SMALLEST])),
    "as_of_prefix_scan": (True, lambda view: view.prefix_scan(b"key-", limit=MAX_SCAN_LIMIT)),
    "as_of_index_scan": (True, lambda view: view.index_scan("by_group", b"g0", limit=MAX_SCAN_LIMIT)),
}


@dataclasses.dataclass
class Damaged:
    """A store restarted on a table damaged while it was stopped, and what it must hold."""

    store: Store
    topic: str
    model: dict[bytes, bytes]
    end: Position


@pytest.fixture
def damaged(
    make_topic: Callable[..., str], make_store: Callable[..., Store], producer: Producer, state_dir: Path
) -> Callable[..., Damaged]:
    """Factory: materialize ``KEYS`` keys (index and history unless ``plain``), stop, compact the
    files (see ``tests.support.damage.compact``), flip bytes in the first block of the file that
    starts at ``first_key``, and start the store again (READY)."""

    def make(first_key: bytes = SMALLEST, *, plain: bool = False) -> Damaged:
        options: dict[str, Any] = {} if plain else {"indexes": INDEXES, "history": HISTORY}
        topic = make_topic(partitions=3)
        records = [(b"key-%05d" % i, value(i)) for i in range(KEYS)]
        end = produce_tracked(producer, topic, records)
        first = make_store(topic, tuning=TUNING, **options)
        assert first.wait_until_ready(60)
        assert first.wait_for_indexes(60)
        first.stop()
        compact(state_dir / "s" / "db")
        flip_first_block(state_dir / "s" / "db", first_key)
        store = make_store(topic, tuning=TUNING, **options)
        assert store.wait_until_ready(60)
        assert store.wait_for_indexes(60)
        return Damaged(store, topic, latest_per_key(records), end)

    return make


def wait_rebuilt(store: Store, timeout: float = 60) -> None:
    """Until a copy without corruption is served, READY, after a corruption was found."""
    with store._changed:
        assert store._changed.wait_for(
            lambda: store.status().corruptions_found == 1 and store.readable and store.corruption is None,
            timeout,
        ), store.status()
    assert store.wait_until_ready(timeout)


def corruption_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "found corruption" in r.getMessage()]


@pytest.mark.parametrize("read", sorted(READS))
def test_a_read_that_meets_corruption_raises_and_the_store_rebuilds_exactly(
    damaged: Callable[..., Damaged], caplog: pytest.LogCaptureFixture, read: str
) -> None:
    caplog.set_level(logging.INFO, logger="store")
    case = damaged()
    store = case.store
    as_of, do_read = READS[read]
    with (
        pytest.raises(StoreReadError) as failed,
        store.view(as_of=store.position() if as_of else None) as view,
    ):
        do_read(view)
    assert str(failed.value.file).endswith(".sst")
    wait_rebuilt(store)
    assert_equals_model(store, case.model, case.end)
    assert store.status().records_applied_total == KEYS, "the store was not rebuilt from the topic"
    assert len(corruption_lines(caplog)) == 1, corruption_lines(caplog)
    assert "a read found corruption" in corruption_lines(caplog)[0]


def test_a_point_read_without_a_view_that_meets_corruption_raises_and_the_store_rebuilds_exactly(
    damaged: Callable[..., Damaged], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="store")
    case = damaged(plain=True)
    store = case.store
    assert store.latest(LARGEST) == (value(KEYS - 1), store.position())
    damaged_copy = store.status().copy_id
    with pytest.raises(StoreReadError) as failed:
        store.latest(SMALLEST)
    assert str(failed.value.file).endswith(".sst")
    with pytest.raises(StoreReadError):  # the copy is marked: no read of it is answered any more
        store.latest(LARGEST)
    wait_rebuilt(store)
    assert store.latest(SMALLEST) == (case.model[SMALLEST], case.end)
    # At the same position as the damaged copy, the rebuilt one is named anew: clients keep what
    # they read of a copy at a position (clients.spark.plan_cache) for that copy only.
    assert store.status().copy_id not in ("", damaged_copy)
    assert_equals_model(store, case.model, case.end)
    assert len(corruption_lines(caplog)) == 1, corruption_lines(caplog)
    assert "a read found corruption" in corruption_lines(caplog)[0]


def test_corruption_the_materializer_meets_while_applying_a_record_rebuilds_the_store(
    damaged: Callable[..., Damaged], producer: Producer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="store")
    case = damaged()
    store, model = case.store, case.model
    # Keeping the index right needs the row's current value: the materializer reads the bad block.
    end = case.end.merged(produce_tracked(producer, case.topic, [(SMALLEST, value(1))]))
    model[SMALLEST] = value(1)
    wait_rebuilt(store)
    assert store.wait_for_position(end, 60)
    assert_equals_model(store, model, end)
    with store.view() as view:
        assert SMALLEST in dict(view.index_scan("by_group", b"g1", limit=MAX_SCAN_LIMIT).items)
    assert len(corruption_lines(caplog)) == 1, corruption_lines(caplog)
    assert "the materializer found corruption" in corruption_lines(caplog)[0]


def test_corrupt_metadata_found_at_open_discards_the_copy_and_restores_it_from_the_topic(
    damaged: Callable[..., Damaged], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="store")
    # The metadata column family's first key: its first block holds the format version and offsets.
    case = damaged(b"format_version", plain=True)
    assert_equals_model(case.store, case.model, case.end)
    assert case.store.status().records_applied_total == KEYS, "the store was not restored from the topic"
    assert "reading the metadata of the store" in caplog.text
    assert "will be rebuilt from the topic" in caplog.text


def test_a_write_refused_for_corruption_rebuilds_the_store(
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """RocksDB refuses every write once a flush or compaction met a corrupt file; here the first
    write after READY is refused so (the refusal injected at the engine, the rest real)."""
    caplog.set_level(logging.INFO, logger="store")
    topic = make_topic(partitions=3)
    records = [(b"key-%05d" % i, value(i)) for i in range(200)]
    end = produce_tracked(producer, topic, records)
    store = make_store(topic, tuning=TUNING)
    assert store.wait_until_ready(60)
    refusal = Exception("Corruption: block checksum mismatch in /s/db/000009.sst offset 5")
    refusals = refuse_writes(monkeypatch, refusal, times=1)
    more = [(b"key-00001", value(7)), (b"key-99999", value(9))]
    end = end.merged(produce_tracked(producer, topic, more))
    wait_rebuilt(store)
    assert store.wait_for_position(end, 60)
    assert_equals_model(store, latest_per_key(records + more), end)
    assert refusals, "no write was refused"
    assert len(corruption_lines(caplog)) == 1, corruption_lines(caplog)
    assert "the materializer found corruption" in corruption_lines(caplog)[0]

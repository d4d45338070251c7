"""A copy whose history was written in the older version key layout (partition and offset order) is
rewritten when opened, also one left half rewritten, and then answers every read as of a time and
as of a position as the brute-force model does."""

from __future__ import annotations

import logging
import random
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import rocksdict
from confluent_kafka import Producer

from store import HistorySpec, Position, Store
from store.table.history_keys import parse_version_key, unescape
from store.table.timed_reader import TimedReader
from tests.store.table.test_timed import (
    BY_GROUP,
    KEYS,
    PARTITIONS,
    TUNING,
    assert_exact_at,
    compacted,
    probe_times,
    stamped_batch,
)
from tests.support.timed import produce_stamped, value_at

_OLD_SUFFIX = struct.Struct(">iq")  # the older layout: partition, offset + 1 (0: the base version)


def _old_key(history_key: bytes) -> bytes:
    partition, offset = parse_version_key(history_key)
    escaped = unescape(history_key).replace(b"\x00", b"\x00\xff") + b"\x00\x01"
    return escaped + _OLD_SUFFIX.pack(partition, offset + 1)


def _to_old_layout(db_path: Path, every: int) -> tuple[int, int]:
    """Rewrite every ``every``-th version of the stopped copy in the older layout and forget the
    recorded layout; returns how many versions there are and how many were rewritten."""
    options = rocksdict.Options(raw_mode=True)
    families = rocksdict.Rdict.list_cf(str(db_path), options)
    db = rocksdict.Rdict(str(db_path), options, column_families=dict.fromkeys(families, options))
    try:
        history, handle = db.get_column_family("history"), db.get_column_family_handle("history")
        iterator = history.iter()
        iterator.seek_to_first()
        versions = []
        while iterator.valid():
            versions.append((iterator.key(), iterator.value()))
            iterator.next()
        batch = rocksdict.WriteBatch(raw_mode=True)
        for history_key, stored in versions[::every]:
            batch.delete(history_key, handle)
            batch.put(_old_key(history_key), stored, handle)
        batch.delete(b"history_layout", db.get_column_family_handle("meta"))
        db.write(batch)
        return len(versions), len(versions[::every])
    finally:
        db.close()


@pytest.mark.parametrize("every", [1, 2])
def test_a_copy_of_the_older_layout_is_rewritten_when_opened_and_answers_as_the_model(
    every: int,
    make_topic: Callable[..., str],
    make_store: Callable[..., Store],
    producer: Producer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="store")
    rng = random.Random(290 + every)
    topic = make_topic(partitions=PARTITIONS)
    before = produce_stamped(producer, topic, stamped_batch(rng, 20, 1_000, 2_000))
    history = HistorySpec(retention_offsets=10**6)
    directory = tmp_path / "copy"

    def opened() -> Store:
        store = make_store(
            topic, name="t", directory=directory, tuning=TUNING, indexes=(BY_GROUP,), history=history
        )
        assert store.wait_until_ready(60), store.status()
        return store

    store = opened()
    records = compacted(before)
    first = len(records)
    for low in (5_000, 3_000, 8_000):
        records += produce_stamped(producer, topic, stamped_batch(rng, 25, low, low + 3_000))
    end = Position({p: max(r.offset for r in records if r.partition == p) + 1 for p in range(PARTITIONS)})
    assert store.wait_for_position(end, 60), store.status()
    store.stop()
    versions, rewritten = _to_old_layout(store.config.path / "db", every)
    assert rewritten >= versions // every > 0

    reopened = opened()
    assert any(f"rewrote {rewritten} versions" in r.getMessage() for r in caplog.records)
    floor = max(r.timestamp for r in before)
    for at in probe_times(records, floor):
        assert_exact_at(reopened, records, at)
    middle = Position(
        {p: (end[p] + min(r.offset for r in records[first:] if r.partition == p)) // 2 for p in end}
    )
    for at in probe_times(records, floor)[::3]:
        assert_exact_at(reopened, records, at, middle)
    times = [rng.choice(probe_times(records, floor)) for _ in range(60)]
    keys = [rng.choice(KEYS) for _ in times]
    with reopened.view(at_time=min(times)) as view:
        assert isinstance(view, TimedReader)
        assert view.get_many_at(keys, times) == [
            value_at(records, k, t) for k, t in zip(keys, times, strict=True)
        ]
    # Once rewritten, a later open has nothing left to rewrite.
    reopened.stop()
    caplog.clear()
    again = opened()
    assert not any("rewrote" in r.getMessage() for r in caplog.records)
    with again.view(at_time=max(times)) as view:
        assert view.get_many(KEYS) == [value_at(records, k, max(times)) for k in KEYS]

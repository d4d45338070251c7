"""The bulk restore: a chunk reduced to its last record per key in byte order; partitions shared
out by records left; worker processes that read their partitions into SST files."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING
from hypothesis import given
from hypothesis import strategies as st

from service.local.broker import LocalBroker
from store import RocksDBOptions, StoreTuning
from store.kafka.client import consumer_config
from store.kafka.frames import ChunkWritten, WorkerCaughtUp
from store.kafka.restore_worker import last_per_key_order, write_sst
from store.lifecycle.bulkload import BulkLoadError, BulkRestore, split_partitions
from store.table.engine import Engine
from tests.support.kafka import latest_per_key, produce, topic_end

# Short keys with many shared prefixes and trailing zero bytes: the cases zero padding gets wrong.
short_keys = st.binary(max_size=10).map(lambda b: b.rstrip(b"\x01") or b)
records = st.lists(st.tuples(short_keys, st.one_of(st.none(), st.binary(max_size=4))), max_size=80)


def sorted_last_per_key(
    keys: Sequence[bytes], values: Sequence[bytes | None]
) -> tuple[list[bytes], list[bytes | None]]:
    """Keys in byte order, each once, with the value of its last occurrence (None: tombstone)."""
    order = last_per_key_order(keys)
    return [keys[i] for i in order], [values[i] for i in order]


def test_last_occurrence_wins_and_tombstones_are_kept_as_none() -> None:
    keys, values = sorted_last_per_key([b"b", b"a", b"b", b"c", b"a"], [b"1", b"2", b"3", None, None])
    assert keys == [b"a", b"b", b"c"]
    assert values == [None, b"3", None]


def test_empty_chunk() -> None:
    assert sorted_last_per_key([], []) == ([], [])


def test_keys_that_differ_only_in_trailing_zero_bytes_are_distinct_and_in_byte_order() -> None:
    keys = [b"a\x00", b"a", b"", b"a\x00\x00", b"\x00", b"a", b"b" * 8, b"b" * 8 + b"\x00"]
    assert [keys[i] for i in last_per_key_order(keys)] == [
        b"",
        b"\x00",
        b"a",
        b"a\x00",
        b"a\x00\x00",
        b"b" * 8,
        b"b" * 8 + b"\x00",
    ]
    assert last_per_key_order(keys)[2] == 5  # the second b"a"


def _model(chunk: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    model: dict[bytes, bytes | None] = {}
    for key, value in chunk:
        model[key] = value
    return model


@given(records)
def test_equals_a_dict_model(chunk: list[tuple[bytes, bytes | None]]) -> None:
    model = _model(chunk)
    keys, values = sorted_last_per_key([k for k, _ in chunk], [v for _, v in chunk])
    assert keys == sorted(model)
    assert dict(zip(keys, values, strict=True)) == model


@given(
    st.lists(st.tuples(st.binary(min_size=16, max_size=16), st.binary(max_size=2)), max_size=60), st.data()
)
def test_fixed_width_keys_equal_a_dict_model(chunk: list[tuple[bytes, bytes]], data: st.DataObject) -> None:
    # Repeats of earlier keys, so that later values must win.
    chunk += [(key, b"again") for key, _ in data.draw(st.lists(st.sampled_from(chunk)))] if chunk else []
    model = _model(chunk)  # type: ignore[arg-type]
    keys, values = sorted_last_per_key([k for k, _ in chunk], [v for _, v in chunk])
    assert keys == sorted(model)
    assert dict(zip(keys, values, strict=True)) == model


@given(st.lists(st.tuples(st.binary(min_size=60, max_size=80), st.binary(max_size=2)), max_size=30))
def test_long_keys_take_the_plain_sort_and_equal_a_dict_model(chunk: list[tuple[bytes, bytes]]) -> None:
    model = _model(chunk)  # type: ignore[arg-type]
    keys, values = sorted_last_per_key([k for k, _ in chunk], [v for _, v in chunk])
    assert keys == sorted(model)
    assert dict(zip(keys, values, strict=True)) == model


def test_sst_files_are_compressed_like_the_database(tmp_path: Path) -> None:
    path = write_sst(tmp_path / "chunk.sst", [b"k%04d" % i for i in range(1000)], [b"v" * 100] * 1000)
    assert path is not None
    # The file's properties block names its compression.
    data = path.read_bytes()
    assert b"LZ4" in data
    assert b"Snappy" not in data


def _filter_bytes(engine: Engine) -> int:
    properties = engine._db.property_value("rocksdb.aggregated-table-properties") or ""
    return int(properties.split("filter block size=")[1].split(";")[0])


def test_sst_files_carry_the_databases_bloom_filters(tmp_path: Path) -> None:
    engine = Engine(tmp_path / "db", RocksDBOptions())
    try:
        path = write_sst(tmp_path / "chunk.sst", [b"k%04d" % i for i in range(1000)], [b"v"] * 1000)
        assert path is not None
        engine.ingest([path])
        # About 10 bits a key: without filters a read would search every level-0 file's index.
        assert _filter_bytes(engine) >= 1000
    finally:
        engine.close()


def _ingest_overlapping(engine: Engine, tmp_path: Path, files: int) -> None:
    """``files`` SST files that all span the same key range, so all but the first land in level 0."""
    for number in range(files):
        keys = [b"k%05d" % i for i in range(number, 3000, files)] + [b"z"]
        path = write_sst(tmp_path / f"{number}.sst", keys, [b"v%d" % number] * len(keys))
        assert path is not None
        engine.ingest([path])


def _level0_files(engine: Engine) -> int:
    return int(engine._db.property_int_value("rocksdb.num-files-at-level0") or 0)


def test_level0_files_fewer_than_rocksdb_compacts_are_merged(tmp_path: Path) -> None:
    engine = Engine(tmp_path / "db", RocksDBOptions())
    try:
        engine.defer_compactions(True)
        _ingest_overlapping(engine, tmp_path, 3)
        engine.defer_compactions(False)
        # Two files in level 0, below RocksDB's trigger (4): RocksDB alone would leave them there.
        assert engine.compact_leftover_level0() == 2
        assert _level0_files(engine) == 0
        assert engine.snapshot()[b"z"] == b"v2"  # the last file still wins
        assert engine.snapshot()[b"k00000"] == b"v0"
        assert engine.compact_leftover_level0() == 0
    finally:
        engine.close()


def _write_triggers(db_path: Path) -> tuple[int, int]:
    """The table's level-0 slowdown and stop triggers, from the options file RocksDB wrote last."""
    latest = max(db_path.glob("OPTIONS-*"), key=lambda path: int(path.name.split("-")[1]))
    table = latest.read_text().split('[CFOptions "default"]')[1].split("[CFOptions")[0]
    values = dict(line.strip().split("=", 1) for line in table.splitlines() if "=" in line)
    return int(values["level0_slowdown_writes_trigger"]), int(values["level0_stop_writes_trigger"])


def test_writes_go_on_while_a_large_restores_level0_files_are_compacted(tmp_path: Path) -> None:
    engine = Engine(tmp_path / "db", RocksDBOptions())
    try:
        engine.defer_compactions(True)
        _ingest_overlapping(engine, tmp_path, 40)
        assert _level0_files(engine) == 39  # above the 36 at which RocksDB stops every write
        engine.defer_compactions(False)
        # Else the restore's last records and offsets (and so READY) would wait for the compaction.
        assert engine._db.property_int_value("rocksdb.is-write-stopped") == 0
        assert _write_triggers(tmp_path / "db")[1] > 39
        batch = engine.new_batch()
        engine.put_offsets(batch, {0: 1})
        engine.write(batch)
        deadline = time.monotonic() + 30
        while _level0_files(engine) >= 20:
            assert time.monotonic() < deadline, "level 0 was never compacted after compactions resumed"
            time.sleep(0.05)
        engine.flush()  # a checkpoint: RocksDB's own triggers again
        assert _write_triggers(tmp_path / "db") == (20, 36)
        assert engine.stored_position() == {0: 1}
    finally:
        engine.close()


def test_partitions_are_shared_out_by_records_left() -> None:
    assert split_partitions({0: 100, 1: 100, 2: 100}, 3) == [[0], [1], [2]]
    # Four partitions on two workers: the two big ones apart, each with a small one.
    assert sorted(split_partitions({0: 1000, 1: 10, 2: 990, 3: 20}, 2)) == [[0, 1], [2, 3]]
    # An empty partition never gets a worker of its own, but is still read by one.
    shares = split_partitions({0: 500, 1: 0, 2: 0}, 3)
    assert len(shares) == 1
    assert shares == [[0, 1, 2]]
    assert split_partitions({0: 0}, 3) == [[0]]


def _restore(
    tmp_path: Path, bootstrap: str, topic: str, partitions: int, tuning: StoreTuning
) -> tuple[dict[bytes, bytes], list[ChunkWritten], dict[int, int]]:
    engine = Engine(tmp_path / "db", tuning.rocksdb)
    restore = BulkRestore(
        tmp_path / "bulk",
        consumer_config("bulk-test", {"bootstrap.servers": bootstrap}),
        topic,
        dict.fromkeys(range(partitions), OFFSET_BEGINNING),
        dict.fromkeys(range(partitions), 0),
        dict.fromkeys(range(partitions), 1000),
        tuning.restore,
        tuning.consumer,
    )
    chunks: list[ChunkWritten] = []
    ends: dict[int, int] = {}
    try:
        running = restore.workers
        while running:
            event = restore.next_event(timeout=30)
            assert event is not None, "no event from the restore workers in 30 s"
            if isinstance(event, ChunkWritten):
                if event.sst_path is not None:
                    engine.ingest([event.sst_path])
                chunks.append(event)
            elif isinstance(event, WorkerCaughtUp):
                running -= 1
                ends.update(event.next_offsets)
    finally:
        restore.close()
    table = dict(engine.snapshot().items())
    engine.close()
    return table, chunks, ends


def test_workers_read_every_partition_to_its_end_in_order(
    tmp_path: Path, broker: LocalBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=3)
    # Every key rewritten several times (always on its one partition), some deleted.
    records = [(b"k%04d" % (i % 700), None if i % 11 == 0 else b"v%d" % i) for i in range(6000)]
    produce(broker.bootstrap_servers, topic, records)
    tuning = StoreTuning().replace(bulk_load_chunk_records=500, bulk_load_workers=2, poll_max_records=100)
    table, chunks, ends = _restore(tmp_path, broker.bootstrap_servers, topic, 3, tuning)
    assert table == latest_per_key(records)
    assert ends == dict(topic_end(broker.bootstrap_servers, topic))
    assert sum(chunk.records for chunk in chunks) == 6000
    assert len(chunks) > 6
    # Each partition's chunks come in offset order (each worker's files in the order written).
    for partition in range(3):
        seen = [c.next_offsets[partition] for c in chunks if partition in c.next_offsets]
        assert seen == sorted(seen)
    assert not list((tmp_path / "bulk").glob("chunk-*"))  # ingested files were moved, others removed


def test_a_worker_that_fails_is_reported_and_close_stops_every_worker(tmp_path: Path) -> None:
    tuning = StoreTuning().replace(bulk_load_workers=2)
    # A setting librdkafka refuses: the worker cannot create its consumer.
    config = consumer_config("bulk-test", {"bootstrap.servers": "127.0.0.1:1", "fetch.wait.max.ms": "soon"})
    restore = BulkRestore(
        tmp_path / "bulk",
        config,
        "nowhere",
        {0: 0, 1: 0},
        {0: 0, 1: 0},
        {0: 9, 1: 9},
        tuning.restore,
        tuning.consumer,
    )
    try:
        assert restore.workers == 2
        with pytest.raises(BulkLoadError, match=r"fetch\.wait\.max\.ms"):
            restore.next_event(timeout=30)
    finally:
        restore.close()
    assert restore._process.poll() is not None


def test_compactions_wait_while_deferred_and_run_once_resumed(tmp_path: Path) -> None:
    engine = Engine(tmp_path / "db", RocksDBOptions())
    try:
        engine.defer_compactions(True)
        _ingest_overlapping(engine, tmp_path, 6)
        level0 = _level0_files(engine)
        # The first file went to the last level (nothing to overlap); the other five stay in level 0,
        # more than its compaction trigger (4).
        assert level0 == 5
        engine.defer_compactions(False)
        deadline = time.monotonic() + 30
        while _level0_files(engine) >= 4:
            assert time.monotonic() < deadline, "level 0 was never compacted after compactions resumed"
            time.sleep(0.05)
        assert engine.snapshot()[b"z"] == b"v5"
    finally:
        engine.close()


_ORPHAN_PARENT = """
import sys, time
from pathlib import Path
from store import ConsumerTuning, RestoreTuning
from store.lifecycle.bulkload import BulkRestore
from store.kafka.client import consumer_config
from store.kafka.frames import ChunkWritten, WorkerCaughtUp
restore = BulkRestore(
    Path(sys.argv[1]), consumer_config("orphan", {"bootstrap.servers": "127.0.0.1:1"}), "t",
    {0: -2, 1: -2}, {0: 0, 1: 0}, {0: 5, 1: 5}, RestoreTuning(bulk_load_workers=2), ConsumerTuning(),
)
print(restore._process.pid, flush=True)
time.sleep(120)
"""


def _forked_workers(forker: int, count: int) -> list[int]:
    """The pids of the ``count`` workers ``forker`` forked, once they all exist."""
    deadline = time.monotonic() + 30
    while True:
        children = Path(f"/proc/{forker}/task/{forker}/children")
        workers = [int(pid) for pid in children.read_text().split()] if children.exists() else []
        if len(workers) >= count:
            return workers
        assert time.monotonic() < deadline, f"{count} workers were never forked: {workers}"
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_workers_stop_when_the_store_process_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_PARENT, str(tmp_path / "bulk")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        forker = int(parent.stdout.readline())
        workers = _forked_workers(forker, 2)  # both waiting for the (absent) broker
    finally:
        parent.kill()  # SIGKILL: the store's process has no chance to stop its workers
        parent.wait()
    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in [forker, *workers]):
        assert time.monotonic() < deadline, "restore workers outlived the store's process"
        time.sleep(0.05)


def test_close_stops_waiting_workers_and_leaves_no_process_behind(tmp_path: Path) -> None:
    tuning = StoreTuning().replace(bulk_load_workers=2)
    config = consumer_config("bulk-test", {"bootstrap.servers": "127.0.0.1:1"})
    restore = BulkRestore(
        tmp_path / "bulk",
        config,
        "nowhere",
        {0: -2, 1: -2},
        {0: 0, 1: 0},
        {0: 9, 1: 9},
        tuning.restore,
        tuning.consumer,
    )
    workers = _forked_workers(restore._process.pid, 2)
    restore.close()
    assert restore._process.poll() is not None
    # Reaped, not only killed: a container's init (the service itself) would never reap them.
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]

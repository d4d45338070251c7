"""Merging a bulk restore's files before READY (``store.lifecycle.settle``), on a real RocksDB."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import RestoreMode, RocksDBOptions
from store.exceptions import StoreFullError
from store.kafka.restore_worker import write_sst
from store.lifecycle import settle
from store.lifecycle.progress import Progress
from store.lifecycle.settle import settle_restored_files
from store.table import Engine
from store.table.options import TARGET_FILE_BYTES

_LOG = logging.LoggerAdapter(logging.getLogger("store.lifecycle.materializer"), {"store": "s"})


def _ingest_overlapping(engine: Engine, tmp_path: Path, files: int) -> None:
    """``files`` SST files spanning the same key range, as a bulk restore's chunks do: all but
    the first land in level 0."""
    for number in range(files):
        keys = [b"k%05d" % i for i in range(number, 3000, files)] + [b"z"]
        path = write_sst(tmp_path / f"{number}.sst", keys, [b"v%d" % number] * len(keys))
        assert path is not None
        engine.ingest([path])


class _Watched:
    """An engine whose compaction checks record the restore mode the progress shows meanwhile.

    Compactions deferred by the test resume once the level-0 files were first counted, as after
    a bulk restore (RocksDB merges a few small files in milliseconds: else they could be gone
    before they were counted).
    """

    def __init__(self, engine: Engine, progress: Progress) -> None:
        self.engine = engine
        self.progress = progress
        self.modes: list[RestoreMode] = []
        self._resumed = False

    def level0(self) -> tuple[int, int]:
        found = self.engine.level0()
        if not self._resumed:
            self.engine.defer_compactions(False)
            self._resumed = True
        return found

    def compactions(self) -> tuple[int, bool]:
        self.modes.append(self.progress.restore_mode)
        return self.engine.compactions()

    def compact_leftover_level0(self) -> int:
        self.modes.append(self.progress.restore_mode)
        return self.engine.compact_leftover_level0()

    def check_writable(self) -> None:
        self.engine.check_writable()

    def block_cache_room(self) -> tuple[int, int]:
        return self.engine.block_cache_room()

    def warm_block_cache(self, stop: threading.Event) -> int:
        self.modes.append(self.progress.restore_mode)
        return self.engine.warm_block_cache(stop)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = Engine(tmp_path / "db", RocksDBOptions())
    yield engine
    engine.close()


def test_many_restored_files_are_merged_before_it_returns(engine: Engine, tmp_path: Path) -> None:
    engine.defer_compactions(True)
    _ingest_overlapping(engine, tmp_path, 12)
    assert engine.level0()[0] == 11  # above RocksDB's trigger (4): its own compaction merges them
    progress = Progress()
    watched = _Watched(engine, progress)

    assert settle_restored_files(watched, progress, threading.Event(), _LOG, "s") == 11

    assert engine.level0()[0] == 0
    assert engine.compactions() == (0, False)  # nothing left to compete with the first reads
    assert RestoreMode.COMPACTING in watched.modes  # the restore's progress showed the phase
    assert progress.restore_mode is RestoreMode.RECORDS
    assert engine.snapshot()[b"z"] == b"v11"  # the last file still wins
    assert engine.snapshot()[b"k00000"] == b"v0"


def test_fewer_files_than_rocksdb_compacts_are_merged_too(engine: Engine, tmp_path: Path) -> None:
    engine.defer_compactions(True)
    _ingest_overlapping(engine, tmp_path, 3)
    progress = Progress()
    watched = _Watched(engine, progress)

    # Two files in level 0, below RocksDB's trigger: RocksDB alone would leave them there for good.
    assert settle_restored_files(watched, progress, threading.Event(), _LOG, "s") == 2

    assert engine.level0()[0] == 0
    assert RestoreMode.COMPACTING in watched.modes  # shown while the merge ran
    assert engine.snapshot()[b"z"] == b"v2"


def test_a_table_with_nothing_in_level0_is_left_alone(engine: Engine, tmp_path: Path) -> None:
    _ingest_overlapping(engine, tmp_path, 1)  # one file: straight to the last level
    progress = Progress()
    watched = _Watched(engine, progress)
    assert settle_restored_files(watched, progress, threading.Event(), _LOG, "s") == 0
    assert RestoreMode.COMPACTING not in watched.modes


class _Stuck:
    """RocksDB with a compaction due that it never starts (pure logic: no database)."""

    def __init__(self, writable_error: Exception | None = None) -> None:
        self.writable_error = writable_error
        self.checks = 0

    def level0(self) -> tuple[int, int]:
        return 10, 10 * 2**20

    def compactions(self) -> tuple[int, bool]:
        return 0, True

    def compact_leftover_level0(self) -> int:
        raise AssertionError("ten files are RocksDB's to merge")

    def check_writable(self) -> None:
        self.checks += 1
        if self.writable_error is not None:
            raise self.writable_error

    def block_cache_room(self) -> tuple[int, int]:
        return 0, 0

    def warm_block_cache(self, stop: threading.Event) -> int:
        raise AssertionError("an empty table is not read")


def test_a_compaction_rocksdb_never_starts_ends_the_wait(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(settle, "_IDLE_LIMIT_SECONDS", 0.2)
    monkeypatch.setattr(settle, "_POLL_SECONDS", 0.01)
    caplog.set_level(logging.WARNING, logger="store.lifecycle.materializer")
    stuck, progress = _Stuck(), Progress()
    assert settle_restored_files(stuck, progress, threading.Event(), _LOG, "s") == 10
    assert stuck.checks > 1  # asked RocksDB whether it takes writes while nothing ran
    assert progress.restore_mode is RestoreMode.RECORDS
    assert any("started no compaction" in r.getMessage() for r in caplog.records)


def test_a_refused_write_while_waiting_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settle, "_POLL_SECONDS", 0.01)
    stuck, progress = _Stuck(StoreFullError("the volume is full")), Progress()
    with pytest.raises(StoreFullError):
        settle_restored_files(stuck, progress, threading.Event(), _LOG, "s")
    assert progress.restore_mode is RestoreMode.RECORDS


def test_a_stop_ends_the_wait() -> None:
    stop = threading.Event()
    stop.set()
    stuck = _Stuck()
    assert settle_restored_files(stuck, Progress(), stop, _LOG, "s") == 10
    assert stuck.checks == 0


def _latest_options(tmp_path: Path) -> list[str]:
    latest = max((tmp_path / "db").glob("OPTIONS-*"), key=lambda path: int(path.name.split("-")[1]))
    return latest.read_text().split()


def test_the_merge_may_take_a_second_thread(engine: Engine, tmp_path: Path) -> None:
    # Nothing else of the store runs while it merges before READY.
    assert "max_subcompactions=2" in _latest_options(tmp_path)


def test_a_small_table_is_merged_in_two_threads_too(engine: Engine, tmp_path: Path) -> None:
    # RocksDB splits a merge only into ranges of at least one output file: a table smaller than
    # two default files (64 MiB) would be merged in one thread, one core idle before READY.
    engine.defer_compactions(True)
    for number in range(6):
        keys = [b"k%05d" % i for i in range(number, 4200, 6)]
        path = write_sst(tmp_path / f"{number}.sst", keys, [os.urandom(1000) for _ in keys])
        assert path is not None
        engine.ingest([path])
    progress = Progress()

    assert settle_restored_files(_Watched(engine, progress), progress, threading.Event(), _LOG, "s") == 5

    assert engine.level0()[0] == 0
    # RocksDB's own account of the merge (its info log): it ran as two subcompactions.
    events = re.findall(r'"num_subcompactions": (\d+)', (tmp_path / "db" / "LOG").read_text())
    assert events == ["2"]
    default = f"target_file_size_base={TARGET_FILE_BYTES}"
    during = _latest_options(tmp_path).count(default)  # the table's family had it lowered
    engine.flush()  # as the store does right after: the default comes back for later compactions
    assert _latest_options(tmp_path).count(default) == during + 1


def _cached_bytes(engine: Engine) -> int:
    return int(engine._db.property_int_value("rocksdb.block-cache-usage") or 0)


def test_the_merged_table_is_read_into_a_cache_with_room_for_it(engine: Engine, tmp_path: Path) -> None:
    engine.defer_compactions(True)
    _ingest_overlapping(engine, tmp_path, 12)
    progress = Progress()
    watched = _Watched(engine, progress)
    before = _cached_bytes(engine)

    settle_restored_files(watched, progress, threading.Event(), _LOG, "s")

    assert watched.modes[-1] is RestoreMode.WARMING  # shown while the table was read
    assert progress.restore_mode is RestoreMode.RECORDS
    needed, _ = engine.block_cache_room()
    assert needed > 3000 * 6  # the keys and values of 3,001 entries
    assert _cached_bytes(engine) - before >= needed // 2


def test_a_cache_without_room_for_the_table_is_left_alone(tmp_path: Path) -> None:
    small = Engine(tmp_path / "db", RocksDBOptions(block_cache_bytes=4096))
    try:
        _ingest_overlapping(small, tmp_path, 1)
        progress = Progress()
        watched = _Watched(small, progress)
        needed, room = small.block_cache_room()
        assert needed > room
        settle_restored_files(watched, progress, threading.Event(), _LOG, "s")
        assert RestoreMode.WARMING not in watched.modes
    finally:
        small.close()


def test_warming_reads_every_entry_once(engine: Engine, tmp_path: Path) -> None:
    _ingest_overlapping(engine, tmp_path, 1)
    assert engine.warm_block_cache(threading.Event()) == 3001
    stop = threading.Event()
    stop.set()
    assert engine.warm_block_cache(stop) <= 3001  # a stop ends it at its next check

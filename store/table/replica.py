"""One local copy of a store's table: a RocksDB database with its position, indexes and history.

A store normally has one replica that the materializer writes and readers read. While a store
rebuilds from scratch it has two: readers keep the last good copy until the new one is READY.
This module opens the copy, writes records into it and gives its views; the copy's indexes are
``store.table.replica_indexes``, its history state ``store.table.replica_history``, and the view of
its current state ``store.table.cached_reader``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import secrets
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from store.exceptions import (
    StoreCorruptError,
    StoreReadError,
    StoreWriteError,
)
from store.protocol import CorruptionReport, MemoryUsage
from store.table import families, history, timed, winners
from store.table.asof import AsOfReader, ViewParts
from store.table.cached_reader import CachedReader
from store.table.corruption import drop_engine_references
from store.table.engine import Engine
from store.table.history import HistoryRecorder
from store.table.hot_keys import MISS, HotKeyCache
from store.table.indexes import STATE_PREFIX, parse_states
from store.table.key_count import KeyCount, KeyCounter
from store.table.replica_history import HistoryState
from store.table.replica_indexes import IndexedCopy
from store.table.seams import Changes, TableConfig
from store.table.snapshot_reader import SnapshotReader
from store.table.timed import TimeBounds
from store.table.timed_reader import TimedReader
from store.table.timelines import Timelines
from store.table.volume import destroy
from store.table.winners import Winners
from wire.position import Position

logger = logging.getLogger(__name__)

TIMELINE_CACHE_SHARE = 16
"""The hot timelines a copy keeps: one for every this many entries of its hot-key cache."""

CORRUPTION_MARKER = "CORRUPTION_FOUND"
"""A file in a copy found corrupt, so that a restart discards the copy instead of serving it."""


class Replica(IndexedCopy, HistoryState):
    """A RocksDB copy of the table and the state that goes with it.

    Writes come from the materializer thread only. ``lock`` (the owning store's) guards what
    readers look at together: a write and the position it reaches, snapshots and the position
    they reflect, the hot-key cache.
    """

    def __init__(self, config: TableConfig, path: Path, lock: threading.Condition) -> None:
        self.config = config
        self.path = path
        self._changed = lock
        self.engine = self._open(path)
        # Set once a read of this copy failed (corruption, I/O error): it answers no read any more.
        self.corruption: CorruptionReport | None = None
        self.position = self.engine.stored_position()
        # Names this opened copy: at one position it always holds the same rows (store.protocol).
        self.copy_id = secrets.token_hex(8)
        self.generation = 0
        self._cache: HotKeyCache[bytes | None] = HotKeyCache(config.tuning.read_cache_entries)
        # Hot keys' versions for reads as of a time (``store.table.timelines``): a key's several
        # versions take the room of several values.
        self.timelines = Timelines(
            config.tuning.read_cache_entries // TIMELINE_CACHE_SHARE if config.history else 0, lock
        )
        self.indexes = {spec.name: spec for spec in config.indexes}
        states = self._index_states()
        self.ready_indexes = {
            name: spec for name, spec in self.indexes.items() if states.get(name) == (spec.field, "ready")
        }
        self.index_progress: dict[str, int] = {}  # rows indexed so far, per index being built
        self.history = HistoryRecorder(config.history) if config.history else None
        self.history_start = Position()
        self.history_floor: Position | None = None
        self.time_bounds = TimeBounds({})
        self._load_history_state()
        self._winners_cursor: bytes | None = None  # where pruning natural keys' entries goes on
        self._key_counter = KeyCounter(self.engine, self.position)

    @property
    def name(self) -> str:
        return self.config.name

    def _open(self, path: Path) -> Engine:
        try:
            return self._open_checked(path)
        except StoreCorruptError as exc:
            # The failed read's frames hold the database open; the copy is reopened once they are gone.
            drop_engine_references(exc)
            failure = str(exc)
        logger.warning('store "%s": %s', self.config.name, failure)
        destroy(path)
        return Engine(path, self.config.tuning.rocksdb)

    def _open_checked(self, path: Path) -> Engine:
        """Open the copy at ``path``; ``StoreCorruptError`` if it is known or found corrupt."""
        marker = path / CORRUPTION_MARKER
        if marker.exists():
            found = marker.read_text(errors="replace").strip()
            raise StoreCorruptError(
                f"the copy at {path} was found corrupt before this start ({found}); it will be rebuilt"
                " from the topic"
            )
        engine = Engine(path, self.config.tuning.rocksdb)
        failure = None
        try:
            # What opening reads anyway: a failure here must discard the copy, not fail the store.
            engine.stored_position()
            engine.topic_identity()
            parse_states(engine.prefixed(families.META, STATE_PREFIX))
            history.stored_start(engine)
            history.stored_time_log(engine)
        except StoreReadError as exc:
            failure = exc.engine_message
        # Closed only once the failed read (and the iterator its traceback holds) is gone.
        if failure is not None:
            engine.close()
            raise StoreCorruptError(
                f"reading the metadata of the store at {path} failed ({failure}); it will be rebuilt"
                " from the topic"
            )
        return engine

    def mark_corrupt(self, report: CorruptionReport) -> None:
        """Answer no read from this copy any more, and leave a marker so a restart discards it.

        Called with the lock held.
        """
        self.corruption = report
        self._cache.clear()
        self.timelines.clear()
        try:
            (self.path / CORRUPTION_MARKER).write_text(f"{report.detail}\n")
        except OSError as exc:  # the volume may be failing too; the copy is replaced anyway
            logger.warning('store "%s": cannot mark the copy at %s corrupt: %s', self.name, self.path, exc)

    def memory(self) -> MemoryUsage:
        usage = self.engine.memory(len(self._cache))
        with self._changed:  # the timelines' two figures change together, under the lock
            entries, size = len(self.timelines), self.timelines.size
        return dataclasses.replace(usage, timeline_entries=entries, timeline_bytes=size)

    def close(self, flush: bool = True) -> None:
        if flush:
            try:
                self.engine.flush()
            except (StoreWriteError, StoreReadError) as exc:  # as after a crash: re-read from the offsets
                logger.warning('store "%s": closing without a final checkpoint: %s', self.name, exc)
        self._key_counter.stop()
        self.engine.close()

    @property
    def key_count(self) -> KeyCount | None:
        """The copy's keys as last counted exactly, with the position counted at (``None``: not
        counted yet); ``store.table.key_count``."""
        return self._key_counter.count

    def count_keys(self) -> None:
        """Count a page of the copy's keys, starting a count when the last one is out of date
        (materializer thread, between writes)."""
        self._key_counter.step(self.position)

    # -- reads (called with the lock held) ----------------------------------------------------

    def reader(self, as_of: Position | None, at_time: int | None = None) -> Reader:
        if at_time is not None:
            # A time is read from history, at the current position unless one is asked.
            as_of = self.position if as_of is None else as_of
        if as_of is not None:
            # Checked before any snapshot is taken: a refused view must pin nothing (a traceback
            # kept by the caller would otherwise hold the database open past ``stop()``).
            as_of = self._check_as_of(as_of)
        if at_time is not None:
            timed.check_time(self.name, at_time, self.time_bounds)
        engine = self.engine
        latest = SnapshotReader(
            engine.snapshot(),
            self.position,
            engine.index_snapshot() if self.indexes else None,
            dict(self.ready_indexes),
        )
        if as_of is None:
            return CachedReader(self, latest, self.generation)
        history_snapshot = engine.history_snapshot()
        parts = ViewParts(
            latest,
            history_snapshot.iter(),
            history_snapshot.iter(),
            engine.changes_snapshot().iter(),
            engine.index_snapshot().iter() if self.indexes else None,
            dict(self.ready_indexes),
            as_of,
            frozenset(self.indexes.keys() - self.ready_indexes.keys()),
        )
        if at_time is None:
            return AsOfReader(parts)
        # Timelines hold every version: they answer a view at the copy's position only.
        timelines = self.timelines if self.timelines.enabled and as_of == self.position else None
        return TimedReader(
            parts,
            at_time=at_time,
            bounds=self.time_bounds,
            store=self.name,
            timelines=None if timelines is None else (timelines, timelines.generation),
        )

    def latest(self, key: bytes) -> bytes | None:
        """The value of ``key`` now (``None``: absent): the hot-key cache's, else the table's, then
        offered to the cache. Called with the lock held, so that it is the value at ``position``."""
        cache = self._cache
        value = cache.get(key)
        if value is MISS:
            value = self.engine.get(key)
            cache.offer((key,), (value,))
        return value  # type: ignore[return-value]  # not MISS: a value or None

    @property
    def caches_hot_keys(self) -> bool:
        return self._cache.capacity > 0

    def cache_lookup(self, generation: int, keys: Sequence[bytes]) -> tuple[list[object], bool] | None:
        """The hot-key cache's values (``MISS`` where it has none) and whether it had every key;
        ``None`` once the copy moved past ``generation``, whose reads the cache cannot answer."""
        with self._changed:
            if generation != self.generation:
                return None
            return self._cache.find(keys)

    def cache_fill(
        self, generation: int, keys: Sequence[bytes], values: Sequence[bytes | None], asked: int
    ) -> None:
        """Offer values read at ``generation`` for the ``keys`` a batch of ``asked`` keys missed to
        the hot-key cache (ignored if writes came since)."""
        with self._changed:
            if generation == self.generation:
                self._cache.offer(keys, values, asked)

    # -- writes (materializer thread) ---------------------------------------------------------

    def apply(self, records: Changes) -> None:
        """Write records, tombstones and the partitions' next offsets in one atomic batch."""
        engine = self.engine
        keys, values = records.keys, records.values
        batch = engine.new_batch()
        metas = records.metas
        if records.schema_ids is not None and keys:
            assert metas is not None, "records under natural keys need their metadata"
            # Made per batch: nothing may hold the engine's families once the copy is closed.
            resolver = Winners(engine.family(families.META), engine.handle(families.META), engine.get)
            keys, values, metas = resolver.resolve(batch, keys, values, metas, records.schema_ids)
        for key, value in zip(keys, values, strict=True):
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        if self.ready_indexes and keys:
            self._maintain_indexes(batch, keys, values)
        if self.history is not None and records.keys:
            assert records.metas is not None, "records of a store that keeps history need their metadata"
            # Every record, also one under a natural key that changes no answer now: reads of the
            # past weigh them all (``store.table.winners``, "Reads of the past").
            if self.history_start:
                earlier = None
                if records.schema_ids is not None:
                    meta = engine.family(families.META)
                    earlier = functools.partial(winners.earlier, meta, engine.get_latest)
                self.history.record(
                    engine, batch, records.keys, records.values, records.metas, earlier, records.schema_ids
                )
            else:
                self._bound_base_times(batch, records.metas)
        engine.put_offsets(batch, records.next_offsets)
        with self._changed:
            engine.write(batch)
            self._advance(records.next_offsets)
            self._cache.drop(keys)
            self.timelines.written(records.keys)

    def ingest(
        self, sst_path: Path | None, next_offsets: dict[int, int], newest_times: dict[int, int] | None = None
    ) -> None:
        """Ingest a bootstrap chunk's SST file, then record the chunk's offsets (and, for history,
        the newest record timestamp of each partition, ``None`` when unknown)."""
        engine = self.engine
        batch = engine.new_batch()
        engine.put_offsets(batch, next_offsets)
        for spec in self.ready_indexes.values():
            # Bulk chunks carry no index entries: the indexes are rebuilt once the bootstrap ends.
            self._put_index_state(batch, spec.name, spec.field, "building")
        reset_history = bool(self.history_start)
        if self.history is not None:
            if newest_times is None:
                timed.put_bulk(engine, batch)  # the chunk's records come without their timestamps
            else:
                self._bound_base_times(batch, [(p, 0, t) for p, t in newest_times.items()])
        if reset_history:
            # Bulk chunks carry no versions: history restarts when the store is READY again.
            history.clear(engine, batch)
        with self._changed:
            self.ready_indexes = {}
            if self.history is not None and newest_times is None:
                self.time_bounds = dataclasses.replace(self.time_bounds, known=False)
            if reset_history:
                self.history_start = Position()
                self.history_floor = None
                logger.warning(
                    'store "%s": bulk restore of a large gap; history restarts once the store is READY',
                    self.name,
                )
            if sst_path is not None:
                engine.ingest([sst_path])
            engine.write(batch)
            self._advance(next_offsets)
            self._cache.clear()
            self.timelines.clear()

    def _advance(self, offsets: Mapping[int, int]) -> None:
        merged = dict(self.position)
        merged.update(offsets)
        self.position = Position(merged)
        self.generation += 1
        self._changed.notify_all()

    def maintain_winners(self, budget: int = 10_000) -> int:
        """Drop the entries of natural keys deleted long enough ago (``store.table.winners``), at most
        ``budget`` natural keys looked at a call, going on where the last call stopped; how many."""
        if self.engine.natural_keys() is None:
            return 0
        engine = self.engine
        batch = engine.new_batch()
        dropped, self._winners_cursor = winners.prune(
            engine.family(families.META),
            engine.handle(families.META),
            batch,
            start=self._winners_cursor or b"",
            budget=budget,
            grace_ms=self.config.tuning.maintenance.natural_tombstone_grace_ms,
        )
        if dropped:
            engine.write(batch)  # no reader reads the entries: no lock needed
        return dropped


Reader = CachedReader | AsOfReader
"""What :meth:`Replica.reader` gives: a view's reads, and ``release`` once it is done."""

"""One local copy of a store's table: a RocksDB database with its position, indexes and history.

A store normally has one replica that the materializer writes and readers read. While a store
rebuilds from scratch it has two: readers keep the last good copy until the new one is READY.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from store.exceptions import (
    HistoryExpiredError,
    HistoryNotKeptError,
    IndexNotReadyError,
    PositionNotReachedError,
    StoreCorruptError,
    StoreReadError,
    StoreWriteError,
)
from store.protocol import MAX_SCAN_LIMIT, CorruptionReport, MemoryUsage, ScanPage
from store.table import families, history, history_layout, timed, winners
from store.table.asof import AsOfReader, ViewParts
from store.table.corruption import drop_engine_references
from store.table.engine import Engine
from store.table.history import HistoryRecorder, floor_from
from store.table.hot_keys import MISS, HotKeyCache, read_misses
from store.table.indexes import OUTDATED, STATE_PREFIX, IndexSpec, index_changes, parse_states, state_entry
from store.table.key_count import KeyCount, KeyCounter
from store.table.seams import Changes, TableConfig
from store.table.snapshot_reader import SnapshotReader, prefix_upper_bound
from store.table.timed import TimeBounds, newest_per_partition
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


class Replica:
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
            return _CachedReader(self, latest, self.generation)
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

    def _check_as_of(self, as_of: Position) -> Position:
        """``as_of`` on every partition of the copy (0 where it names none), once it is answered."""
        if self.history is None:
            raise HistoryNotKeptError(
                f'store "{self.name}" keeps no history; configure its history retention to read as_of'
            )
        position = self.position
        if as_of is not position and not position.reaches(as_of):
            raise PositionNotReachedError(f'store "{self.name}" is at {position}, not yet at {as_of}')
        # A read as of a time at the copy's position asks that very position: nothing to rebuild.
        pinned = as_of if as_of is position else Position({p: as_of.get(p, 0) for p in position})
        floor = self.history_floor
        if floor is None or not pinned.reaches(floor):
            raise HistoryExpiredError(self.name, as_of, floor if floor is not None else "no position yet")
        return pinned

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
                self.history.record(engine, batch, records.keys, records.values, records.metas, earlier)
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

    # -- indexes ------------------------------------------------------------------------------

    def _maintain_indexes(self, batch: Any, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """Add to ``batch`` the index entry changes of these records, in record order."""
        engine = self.engine
        index = engine.handle(families.INDEX)
        unique = list(dict.fromkeys(keys))
        current = dict(zip(unique, engine.get_latest(unique), strict=True))
        specs = list(self.ready_indexes.values())
        for key, value in zip(keys, values, strict=True):
            deletes, puts = index_changes(specs, key, current[key], value)
            for entry in deletes:
                batch.delete(entry, index)
            for entry in puts:
                batch.put(entry, b"", index)
            current[key] = value

    def _index_states(self) -> dict[str, tuple[str, str]]:
        return parse_states(self.engine.prefixed(families.META, STATE_PREFIX))

    def _put_index_state(self, batch: Any, name: str, field: str, state: str | None) -> None:
        """Add an index's state to ``batch`` (``None``: the index no longer exists)."""
        key, value = state_entry(name, field, state)
        if value is None:
            batch.delete(key, self.engine.handle(families.META))
        else:
            batch.put(key, value, self.engine.handle(families.META))

    def _drop_index_entries(self, batch: Any, spec: IndexSpec) -> None:
        """Add to ``batch``: remove every entry of the index."""
        upper = prefix_upper_bound(spec.prefix)
        assert upper is not None, "index prefixes never consist of 0xff bytes only"
        batch.delete_range(spec.prefix, upper, self.engine.handle(families.INDEX))

    def build_indexes(self, stop: threading.Event) -> None:
        """Build every configured index that is not ready; drop indexes no longer configured.

        Runs on the materializer thread once the store is READY, so no record is applied
        meanwhile; reads of the store go on (an index being built answers IndexNotReadyError).
        """
        engine = self.engine
        states = self._index_states()
        batch = engine.new_batch()
        for name, (field, _state) in states.items():
            if name not in self.indexes:
                self._drop_index_entries(batch, IndexSpec(name, field))
                self._put_index_state(batch, name, field, None)
                logger.info('store "%s": dropped index "%s" (no longer configured)', self.name, name)
        engine.write(batch)
        ready = {
            name: spec for name, spec in self.indexes.items() if states.get(name) == (spec.field, "ready")
        }
        with self._changed:
            self.ready_indexes = dict(ready)
        for spec in self.indexes.values():
            if spec.name in ready or stop.is_set():
                continue
            if states.get(spec.name) == (spec.field, OUTDATED):
                logger.info(
                    'store "%s": index "%s" was stored by an older statestore (numbers as parsed, not'
                    " as written); rebuilding it",
                    self.name,
                    spec.name,
                )
            self._build_index(spec, stop)

    def _build_index(self, spec: IndexSpec, stop: threading.Event) -> None:
        engine = self.engine
        started = time.monotonic()
        total = engine.approximate_num_keys()
        logger.info(
            'store "%s": building index "%s" on field "%s" (~%d rows)',
            self.name,
            spec.name,
            spec.field,
            total,
        )
        batch = engine.new_batch()
        self._drop_index_entries(batch, spec)
        self._put_index_state(batch, spec.name, spec.field, "building")
        engine.write(batch)
        self.index_progress[spec.name] = 0
        rows = 0
        last_log = started
        # No record is applied while the index is built (same thread): one snapshot sees all rows.
        with self._changed:
            reader = SnapshotReader(engine.snapshot(), self.position)
        try:
            after: bytes | None = None
            while True:
                if stop.is_set():
                    return  # left "building": the next start builds it again
                page = reader.prefix_scan(b"", after=after, limit=MAX_SCAN_LIMIT)
                batch = engine.new_batch()
                index = engine.handle(families.INDEX)
                for key, value in page.items:
                    indexed = spec.extract(value)
                    if indexed is not None:
                        batch.put(spec.entry_key(indexed, key), b"", index)
                rows += len(page.items)
                if page.next_after is None:
                    self._put_index_state(batch, spec.name, spec.field, "ready")
                with self._changed:
                    engine.write(batch)
                    if page.next_after is None:
                        self.ready_indexes[spec.name] = spec
                        self._changed.notify_all()
                self.index_progress[spec.name] = rows
                now = time.monotonic()
                if now - last_log >= self.config.tuning.restore.progress_log_interval_seconds:
                    last_log = now
                    logger.info('store "%s": index "%s" %d of ~%d rows', self.name, spec.name, rows, total)
                if page.next_after is None:
                    break
                after = page.next_after
        finally:
            reader.release()
        self.index_progress.pop(spec.name, None)
        logger.info(
            'store "%s": index "%s" ready (%d rows in %.1fs)',
            self.name,
            spec.name,
            rows,
            time.monotonic() - started,
        )

    # -- history ------------------------------------------------------------------------------

    @property
    def keeps_history(self) -> bool:
        """Whether records must come with ``(partition, offset, timestamp)`` for history (also
        before history begins: their timestamps bound the times of the versions it starts from)."""
        return self.history is not None

    def _bound_base_times(self, batch: Any, metas: Sequence[tuple[int, int, int]]) -> None:
        """Add to ``batch``: raise each partition's pre-history time bound (``store.table.timed``)."""
        known = self.time_bounds.base_times
        raised = {
            partition: timestamp
            for partition, timestamp in newest_per_partition(metas).items()
            if timestamp > known.get(partition, timed.NO_TIME)
        }
        if raised:
            timed.put_base_times(self.engine, batch, raised)
            # Only the writer thread reads these before history begins: no reader looks yet.
            self.time_bounds = dataclasses.replace(self.time_bounds, base_times={**known, **raised})

    def _load_history_state(self) -> None:
        engine = self.engine
        history_layout.upgrade(engine, self.name)
        if self.history is None:
            if history.stored_start(engine) or timed.stored_bounds(engine) != timed.TimeBounds({}):
                batch = engine.new_batch()
                history.clear(engine, batch)
                timed.clear(engine, batch)  # records applied from now on are not timed
                engine.write(batch)
                logger.info(
                    'store "%s": history is no longer configured; dropped the stored versions', self.name
                )
            return
        self.history_start = history.stored_start(engine)
        self.history_floor = self._compute_floor() if self.history_start else None
        self.time_bounds = timed.stored_bounds(engine)
        applied = any(self.position.values())
        if (self.history_start or applied) and not self.time_bounds.base_times:
            # Records applied while history was not configured (or by a version that kept no
            # time bounds): their times are unknown.
            batch = engine.new_batch()
            timed.put_bulk(engine, batch)
            engine.write(batch)
            self.time_bounds = dataclasses.replace(self.time_bounds, known=False)

    def begin_history(self, partitions: int) -> None:
        """Start keeping history from the current position (called when the store is READY).

        The start names every partition, also those with no record yet, so that history has
        begun (and is kept) even for an empty topic.
        """
        if self.history is None or self.history_start:
            return
        engine = self.engine
        start = Position(
            {p: self.position.get(p, 0) for p in range(max(partitions, 1))} | dict(self.position)
        )
        batch = engine.new_batch()
        history.put_start(engine, batch, start)
        if engine.natural_keys() is not None:
            winners.mark_history(engine.handle(families.META), batch)
        # Every partition's time bound is stored, also of those without records: their presence
        # says this copy's pre-history times were tracked (``_load_history_state``).
        base_times = {p: self.time_bounds.base_times.get(p, timed.NO_TIME) for p in start}
        timed.put_base_times(engine, batch, base_times)
        with self._changed:
            engine.write(batch)
            self.history_start = start
            self.history_floor = start
            self.time_bounds = dataclasses.replace(self.time_bounds, base_times=base_times)
        logger.info('store "%s" keeps history from position %s on', self.name, start)

    def _compute_floor(self) -> Position:
        assert self.history is not None
        return floor_from(
            self.history_start, self.position, history.stored_time_log(self.engine), self.history.spec
        )

    def maintain_history(self) -> None:
        """Move the history floor as retention passes and drop versions below it."""
        if self.history is None or not self.history_start:
            return
        floor = self._compute_floor()
        with self._changed:
            # Readers check against the new floor before any version below it is dropped.
            self.history_floor = floor if self.history_floor is None else self.history_floor.merged(floor)
        while self.history.prune(self.engine, floor, time_floor=self._raise_time_floor) >= 10_000:
            pass

    def natural_history_reason(self) -> str | None:
        """Why this copy of natural keys must be rebuilt first (``store.table.winners``), or ``None``."""
        if self.history is None or self.engine.natural_keys() is None:
            return None
        return winners.history_reason(self.engine.family(families.META), bool(self.history_start))

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

    def _raise_time_floor(self, timestamp: int) -> None:
        # Readers check against the new time floor before any version below it is dropped.
        with self._changed:
            self.time_bounds = self.time_bounds.with_pruned(timestamp)


class _CachedReader:
    """A snapshot reader that answers from the replica's hot-key cache when that is exact."""

    __slots__ = ("_generation", "_reader", "_ready_indexes", "_replica")

    def __init__(self, replica: Replica, reader: SnapshotReader, generation: int) -> None:
        self._replica = replica
        self._reader = reader
        self._generation = generation
        # The indexes ready when the view was taken: the ones its index snapshot can answer.
        self._ready_indexes = frozenset(replica.ready_indexes)

    def release(self) -> None:
        self._reader.release()

    def get(self, key: bytes) -> bytes | None:
        return self.get_many((key,))[0]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        replica = self._replica
        if not replica.caches_hot_keys:
            return self._reader.get_many(keys)
        found = replica.cache_lookup(self._generation, keys)
        if found is None:
            return self._reader.get_many(keys)
        cached, complete = found
        if complete:
            return cached  # type: ignore[return-value]  # no MISS among them: values only
        values, missing_keys, fetched = read_misses(keys, cached, self._reader.get_many)
        if missing_keys:
            replica.cache_fill(self._generation, missing_keys, fetched, len(keys))
        return values

    def prefix_scan(self, prefix: bytes, *, after: bytes | None = None, limit: int = 1000) -> ScanPage:
        return self._reader.prefix_scan(prefix, after=after, limit=limit)

    def index_scan(
        self, index: str, value: bytes, *, after: bytes | None = None, limit: int = 1000
    ) -> ScanPage:
        """Rows whose indexed field equals ``value``, byte-ordered by row key, bounded like scans."""
        if index in self._replica.indexes and index not in self._ready_indexes:
            raise IndexNotReadyError(index)
        return self._reader.index_scan(index, value, after=after, limit=limit)

    def position(self) -> Position:
        return self._reader.position()


Reader = _CachedReader | AsOfReader
"""What :meth:`Replica.reader` gives: a view's reads, and ``release`` once it is done."""

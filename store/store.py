"""The public face of one materialized store."""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from store.asof import AsOfReader
from store.config import StoreConfig
from store.engine import Engine, SnapshotReader, destroy
from store.exceptions import (
    HistoryExpiredError,
    HistoryNotKeptError,
    IndexNotReadyError,
    PositionNotReachedError,
    StoreClosedError,
    StoreCorruptError,
)
from store.history import HistoryRecorder, floor_from
from store.indexes import IndexSpec, index_changes
from store.lock import DirectoryLock
from store.materializer import Materializer
from store.position import Position
from store.protocol import (
    MAX_SCAN_LIMIT,
    IndexStatus,
    ReadOnlyKeyValueStore,
    RestoreProgress,
    ScanPage,
    StoreStatus,
)
from store.state import StoreState

logger = logging.getLogger(__name__)

_MISS = object()


class Store:
    """One compacted topic materialized into RocksDB under ``config.state_dir / config.name``.

    ``start()`` locks the directory, opens the database and starts the materializer thread; the
    store is RESTORING until it reaches the end offsets of the topic, then READY. ``stop()``
    flushes and releases the directory. Reads go through :meth:`view`: a RocksDB snapshot and the
    exact position it reflects, with a bounded hot-key cache in front of RocksDB that is only
    used while no write has happened since the view was taken.
    """

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._state = StoreState.CREATED
        self._engine: Engine | None = None
        self._position = Position()
        self._generation = 0
        self._active_views = 0
        self._cache: dict[bytes, bytes | None] = {}
        self._cache_capacity = config.tuning.read_cache_entries
        self._directory_lock = DirectoryLock(config.name, config.path)
        self._indexes = {spec.name: spec for spec in config.indexes}
        self._ready_indexes: dict[str, IndexSpec] = {}
        self.index_progress: dict[str, int] = {}  # rows indexed so far, per index being built
        self._history = HistoryRecorder(config.history) if config.history else None
        self._history_floor: Position | None = None
        self._history_start = Position()
        self._materializer: Materializer | None = None

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def state(self) -> StoreState:
        return self._state

    def start(self) -> None:
        """Lock and open the store directory and start materializing; returns at once."""
        if self._state is not StoreState.CREATED:
            raise StoreClosedError(
                f'store "{self.name}" was already started; create a new Store to reopen it'
            )
        self._directory_lock.acquire()
        try:
            self._engine = self._open_engine()
        except BaseException:
            self._directory_lock.release()
            raise
        self._position = self._engine.stored_position()
        self._load_history_state()
        self._materializer = Materializer(self.config, self, self.position)
        logger.info(
            'store "%s" opened at %s (topic "%s", stored position %s)',
            self.name,
            self.config.path,
            self.config.topic,
            self._position or "none: restoring from the earliest offsets",
        )
        self._materializer.start()

    def stop(self) -> None:
        """Stop materializing, flush, close the database and release the directory."""
        if self._materializer is not None:
            self._materializer.stop()
        with self._changed:
            if self._state is StoreState.STOPPED:
                return
            self._changed.wait_for(lambda: self._active_views == 0, timeout=10)
            engine, self._engine = self._engine, None
            self._state = StoreState.STOPPED
            self._changed.notify_all()
        if engine is not None:
            engine.flush()
            engine.close()
        self._directory_lock.release()
        logger.info('store "%s" stopped at position %s', self.name, self._position)

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        """Block until READY; ``False`` if ``timeout`` passes first or the store stopped."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._state in (StoreState.READY, StoreState.STOPPED, StoreState.FAILED), timeout
            )
            return self._state is StoreState.READY

    def __enter__(self) -> Store:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- reads ------------------------------------------------------------------------------

    def position(self) -> Position:
        return self._position

    @contextlib.contextmanager
    def view(self, as_of: Position | None = None) -> Iterator[ReadOnlyKeyValueStore]:
        """A consistent read view: one snapshot and the position it reflects.

        With ``as_of``, every read answers as of exactly that position (the store must keep
        history, have reached the position, and still retain it).
        """
        with self._lock:
            if self._engine is None:
                raise StoreClosedError(
                    f'store "{self.name}" is {self._state.value.lower()}; it cannot be read'
                )
            engine = self._engine
            latest = SnapshotReader(
                engine.snapshot(),
                self._position,
                engine.index_snapshot() if self._indexes else None,
                dict(self._ready_indexes),
            )
            reader: _CachedReader | AsOfReader
            if as_of is None:
                reader = _CachedReader(self, latest, self._generation)
            else:
                self._check_as_of(as_of)
                reader = AsOfReader(
                    latest,
                    engine.history_snapshot(),
                    engine.changes_snapshot(),
                    engine.index_snapshot() if self._indexes else None,
                    dict(self._ready_indexes),
                    Position({p: as_of.get(p, 0) for p in self._position}),
                )
            self._active_views += 1
        try:
            yield reader
        finally:
            reader.release()
            with self._changed:
                self._active_views -= 1
                if self._active_views == 0:
                    self._changed.notify_all()

    def _check_as_of(self, as_of: Position) -> None:
        if self._history is None:
            raise HistoryNotKeptError(
                f'store "{self.name}" keeps no history; configure its history retention to read as_of'
            )
        if not self._position.reaches(as_of):
            raise PositionNotReachedError(f'store "{self.name}" is at {self._position}, not yet at {as_of}')
        floor = self._history_floor
        if floor is None or not Position({p: as_of.get(p, 0) for p in self._position}).reaches(floor):
            raise HistoryExpiredError(self.name, as_of, floor if floor is not None else "no position yet")

    def history_floor(self) -> Position | None:
        """The oldest position answered exactly ``as_of`` (None: no history yet)."""
        return self._history_floor

    def wait_for_position(self, minimum: Position, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._position.reaches(minimum), timeout)

    def status(self) -> StoreStatus:
        engine = self._engine
        materializer = self._materializer
        position = self._position
        if materializer is None:
            return StoreStatus(
                name=self.name,
                topic=self.config.topic,
                state=self._state,
                position=position,
                end_offsets=position,
                lag={},
                restore=None,
                records_applied_total=0,
                null_key_records=0,
                approximate_num_keys=0,
                size_on_disk_bytes=0,
                last_error=None,
                seconds_since_last_contact=None,
            )
        progress = materializer.progress
        end = Position(progress.end_offsets).merged(position)
        restore = None
        if self._state is not StoreState.READY:
            restore = RestoreProgress(
                records_applied=progress.restore_applied,
                records_remaining=progress.remaining(position),
                records_per_second=progress.rate(),
                target=Position(progress.restore_target),
            )
        return StoreStatus(
            name=self.name,
            topic=self.config.topic,
            state=self._state,
            position=position,
            end_offsets=end,
            lag={p: max(0, end[p] - position.get(p, 0)) for p in end},
            restore=restore,
            records_applied_total=progress.applied_total,
            null_key_records=progress.null_keys,
            approximate_num_keys=engine.approximate_num_keys() if engine else 0,
            size_on_disk_bytes=engine.size_on_disk_bytes() if engine else 0,
            last_error=progress.last_error,
            seconds_since_last_contact=(
                time.monotonic() - progress.last_contact if progress.last_contact is not None else None
            ),
            indexes={
                name: IndexStatus(
                    field=spec.field,
                    state="ready" if name in self._ready_indexes else "building",
                    rows_indexed=self.index_progress.get(name),
                )
                for name, spec in self._indexes.items()
            },
        )

    # -- the materializer's side (MaterializerTarget) ---------------------------------------

    def set_state(self, state: StoreState) -> None:
        if state is StoreState.READY and self._history is not None and not self._history_start:
            self._begin_history()
        with self._changed:
            if self._state is not StoreState.STOPPED:
                self._state = state
            self._changed.notify_all()

    @property
    def keeps_history(self) -> bool:
        """Whether records must come with ``(partition, offset, timestamp)`` for history."""
        return self._history is not None and bool(self._history_start)

    def _load_history_state(self) -> None:
        engine = self._require_engine()
        if self._history is None:
            if engine.history_start():
                batch = engine.new_batch()
                engine.clear_history(batch)
                engine.write(batch)
                logger.info(
                    'store "%s": history is no longer configured; dropped the stored versions', self.name
                )
            return
        self._history_start = engine.history_start()
        self._history_floor = self._compute_floor() if self._history_start else None

    def _begin_history(self) -> None:
        engine = self._require_engine()
        start = Position({p: self._position.get(p, 0) for p in self._position})
        batch = engine.new_batch()
        engine.put_history_start(batch, start)
        with self._lock:
            engine.write(batch)
            self._history_start = start
            self._history_floor = start
        logger.info('store "%s" keeps history from position %s on', self.name, start)

    def _compute_floor(self) -> Position:
        assert self._history is not None
        engine = self._require_engine()
        return floor_from(self._history_start, self._position, engine.history_time_log(), self._history.spec)

    def maintain_history(self) -> None:
        """Move the history floor as retention passes and drop versions below it."""
        if self._history is None or not self._history_start:
            return
        floor = self._compute_floor()
        with self._lock:
            # Readers check against the new floor before any version below it is dropped.
            self._history_floor = floor if self._history_floor is None else self._history_floor.merged(floor)
        engine = self._require_engine()
        while self._history.prune(engine, floor) >= 10_000:
            pass

    def stored_position(self) -> Position:
        return self._require_engine().stored_position()

    def topic_identity(self) -> tuple[str | None, str | None]:
        return self._require_engine().topic_identity()

    def set_topic_identity(self, topic: str, topic_id: str | None) -> None:
        self._require_engine().set_topic_identity(topic, topic_id)

    def apply(
        self,
        keys: list[bytes],
        values: list[bytes | None],
        offsets: dict[int, int],
        metas: list[tuple[int, int, int]] | None = None,
    ) -> None:
        """Write records, tombstones and the partitions' next offsets in one atomic batch.

        ``metas`` (partition, offset, timestamp per record) is required while history is kept.
        """
        engine = self._require_engine()
        batch = engine.new_batch()
        for key, value in zip(keys, values, strict=True):
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        if self._ready_indexes and keys:
            self._maintain_indexes(engine, batch, keys, values)
        if self._history is not None and self._history_start and keys:
            assert metas is not None, "records of a store that keeps history need their metadata"
            self._history.record(engine, batch, keys, values, metas)
        engine.put_offsets(batch, offsets)
        with self._changed:
            engine.write(batch)
            self._advance(offsets)
            cache = self._cache
            if cache:
                for key in keys:
                    cache.pop(key, None)

    def ingest(self, sst_path: Path | None, offsets: dict[int, int]) -> None:
        """Ingest a bootstrap chunk's SST file, then record the chunk's offsets."""
        engine = self._require_engine()
        batch = engine.new_batch()
        engine.put_offsets(batch, offsets)
        if self._ready_indexes:
            # Bulk chunks carry no index entries: the indexes are rebuilt once the bootstrap ends.
            for spec in self._ready_indexes.values():
                engine.put_index_state(batch, spec.name, spec.field, "building")
        reset_history = bool(self._history_start)
        if reset_history:
            # Bulk chunks carry no versions: history restarts when the store is READY again.
            engine.clear_history(batch)
        with self._changed:
            self._ready_indexes = {}
            if reset_history:
                self._history_start = Position()
                self._history_floor = None
                logger.warning(
                    'store "%s": bulk restore of a large gap; history restarts once the store is READY',
                    self.name,
                )
            if sst_path is not None:
                engine.ingest([sst_path])
            engine.write(batch)
            self._advance(offsets)
            self._cache.clear()

    def _maintain_indexes(
        self, engine: Engine, batch: Any, keys: list[bytes], values: list[bytes | None]
    ) -> None:
        """Add to ``batch`` the index entry changes of these records, in record order."""
        unique = list(dict.fromkeys(keys))
        current = dict(zip(unique, engine.get_latest(unique), strict=True))
        specs = list(self._ready_indexes.values())
        for key, value in zip(keys, values, strict=True):
            deletes, puts = index_changes(specs, key, current[key], value)
            for entry in deletes:
                engine.delete_index_entry(batch, entry)
            for entry in puts:
                engine.put_index_entry(batch, entry)
            current[key] = value

    def build_indexes(self, stop: threading.Event) -> None:
        """Build every configured index that is not ready; drop indexes no longer configured.

        Runs on the materializer thread, so no record is applied meanwhile; reads go on.
        """
        engine = self._require_engine()
        states = engine.index_states()
        batch = engine.new_batch()
        for name, (field, _state) in states.items():
            if name not in self._indexes:
                engine.delete_index_range(batch, IndexSpec(name, field).prefix)
                engine.put_index_state(batch, name, field, None)
                logger.info('store "%s": dropped index "%s" (no longer configured)', self.name, name)
        engine.write(batch)
        ready = {
            name: spec for name, spec in self._indexes.items() if states.get(name) == (spec.field, "ready")
        }
        with self._lock:
            self._ready_indexes = dict(ready)
        for spec in self._indexes.values():
            if spec.name in ready or stop.is_set():
                continue
            self._build_index(engine, spec, stop)

    def _build_index(self, engine: Engine, spec: IndexSpec, stop: threading.Event) -> None:
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
        engine.delete_index_range(batch, spec.prefix)
        engine.put_index_state(batch, spec.name, spec.field, "building")
        engine.write(batch)
        self.index_progress[spec.name] = 0
        rows = 0
        last_log = started
        with self.view() as view:
            after: bytes | None = None
            while True:
                if stop.is_set():
                    return  # left "building": the next start builds it again
                page = view.prefix_scan(b"", after=after, limit=MAX_SCAN_LIMIT)
                batch = engine.new_batch()
                for key, value in page.items:
                    indexed = spec.extract(value)
                    if indexed is not None:
                        engine.put_index_entry(batch, spec.entry_key(indexed, key))
                rows += len(page.items)
                if page.next_after is None:
                    engine.put_index_state(batch, spec.name, spec.field, "ready")
                with self._lock:
                    engine.write(batch)
                    if page.next_after is None:
                        self._ready_indexes[spec.name] = spec
                self.index_progress[spec.name] = rows
                now = time.monotonic()
                if now - last_log >= self.config.tuning.progress_log_interval_seconds:
                    last_log = now
                    logger.info('store "%s": index "%s" %d of ~%d rows', self.name, spec.name, rows, total)
                if page.next_after is None:
                    break
                after = page.next_after
        self.index_progress.pop(spec.name, None)
        logger.info(
            'store "%s": index "%s" ready (%d rows in %.1fs)',
            self.name,
            spec.name,
            rows,
            time.monotonic() - started,
        )

    def checkpoint(self) -> None:
        """Persist what has been applied so far (data and offsets together)."""
        engine = self._engine
        if engine is not None:
            engine.flush()

    def rebuild(self, reason: str) -> None:
        """Discard the local copy; the materializer then restores from the earliest offsets."""
        with self._changed:
            self._state = StoreState.REBUILDING
            self._changed.wait_for(lambda: self._active_views == 0, timeout=10)
            engine, self._engine = self._engine, None
            if engine is not None:
                engine.close()
            destroy(self.config.path / "db")
            destroy(self.config.path / "bulk")
            self._engine = Engine(self.config.path / "db", self.config.tuning)
            self._position = Position()
            self._history_start = Position()
            self._history_floor = None
            self._cache.clear()
            self._generation += 1
            self._changed.notify_all()
        logger.warning(
            'store "%s" discarded its local copy (%s); restoring from the earliest offsets', self.name, reason
        )

    # -- internals --------------------------------------------------------------------------

    def _advance(self, offsets: dict[int, int]) -> None:
        merged = dict(self._position)
        merged.update(offsets)
        self._position = Position(merged)
        self._generation += 1
        self._changed.notify_all()

    def _require_engine(self) -> Engine:
        engine = self._engine
        if engine is None:
            raise StoreClosedError(f'store "{self.name}" is {self._state.value.lower()}')
        return engine

    def _open_engine(self) -> Engine:
        path = self.config.path / "db"
        try:
            return Engine(path, self.config.tuning)
        except StoreCorruptError as exc:
            logger.warning('store "%s": %s', self.name, exc)
            destroy(path)
            return Engine(path, self.config.tuning)

    def _cache_lookup(self, generation: int, keys: Sequence[bytes]) -> list[object] | None:
        with self._lock:
            if generation != self._generation:
                return None
            get = self._cache.get
            return [get(key, _MISS) for key in keys]

    def _cache_fill(self, generation: int, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        with self._lock:
            if generation != self._generation:
                return
            cache = self._cache
            overflow = len(cache) + len(keys) - self._cache_capacity
            if overflow > 0:
                for old in list(itertools.islice(cache, overflow)):
                    del cache[old]
            cache.update(zip(keys, values, strict=True))


class _CachedReader:
    """A snapshot reader that answers from the store's hot-key cache when that is exact."""

    __slots__ = ("_generation", "_reader", "_store")

    def __init__(self, store: Store, reader: SnapshotReader, generation: int) -> None:
        self._store = store
        self._reader = reader
        self._generation = generation

    def release(self) -> None:
        self._reader.release()

    def get(self, key: bytes) -> bytes | None:
        return self.get_many((key,))[0]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        store = self._store
        if store._cache_capacity <= 0:
            return self._reader.get_many(keys)
        cached = store._cache_lookup(self._generation, keys)
        if cached is None:
            return self._reader.get_many(keys)
        missing = [i for i, value in enumerate(cached) if value is _MISS]
        if missing:
            missing_keys = [keys[i] for i in missing]
            fetched = self._reader.get_many(missing_keys)
            for i, value in zip(missing, fetched, strict=True):
                cached[i] = value
            store._cache_fill(self._generation, missing_keys, fetched)
        return cached  # type: ignore[return-value]  # every _MISS was replaced above

    def prefix_scan(self, prefix: bytes, *, after: bytes | None = None, limit: int = 1000) -> ScanPage:
        return self._reader.prefix_scan(prefix, after=after, limit=limit)

    def index_scan(
        self, index: str, value: bytes, *, after: bytes | None = None, limit: int = 1000
    ) -> ScanPage:
        """Rows whose indexed field equals ``value``, byte-ordered by row key, bounded like scans."""
        store = self._store
        if index in store._indexes and index not in store._ready_indexes:
            raise IndexNotReadyError(index)
        return self._reader.index_scan(index, value, after=after, limit=limit)

    def position(self) -> Position:
        return self._reader.position()

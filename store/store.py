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

from store.config import StoreConfig
from store.engine import Engine, SnapshotReader, destroy
from store.exceptions import StoreClosedError, StoreCorruptError
from store.lock import DirectoryLock
from store.materializer import Materializer
from store.position import Position
from store.protocol import ReadOnlyKeyValueStore, RestoreProgress, ScanPage, StoreStatus
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
    def view(self) -> Iterator[ReadOnlyKeyValueStore]:
        """A consistent read view: one snapshot and the position it reflects."""
        with self._lock:
            if self._engine is None:
                raise StoreClosedError(
                    f'store "{self.name}" is {self._state.value.lower()}; it cannot be read'
                )
            reader = _CachedReader(
                self, SnapshotReader(self._engine.snapshot(), self._position), self._generation
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
        )

    # -- the materializer's side (MaterializerTarget) ---------------------------------------

    def set_state(self, state: StoreState) -> None:
        with self._changed:
            if self._state is not StoreState.STOPPED:
                self._state = state
            self._changed.notify_all()

    def stored_position(self) -> Position:
        return self._require_engine().stored_position()

    def topic_identity(self) -> tuple[str | None, str | None]:
        return self._require_engine().topic_identity()

    def set_topic_identity(self, topic: str, topic_id: str | None) -> None:
        self._require_engine().set_topic_identity(topic, topic_id)

    def apply(self, keys: list[bytes], values: list[bytes | None], offsets: dict[int, int]) -> None:
        """Write records, tombstones and the partitions' next offsets in one atomic batch."""
        engine = self._require_engine()
        batch = engine.new_batch()
        for key, value in zip(keys, values, strict=True):
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
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
        with self._changed:
            if sst_path is not None:
                engine.ingest([sst_path])
            engine.write(batch)
            self._advance(offsets)
            self._cache.clear()

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

    def position(self) -> Position:
        return self._reader.position()

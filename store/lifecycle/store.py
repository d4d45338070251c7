"""The public face of one materialized store: reads and lifecycle."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType

from store.exceptions import StoreClosedError
from store.lifecycle.config import StoreConfig
from store.lifecycle.copies import Copies
from store.lifecycle.lock import DirectoryLock, LockWatch
from store.lifecycle.materializer import Materializer
from store.lifecycle.progress import Progress
from store.lifecycle.restore_slots import PROCESS_RESTORE_SLOTS, RestoreSlots
from store.protocol import (
    CorruptionReport,
    IndexStatus,
    ReadOnlyKeyValueStore,
    RestoreProgress,
    StoreStatus,
)
from store.state import StoreState
from store.table.replica import Replica
from store.table.verifier import Verifier
from wire.position import Position

logger = logging.getLogger(__name__)


class Store:
    """One compacted topic materialized into RocksDB under ``config.state_dir / config.name``.

    ``start()`` locks the directory, opens the database and starts the materializer thread; the
    store is RESTORING until it reaches the end offsets of the topic, then READY. ``stop()``
    flushes and releases the directory. Reads go through :meth:`view`: a RocksDB snapshot and the
    exact position it reflects, with a bounded hot-key cache in front of RocksDB that is only
    used while no write has happened since the view was taken.

    When the stored offsets become invalid (topic recreated, retention passed the store), a READY
    store rebuilds into a second directory while readers keep the last good copy (the state is
    REBUILDING and ``status().stale`` is true); the rebuilt copy replaces it atomically once READY.
    A store whose start fails for a reason a retry cannot fix (its directory locked by another
    process, or unusable) is FAILED, with the reason in ``status().last_error``.

    A read of a copy that fails for any reason but "not found" (corruption, I/O error), whether a
    reader's, the materializer's or the background verifier's (``store.table.verifier``), marks that copy
    corrupt: it answers no read any more (``view()`` raises ``StoreReadError``, ``corruption`` says
    why) and a copy rebuilt from the topic replaces it, beside it if the store was READY.

    ``restore_slots`` limits how many stores bulk-restore at once (``store.lifecycle.restore_slots``); stores
    not given one share a process-wide limit of one.

    The materializer (``store.lifecycle.materializer``) writes through the store's copies
    (``store.lifecycle.copies``), never through this class: its public methods are reads and lifecycle.
    """

    def __init__(self, config: StoreConfig, restore_slots: RestoreSlots | None = None) -> None:
        self.config = config
        self._restore_slots = PROCESS_RESTORE_SLOTS if restore_slots is None else restore_slots
        self._copies = Copies(config)
        self._changed = self._copies.changed
        self._directory_lock = DirectoryLock(config.name, config.path)
        # Set once the store directory was found removed while serving; shown in the status.
        self._directory_problem: str | None = None
        self._lock_watch: LockWatch | None = None
        self._materializer: Materializer | None = None
        self._verifier: Verifier | None = None

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def restore_slots(self) -> RestoreSlots:
        """The limit on concurrent bulk restores this store shares with others."""
        return self._restore_slots

    @property
    def state(self) -> StoreState:
        return self._copies.state

    @property
    def readable(self) -> bool:
        """Whether reads get answers: READY, or REBUILDING while the last good copy is served;
        never while the served copy is corrupt."""
        return self._copies.readable

    @property
    def corruption(self) -> CorruptionReport | None:
        """Why the served copy answers no read (corruption found in it), until a rebuilt copy replaces it."""
        return self._copies.corruption

    def start(self) -> None:
        """Lock and open the store directory and start materializing; returns at once.

        Raises (and leaves the store FAILED) when the directory is locked by another process or
        store, or cannot be created or opened; a full volume is not a failure: the store opens
        once space is back.
        """
        if self.state is not StoreState.CREATED:
            raise StoreClosedError(
                f'store "{self.name}" was already started; create a new Store to reopen it'
            )
        try:
            self._directory_lock.acquire()
            try:
                self._copies.open()
            except BaseException:
                self._directory_lock.release()
                raise
        except Exception as exc:
            self._copies.fail(str(exc))
            raise
        self._materializer = Materializer(self.config, self._copies, self._restore_slots)
        maintenance = self.config.tuning.maintenance
        if maintenance.verify_interval_seconds > 0:
            self._verifier = Verifier(
                self._copies, maintenance.verify_interval_seconds, maintenance.verify_bytes_per_second
            )
        self._materializer.start()
        if self._verifier is not None:
            self._verifier.start()
        self._lock_watch = LockWatch(
            self.name,
            self._directory_lock,
            # The directory is checked as often as the topic's metadata.
            self.config.tuning.consumer.metadata_check_interval_seconds,
            self._note_directory_problem,
        )
        self._lock_watch.start()

    def _note_directory_problem(self, problem: str) -> None:
        self._directory_problem = problem

    def stop(self) -> None:
        """Stop materializing, flush, close the database and release the directory."""
        if self._lock_watch is not None:
            self._lock_watch.stop()
        if self._verifier is not None:
            self._verifier.stop()
        if self._materializer is not None:
            self._materializer.stop()
        position = self._copies.close()
        if position is None:
            return  # stopped before
        self._directory_lock.release()
        logger.info('store "%s" stopped at position %s', self.name, position)

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        """Block until READY; ``False`` if ``timeout`` passes first or the store stopped or failed."""
        final = (StoreState.READY, StoreState.STOPPED, StoreState.FAILED)
        with self._changed:
            self._changed.wait_for(lambda: self.state in final, timeout)
            return self.state is StoreState.READY

    def wait_for_indexes(self, timeout: float | None = None) -> bool:
        """Block until every configured index can be read; ``False`` if ``timeout`` passes first.

        A READY store may still be building an index that was added to its configuration.
        """

        def built() -> bool:
            serving = self._copies.serving
            return serving is not None and serving.ready_indexes.keys() == serving.indexes.keys()

        with self._changed:
            return self._changed.wait_for(built, timeout)

    def __enter__(self) -> Store:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- reads ------------------------------------------------------------------------------

    def position(self) -> Position:
        """The position of the copy readers read."""
        serving = self._copies.serving
        return serving.position if serving is not None else Position()

    def view(
        self, as_of: Position | None = None, at_time: int | None = None
    ) -> AbstractContextManager[ReadOnlyKeyValueStore]:
        """A consistent read view: one snapshot and the position it reflects.

        With ``as_of``, every read answers as of exactly that position (the store must keep
        history, have reached the position, and still retain it). With ``at_time`` (epoch ms),
        every read answers as of that time (``store.table.timed``): the view is a ``TimedReader``, whose
        ``get_many_at`` also takes one time per key; ``HistoryExpiredError`` below the time floor.

        Raises ``StoreReadError`` when the served copy is corrupt; a read that fails for any
        reason but "not found" raises it too, and marks the copy corrupt.
        """
        return self._copies.reading(as_of, at_time)

    def latest(self, key: bytes) -> tuple[bytes | None, Position]:
        """The value of ``key`` now (``None``: absent) and the position it is the value at: what a
        view's ``get`` and ``position`` answer, in one point read without a view (no snapshot).

        Raises as :meth:`view` and a view's read do.
        """
        return self._copies.latest(key)

    def history_floor(self) -> Position | None:
        """The oldest position answered exactly ``as_of`` (None: no history yet)."""
        serving = self._copies.serving
        return serving.history_floor if serving is not None else None

    def wait_for_position(self, minimum: Position, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.position().reaches(minimum), timeout)

    def add_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every change (see ``ServableStore.add_listener``)."""
        return self._changed.add_listener(listener)

    def status(self) -> StoreStatus:
        copies, materializer = self._copies, self._materializer
        serving, writing, state = copies.serving, copies.writing, copies.state
        position = serving.position if serving is not None else Position()
        progress = materializer.progress if materializer is not None else Progress()
        restore = None
        # The restore target is a lower bound of the end too: lag never shows less than remains.
        end = Position(progress.end_offsets).merged(position)
        if materializer is not None and state is not StoreState.READY:
            end = end.merged(progress.restore_target)
            restore = _restore_progress(progress, writing.position if writing else position)
        last_contact = progress.last_contact
        num_keys, disk_bytes = _size(serving)
        counted_keys, counted_at = _counted(serving)
        return StoreStatus(
            name=self.name,
            topic=self.config.topic,
            state=state,
            position=position,
            end_offsets=end,
            lag={p: max(0, end[p] - position.get(p, 0)) for p in end},
            restore=restore,
            records_applied_total=progress.applied_total,
            null_key_records=progress.null_keys,
            approximate_num_keys=num_keys,
            size_on_disk_bytes=disk_bytes,
            last_error=copies.failure or self._directory_problem or progress.last_error,
            memory=copies.memory(),
            seconds_since_last_contact=time.monotonic() - last_contact if last_contact else None,
            indexes=_index_statuses(serving),
            stale=serving is not None and serving is not writing and serving.corruption is None,
            copy_id=_copy_id(serving),
            corruption=serving.corruption if serving is not None else None,
            corruptions_found=copies.corruptions_found,
            verification_passes=self._verifier.passes if self._verifier is not None else 0,
            sharding=materializer.placement.status() if materializer is not None else None,
            freshness=progress.freshness.snapshot,
            undecodable_values=self._undecodable_values(),
            counted_keys=counted_keys,
            counted_keys_position=counted_at,
        )

    def _undecodable_values(self) -> int:
        codec = self.config.value_codec
        return codec.undecodable_count if codec is not None else 0


def _size(serving: Replica | None) -> tuple[int, int]:
    """The served copy's approximate key count and size on disk (0 while none serves)."""
    if serving is None:
        return 0, 0
    return serving.engine.approximate_num_keys(), serving.engine.size_on_disk_bytes()


def _counted(serving: Replica | None) -> tuple[int | None, Position | None]:
    """The served copy's keys as last counted, and the position they were counted at."""
    count = serving.key_count if serving is not None else None
    return (None, None) if count is None else (count.keys, count.position)


def _copy_id(serving: Replica | None) -> str:
    """The served copy's name ("" while none serves)."""
    return serving.copy_id if serving is not None else ""


def _restore_progress(progress: Progress, written: Position) -> RestoreProgress:
    """How far a restore is; ``written``: the position of the copy being written."""
    return RestoreProgress(
        records_applied=progress.restore_applied,
        records_remaining=progress.remaining(written),
        records_per_second=progress.rate(),
        target=Position(progress.restore_target),
        mode=progress.restore_mode,
    )


def _index_statuses(serving: Replica | None) -> dict[str, IndexStatus]:
    if serving is None:
        return {}
    return {
        name: IndexStatus(
            field=spec.field,
            state="ready" if name in serving.ready_indexes else "building",
            rows_indexed=serving.index_progress.get(name),
        )
        for name, spec in serving.indexes.items()
    }

"""The public face of one materialized store."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

from store.config import StoreConfig
from store.corruption import (
    FINDERS,
    CorruptionReport,
    FoundBy,
    drop_engine_references,
    log_corruption_found,
)
from store.engine import destroy
from store.exceptions import StoreClosedError, StoreReadError, StoreWriteError
from store.listeners import ListenedCondition
from store.lock import DirectoryLock
from store.materializer import Materializer
from store.position import Position
from store.protocol import (
    IndexStatus,
    MemoryUsage,
    ReadOnlyKeyValueStore,
    RestoreProgress,
    StoreStatus,
)
from store.replica import Replica
from store.restore_slots import PROCESS_RESTORE_SLOTS, RestoreSlots
from store.state import StoreState
from store.verifier import Verifier, VerifyStep

logger = logging.getLogger(__name__)

_COMPLETE = "REBUILD_COMPLETE"


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

    A read of a copy that fails for any reason but "not found" (corruption, I/O error), whether a
    reader's, the materializer's or the background verifier's (``store.verifier``), marks that copy
    corrupt: it answers no read any more (``view()`` raises ``StoreReadError``, ``corruption`` says
    why) and a copy rebuilt from the topic replaces it, beside it if the store was READY.

    ``restore_slots`` limits how many stores bulk-restore at once (``store.restore_slots``); stores
    not given one share a process-wide limit of one.
    """

    def __init__(self, config: StoreConfig, restore_slots: RestoreSlots | None = None) -> None:
        self.config = config
        self._restore_slots = PROCESS_RESTORE_SLOTS if restore_slots is None else restore_slots
        self._lock = threading.RLock()
        self._changed = ListenedCondition(self._lock)
        self._state = StoreState.CREATED
        self._serving: Replica | None = None  # what readers read
        self._writer: Replica | None = None  # what the materializer writes (the same, unless rebuilding)
        self._active_views = 0
        self._directory_lock = DirectoryLock(config.name, config.path)
        self._materializer: Materializer | None = None
        self._verifier: Verifier | None = None
        self._corruptions_found = 0

    @property
    def _db_path(self) -> Path:
        return self.config.path / "db"

    @property
    def _next_path(self) -> Path:
        return self.config.path / "db.rebuilding"

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
        return self._state

    @property
    def readable(self) -> bool:
        """Whether reads get answers: READY, or REBUILDING while the last good copy is served;
        never while the served copy is corrupt."""
        serving = self._serving
        if serving is not None and serving.corruption is not None:
            return False
        return self._state is StoreState.READY or (
            self._state is StoreState.REBUILDING and serving is not self._writer
        )

    @property
    def corruption(self) -> CorruptionReport | None:
        """Why the served copy answers no read (corruption found in it), until a rebuilt copy replaces it."""
        serving = self._serving
        return serving.corruption if serving is not None else None

    @property
    def column_families(self) -> tuple[str, ...]:
        serving = self._serving
        return serving.engine.column_families if serving is not None else ()

    def start(self) -> None:
        """Lock and open the store directory and start materializing; returns at once."""
        if self._state is not StoreState.CREATED:
            raise StoreClosedError(
                f'store "{self.name}" was already started; create a new Store to reopen it'
            )
        self._directory_lock.acquire()
        replica: Replica | None = None
        try:
            self._finish_interrupted_rebuild()
            destroy(self.config.path / "bulk")  # files of a bulk load a crash interrupted
            replica = Replica(self.config, self._db_path, self._changed)
        except StoreWriteError as exc:
            # A full volume: the files are intact, so the materializer waits for space and opens them.
            logger.error('store "%s": %s', self.name, exc)
        except BaseException:
            self._directory_lock.release()
            raise
        self._serving = self._writer = replica
        self._materializer = Materializer(self.config, self, self.writer_position, self._restore_slots)
        tuning = self.config.tuning
        if tuning.verify_interval_seconds > 0:
            self._verifier = Verifier(self, tuning.verify_interval_seconds, tuning.verify_bytes_per_second)
        if replica is not None:
            logger.info(
                'store "%s" opened at %s (topic "%s", stored position %s)',
                self.name,
                self.config.path,
                self.config.topic,
                replica.position or "none: restoring from the earliest offsets",
            )
        self._materializer.start()
        if self._verifier is not None:
            self._verifier.start()

    def stop(self) -> None:
        """Stop materializing, flush, close the database and release the directory."""
        if self._verifier is not None:
            self._verifier.stop()
        if self._materializer is not None:
            self._materializer.stop()
        with self._changed:
            if self._state is StoreState.STOPPED:
                return
            self._changed.wait_for(lambda: self._active_views == 0, timeout=10)
            serving, writer = self._serving, self._writer
            self._serving = self._writer = None
            self._state = StoreState.STOPPED
            self._changed.notify_all()
        if writer is not None and writer is not serving:
            writer.close()
        if serving is not None:
            serving.close()
        self._directory_lock.release()
        logger.info(
            'store "%s" stopped at position %s', self.name, serving.position if serving else Position()
        )

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        """Block until READY; ``False`` if ``timeout`` passes first or the store stopped."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._state in (StoreState.READY, StoreState.STOPPED, StoreState.FAILED), timeout
            )
            return self._state is StoreState.READY

    def wait_for_indexes(self, timeout: float | None = None) -> bool:
        """Block until every configured index can be read; ``False`` if ``timeout`` passes first.

        A READY store may still be building an index that was added to its configuration.
        """

        def built() -> bool:
            serving = self._serving
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
        serving = self._serving
        return serving.position if serving is not None else Position()

    @contextlib.contextmanager
    def view(self, as_of: Position | None = None) -> Iterator[ReadOnlyKeyValueStore]:
        """A consistent read view: one snapshot and the position it reflects.

        With ``as_of``, every read answers as of exactly that position (the store must keep
        history, have reached the position, and still retain it).

        Raises ``StoreReadError`` when the served copy is corrupt; a read that fails for any
        reason but "not found" raises it too, and marks the copy corrupt.
        """
        with self._lock:
            serving = self._serving
            if serving is None:
                raise StoreClosedError(
                    f'store "{self.name}" is {self._state.value.lower()}; it cannot be read'
                )
            if serving.corruption is not None:
                raise self._corrupt_copy_error(serving.corruption)
            reader = serving.reader(as_of)
            self._active_views += 1
        try:
            yield reader
        except StoreReadError as exc:
            drop_engine_references(exc)
            self._found_corruption(serving, exc, "read")
            raise
        finally:
            reader.release()
            self._unpin()

    def _unpin(self) -> None:
        """A view (or a verification step) no longer holds the copy it read."""
        with self._changed:
            self._active_views -= 1
            if self._active_views == 0:
                self._changed.notify_all()

    def _corrupt_copy_error(self, report: CorruptionReport) -> StoreReadError:
        return StoreReadError(
            f'store "{self.name}" found its copy corrupt ({report.detail}); it answers no read until a'
            " copy rebuilt from the topic replaces it",
            file=report.file,
            engine_message=report.detail,
        )

    def history_floor(self) -> Position | None:
        """The oldest position answered exactly ``as_of`` (None: no history yet)."""
        serving = self._serving
        return serving.history_floor if serving is not None else None

    def wait_for_position(self, minimum: Position, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.position().reaches(minimum), timeout)

    def add_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every change (see ``ServableStore.add_listener``)."""
        return self._changed.add_listener(listener)

    def status(self) -> StoreStatus:
        serving, writer, materializer = self._serving, self._writer, self._materializer
        position = serving.position if serving is not None else Position()
        engine = serving.engine if serving is not None else None
        progress = materializer.progress if materializer is not None else None
        writing = writer.position if writer is not None else position
        # The restore target is a lower bound of the end too: lag never shows less than remains.
        end = Position(progress.end_offsets if progress else {}).merged(position)
        if progress is not None and self._state is not StoreState.READY:
            end = end.merged(progress.restore_target)
        restore = None
        if progress is not None and self._state is not StoreState.READY:
            restore = RestoreProgress(
                records_applied=progress.restore_applied,
                records_remaining=progress.remaining(writing),
                records_per_second=progress.rate(),
                target=Position(progress.restore_target),
                mode=progress.restore_mode,
            )
        indexes = {}
        if serving is not None:
            indexes = {
                name: IndexStatus(
                    field=spec.field,
                    state="ready" if name in serving.ready_indexes else "building",
                    rows_indexed=serving.index_progress.get(name),
                )
                for name, spec in serving.indexes.items()
            }
        return StoreStatus(
            name=self.name,
            topic=self.config.topic,
            state=self._state,
            position=position,
            end_offsets=end,
            lag={p: max(0, end[p] - position.get(p, 0)) for p in end},
            restore=restore,
            records_applied_total=progress.applied_total if progress else 0,
            null_key_records=progress.null_keys if progress else 0,
            approximate_num_keys=engine.approximate_num_keys() if engine else 0,
            size_on_disk_bytes=engine.size_on_disk_bytes() if engine else 0,
            last_error=progress.last_error if progress else None,
            memory=self._memory(serving, writer),
            seconds_since_last_contact=(
                time.monotonic() - progress.last_contact if progress and progress.last_contact else None
            ),
            indexes=indexes,
            stale=serving is not None and serving is not writer and serving.corruption is None,
            corruption=serving.corruption if serving is not None else None,
            corruptions_found=self._corruptions_found,
            verification_passes=self._verifier.passes if self._verifier is not None else 0,
        )

    # -- the materializer's side (MaterializerTarget) ---------------------------------------

    def set_state(self, state: StoreState) -> None:
        if state is StoreState.READY:
            writer = self._require_writer()
            if writer is not self._serving:
                self._swap_in(writer)
        with self._changed:
            if self._state is not StoreState.STOPPED:
                self._state = state
            self._changed.notify_all()

    @property
    def keeps_history(self) -> bool:
        return self._require_writer().keeps_history

    def stored_position(self) -> Position:
        return self._require_writer().engine.stored_position()

    def topic_identity(self) -> tuple[str | None, str | None]:
        return self._require_writer().engine.topic_identity()

    def set_topic_identity(self, topic: str, topic_id: str | None) -> None:
        self._require_writer().engine.set_topic_identity(topic, topic_id)

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
        self._require_writer().apply(keys, values, offsets, metas)

    def ingest(self, sst_path: Path | None, offsets: dict[int, int]) -> None:
        """Ingest a bootstrap chunk's SST file, then record the chunk's offsets."""
        self._require_writer().ingest(sst_path, offsets)

    def defer_compactions(self, deferred: bool) -> None:
        """Stop or resume automatic compactions of the written copy while a bulk restore runs."""
        writer = self._writer
        if writer is not None:
            writer.defer_compactions(deferred)

    def build_indexes(self, stop: threading.Event) -> None:
        self._require_writer().build_indexes(stop)

    def begin_history(self, partitions: int) -> None:
        """Start keeping history at the current position, if configured and not yet started."""
        self._require_writer().begin_history(partitions)

    def maintain_history(self) -> None:
        self._require_writer().maintain_history()

    def checkpoint(self) -> None:
        """Persist what has been applied so far (data and offsets together)."""
        writer = self._writer
        if writer is not None:
            writer.checkpoint()

    def rebuild(self, reason: str) -> None:
        """Restore from the earliest offsets into a fresh copy.

        A store that was READY keeps serving its last good copy meanwhile (marked stale); one
        that never was has nothing worth serving and is discarded in place.
        """
        with self._changed:
            serving, writer = self._serving, self._writer
            keep_serving = serving is not None and (self._state is StoreState.READY or serving is not writer)
            if writer is not None and writer is not serving:
                writer.close(flush=False)
            destroy(self._next_path)
            destroy(self.config.path / "bulk")
            if keep_serving:
                self._writer = Replica(self.config, self._next_path, self._changed)
            else:
                self._changed.wait_for(lambda: self._active_views == 0, timeout=10)
                if serving is not None:
                    serving.close(flush=False)
                destroy(self._db_path)
                self._serving = self._writer = Replica(self.config, self._db_path, self._changed)
            self._state = StoreState.REBUILDING
            self._changed.notify_all()
        if not keep_serving:
            readers = "reads wait until it is READY"
        elif serving is not None and serving.corruption is not None:
            readers = "reads answer store-corrupt until it replaces the corrupt copy"
        else:
            readers = "reads are served from the last good copy until then (stale)"
        logger.warning(
            'store "%s" is rebuilding from the earliest offsets (%s); %s', self.name, reason, readers
        )

    def report_corruption(self, error: StoreReadError) -> None:
        """The materializer's own read of the written copy failed (corruption, I/O error)."""
        writer = self._writer
        if writer is not None:
            self._found_corruption(writer, error, "materializer")

    def verify_step(self, family: str, start: bytes | None, max_entries: int) -> VerifyStep | None:
        """Verify one page of the served copy (``store.verifier``); ``None`` if there is no healthy
        copy to verify now. A failed read marks the copy corrupt."""
        with self._lock:
            replica = self._serving
            if replica is None or replica.corruption is not None or self._state is StoreState.STOPPED:
                return None
            self._active_views += 1
        try:
            next_start, entries, size = replica.engine.verify_page(family, start, max_entries)
        except StoreReadError as exc:
            self._found_corruption(replica, exc, "verification")
            return None
        except StoreClosedError:
            return None
        finally:
            self._unpin()
        return VerifyStep(replica, next_start, entries, size)

    def _found_corruption(self, replica: Replica, error: StoreReadError, found_by: FoundBy) -> None:
        """Mark ``replica`` corrupt (once: later failures of the same copy change nothing), log it,
        and have the materializer rebuild it if it is the copy being written."""
        report = CorruptionReport(error.engine_message, error.file, found_by, time.time())
        with self._changed:
            if (
                replica.corruption is not None
                or self._state is StoreState.STOPPED
                or (replica is not self._serving and replica is not self._writer)
            ):
                return
            replica.mark_corrupt(report)
            self._corruptions_found += 1
            written = replica is self._writer
            served = replica is self._serving
            materializer = self._materializer
            if written and materializer is not None:
                # Asked with the copy marked, so the materializer never sees a marked copy without it.
                materializer.request_rebuild(f"corruption found by {FINDERS[found_by]}: {report.detail}")
            self._changed.notify_all()
        log_corruption_found(self.name, replica.path, report, written=written, served=served)

    def writer_position(self) -> Position:
        """The position of the copy being written (none while a full volume keeps it closed)."""
        writer = self._writer
        return writer.position if writer is not None else Position()

    def ensure_writable(self) -> None:
        """Open the written copy if a full volume kept it closed; ``StoreWriteError`` if it still cannot."""
        if self._writer is None and self._state is not StoreState.STOPPED:
            self.reopen()

    def reopen(self) -> None:
        """Reopen the written copy after a write error (RocksDB refuses writes until then).

        What was applied since the last checkpoint is lost with its offsets (no WAL), so the store
        is RESTORING until it has caught up again: no reader sees its position go back. A rebuild
        copy is reopened alone; readers keep the last good copy. If the volume is still too full
        to open the copy, ``StoreWriteError`` is raised and the copy stays closed until a later call.
        """
        with self._changed:
            if self._state is StoreState.STOPPED:
                return
            serving, writer = self._serving, self._writer
            if serving is not None and writer is not serving:
                # A rebuild copy (possibly closed by an earlier failed reopen).
                if writer is not None:
                    writer.close(flush=False)
                    self._writer = None
                self._writer = Replica(self.config, self._next_path, self._changed)
                return
            if self._state is StoreState.READY:
                self._state = StoreState.RESTORING
            if writer is not None:
                self._changed.wait_for(lambda: self._active_views == 0, timeout=10)
                writer.close(flush=False)
                self._serving = self._writer = None
            self._serving = self._writer = Replica(self.config, self._db_path, self._changed)
            self._changed.notify_all()
        logger.warning(
            'store "%s" reopened after a write error; catching up from position %s (reads wait until READY)',
            self.name,
            self.position() or "none",
        )

    # -- internals --------------------------------------------------------------------------

    @staticmethod
    def _memory(serving: Replica | None, writer: Replica | None) -> MemoryUsage | None:
        copies = [copy for copy in (serving, writer) if copy is not None]
        if writer is serving:
            copies = copies[:1]
        try:
            usages = [copy.memory() for copy in copies]
        except Exception:  # a copy closed under a status call: no figure this time
            return None
        return sum(usages[1:], usages[0]) if usages else None

    def _swap_in(self, rebuilt: Replica) -> None:
        """Replace the served copy with the rebuilt one, atomically for readers."""
        rebuilt.close()
        (self._next_path / _COMPLETE).touch()
        with self._changed:
            self._changed.wait_for(lambda: self._active_views == 0, timeout=10)
            old = self._serving
            if old is not None:
                old.close(flush=False)
            self._promote_rebuilt()
            self._serving = self._writer = Replica(self.config, self._db_path, self._changed)
            # In the same step: a REBUILDING store whose served copy is the written one is unreadable.
            if self._state is not StoreState.STOPPED:
                self._state = StoreState.READY
            self._changed.notify_all()
        replaced = "corrupt" if old is not None and old.corruption is not None else "stale"
        logger.info(
            'store "%s": the rebuilt copy replaced the %s one; reads are answered from it',
            self.name,
            replaced,
        )

    def _promote_rebuilt(self) -> None:
        destroy(self._db_path)
        os.replace(self._next_path, self._db_path)
        (self._db_path / _COMPLETE).unlink(missing_ok=True)

    def _finish_interrupted_rebuild(self) -> None:
        """A crash during a swap leaves a complete rebuilt copy; anything else in progress is dropped."""
        if (self._next_path / _COMPLETE).exists():
            logger.info('store "%s": finishing a swap to a rebuilt copy interrupted by a crash', self.name)
            self._promote_rebuilt()
        else:
            destroy(self._next_path)

    def _require_writer(self) -> Replica:
        writer = self._writer
        if writer is None:
            raise StoreClosedError(f'store "{self.name}" is {self._state.value.lower()}')
        return writer

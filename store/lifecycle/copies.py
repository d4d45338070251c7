"""A store's copies of its table and its state.

A store has one copy (a ``Replica``) that readers read and the materializer writes. While it
rebuilds from a READY state it has two: readers keep the last good copy (``db/``) until the new one
(``db.rebuilding/``) is READY and replaces it (on disk: ``store.lifecycle.copy_dirs``). Every state
change goes through one checked transition (``StoreState.can_become``). Implements
``store.lifecycle.writer.StoreCopies`` for the materializer and ``store.table.verifier.VerifyTarget``
for the background verification.

A read of a copy that fails for any reason but "not found" (corruption, I/O error), whether a
reader's, the materializer's or the verifier's, marks that copy corrupt: it answers no read any
more, and if it is the written copy the materializer rebuilds it
(``store.lifecycle.writer.check_written_copy``), beside the served one if the store was READY.
"""

from __future__ import annotations

import logging
import threading
import time

from store.exceptions import InvalidTransitionError, StoreClosedError, StoreReadError, StoreWriteError
from store.lifecycle.config import StoreConfig
from store.lifecycle.copy_dirs import CopyDirs
from store.lifecycle.listeners import ListenedCondition
from store.lifecycle.reading import Reading
from store.protocol import CorruptionReport, FoundBy, MemoryUsage
from store.state import StoreState
from store.table.corruption import drop_engine_references, log_corruption_found
from store.table.replica import Reader, Replica
from store.table.verifier import VerifyStep
from wire.position import Position

logger = logging.getLogger(__name__)

_VIEWS_DRAIN_SECONDS = 10


class Copies:
    """The copy readers read, the copy the materializer writes (the same one unless a rebuild
    runs), and the store's state.

    ``changed`` (a condition on the store's lock) is notified whenever the state changes, and by
    the replicas whenever a position or an index changes.
    """

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        # The condition's own lock: taken as is on the read path, where no one waits or notifies.
        self._lock = threading.RLock()
        self.changed = ListenedCondition(self._lock)
        self._state = StoreState.CREATED
        self._failure: str | None = None
        self._serving: Replica | None = None  # what readers read
        self._writing: Replica | None = None  # what the materializer writes (the same, unless rebuilding)
        self._active_views = 0
        self._draining = 0  # threads waiting for every view to end (a view's end tells them)
        self.corruptions_found = 0  # copies found corrupt since the store was created
        self._dirs = CopyDirs(config.path, config.name)

    @property
    def name(self) -> str:
        return self.config.name

    # -- what readers and the store's status look at ----------------------------------------

    @property
    def state(self) -> StoreState:
        return self._state

    @property
    def failure(self) -> str | None:
        """Why the store is FAILED (``None`` unless it is)."""
        return self._failure

    @property
    def serving(self) -> Replica | None:
        """The copy readers read (``None`` while none is open)."""
        return self._serving

    @property
    def writing(self) -> Replica | None:
        """The copy the materializer writes (``None`` while none is open)."""
        return self._writing

    @property
    def readable(self) -> bool:
        """Whether reads get answers: READY, or REBUILDING while the last good copy is served;
        never while the served copy is corrupt."""
        serving = self._serving
        if serving is not None and serving.corruption is not None:
            return False
        return self._state is StoreState.READY or (
            self._state is StoreState.REBUILDING and serving is not self._writing
        )

    @property
    def corruption(self) -> CorruptionReport | None:
        """Why the served copy answers no read (corruption found in it), until a rebuilt copy replaces it."""
        serving = self._serving
        return serving.corruption if serving is not None else None

    def reading(self, as_of: Position | None, at_time: int | None = None) -> Reading:
        """A reader of the served copy (a context manager); the copy is not closed while any reader
        is out.

        ``StoreReadError`` while the served copy is corrupt; a read through the reader that fails
        for any reason but "not found" raises it too, and marks the copy corrupt.
        """
        return Reading(self, as_of, at_time)

    def pin(self, as_of: Position | None, at_time: int | None) -> tuple[Replica, Reader]:
        """A reader of the served copy (``Replica.reader``), which stays open until :meth:`unpin`."""
        with self._lock:
            serving = self._readable_copy()
            reader = serving.reader(as_of, at_time)
            self._active_views += 1
        return serving, reader

    def unpin(self, replica: Replica, reader: Reader, error: BaseException | None) -> None:
        """A reader of :meth:`pin` is done (``error``: what its use raised, if anything); a failed
        read (``StoreReadError``) marks its copy corrupt."""
        try:
            if isinstance(error, StoreReadError):
                drop_engine_references(error)
                self._found_corruption(replica, error, "read")
        finally:
            reader.release()
            self._unpin()

    def latest(self, key: bytes) -> tuple[bytes | None, Position]:
        """The value of ``key`` in the served copy now (``None``: absent) and the position it is the
        value at: what a reader's ``get`` and ``position`` answer, without a reader.

        One point read with the store's lock held: a write of the table and the position it
        reaches happen together under that lock, so no write comes between the value and the
        position; and a copy is closed or swapped out only with that lock held, so it stays open
        meanwhile. Errors as a reader's.
        """
        with self._lock:
            serving = self._readable_copy()
            try:
                return serving.latest(key), serving.position
            except StoreReadError as exc:
                failed = exc
        drop_engine_references(failed)
        self._found_corruption(serving, failed, "read")
        raise failed

    def _readable_copy(self) -> Replica:
        """The served copy (the lock held); ``StoreClosedError`` without one, ``StoreReadError``
        while it is corrupt."""
        serving = self._serving
        if serving is None:
            raise StoreClosedError(f'store "{self.name}" is {self._state.value.lower()}; it cannot be read')
        if serving.corruption is not None:
            raise self._corrupt_copy_error(serving.corruption)
        return serving

    def _unpin(self) -> None:
        """A reader (or a verification step) no longer holds the copy it read."""
        with self._lock:
            self._active_views -= 1
            if self._draining and self._active_views == 0:
                self.changed.notify_all()

    def _drain_views(self) -> None:
        """Wait (the lock held) until no reader holds a copy, at most ``_VIEWS_DRAIN_SECONDS``."""
        self._draining += 1
        try:
            self.changed.wait_for(lambda: self._active_views == 0, timeout=_VIEWS_DRAIN_SECONDS)
        finally:
            self._draining -= 1

    def _corrupt_copy_error(self, report: CorruptionReport) -> StoreReadError:
        return StoreReadError(
            f'store "{self.name}" found its copy corrupt ({report.detail}); it answers no read until a'
            " copy rebuilt from the topic replaces it",
            file=report.file,
            engine_message=report.detail,
        )

    def memory(self) -> MemoryUsage | None:
        """What every open copy holds in memory (``None`` if a copy closed meanwhile)."""
        serving, writing = self._serving, self._writing
        copies = [copy for copy in (serving, writing) if copy is not None]
        if writing is serving:
            copies = copies[:1]
        try:
            usages = [copy.memory() for copy in copies]
        except Exception:  # a copy closed under a status call: no figure this time
            return None
        return sum(usages[1:], usages[0]) if usages else None

    # -- lifecycle (the store) --------------------------------------------------------------

    def open(self) -> None:
        """Open the stored copy, finishing a swap to a rebuilt copy that a crash interrupted.

        A full volume leaves it closed (logged): the materializer waits for space and opens it.
        """
        self._dirs.finish_interrupted()
        self._dirs.drop_bulk()  # files of a bulk load a crash interrupted
        try:
            replica = Replica(self.config, self._dirs.served, self.changed)
        except StoreWriteError as exc:
            # A full volume: the files are intact, so the materializer waits for space and opens them.
            logger.error('store "%s": %s', self.name, exc)
            return
        with self.changed:
            self._serving = self._writing = replica
        logger.info(
            'store "%s" opened at %s (topic "%s", stored position %s)',
            self.name,
            self.config.path,
            self.config.topic,
            replica.position or "none: restoring from the earliest offsets",
        )

    def fail(self, reason: str) -> None:
        """The store could not start, and a retry cannot fix that: it is FAILED."""
        with self.changed:
            self._failure = reason
            self._move(StoreState.FAILED)

    def close(self) -> Position | None:
        """Close every copy once no reader is out (at most a few seconds): the store is STOPPED.

        Returns the position readers last saw, ``None`` if the store was stopped already.
        """
        with self.changed:
            if self._state is StoreState.STOPPED:
                return None
            self._drain_views()
            serving, writing = self._serving, self._writing
            self._serving = self._writing = None
            self._move(StoreState.STOPPED)
        if writing is not None and writing is not serving:
            writing.close()
        if serving is not None:
            serving.close()
        return serving.position if serving is not None else Position()

    # -- the materializer's side (StoreCopies) ----------------------------------------------

    @property
    def writer(self) -> Replica:
        writing = self._writing
        if writing is None:
            raise StoreClosedError(f'store "{self.name}" is {self._state.value.lower()}: no copy is open')
        return writing

    def open_writer(self) -> Replica:
        if self._writing is None and self._state is not StoreState.STOPPED:
            self.reopen()
        return self.writer

    def transition(self, state: StoreState) -> None:
        writing = self._writing
        if state is StoreState.READY and writing is not None and writing is not self._serving:
            self._swap_in(writing)
            return
        with self.changed:
            self._move(state)

    def _move(self, state: StoreState) -> None:
        """The one place the state changes (the lock is held)."""
        current = self._state
        if current is StoreState.STOPPED:
            return  # final: a materializer ending its last step after a stop changes nothing
        if not current.can_become(state):
            raise InvalidTransitionError(
                f'store "{self.name}" cannot go from {current.value} to {state.value}'
            )
        self._state = state
        self.changed.notify_all()

    def rebuild(self, reason: str) -> None:
        """Restore from the earliest offsets into a fresh copy.

        A store that was READY keeps serving its last good copy meanwhile (marked stale); one
        that never was has nothing worth serving and is discarded in place.
        """
        with self.changed:
            serving, writing = self._serving, self._writing
            keep_serving = serving is not None and (self._state is StoreState.READY or serving is not writing)
            if writing is not None and writing is not serving:
                writing.close(flush=False)
            self._dirs.drop_rebuilding()
            self._dirs.drop_bulk()
            if keep_serving:
                self._writing = Replica(self.config, self._dirs.rebuilding, self.changed)
            else:
                self._drain_views()
                if serving is not None:
                    serving.close(flush=False)
                self._dirs.drop_served()
                self._serving = self._writing = Replica(self.config, self._dirs.served, self.changed)
            if not keep_serving:
                readers = "reads wait until it is READY"
            elif serving is not None and serving.corruption is not None:
                readers = "reads answer store-corrupt until it replaces the corrupt copy"
            else:
                readers = "reads are served from the last good copy until then (stale)"
            # Logged with the lock held: whoever waits for the change finds the line written.
            logger.warning(
                'store "%s" is rebuilding from the earliest offsets (%s); %s', self.name, reason, readers
            )
            self._move(StoreState.REBUILDING)

    def reopen(self) -> None:
        """Reopen the written copy after a write error (RocksDB refuses writes until then).

        What was applied since the last checkpoint is lost with its offsets (no WAL), so the store
        is RESTORING until it has caught up again: no reader sees its position go back. A rebuild
        copy is reopened alone; readers keep the last good copy. If the volume is still too full
        to open the copy, ``StoreWriteError`` is raised and the copy stays closed until a later call.
        """
        with self.changed:
            if self._state is StoreState.STOPPED:
                return
            serving, writing = self._serving, self._writing
            if serving is not None and writing is not serving:
                # A rebuild copy (possibly closed by an earlier failed reopen).
                if writing is not None:
                    writing.close(flush=False)
                    self._writing = None
                self._writing = Replica(self.config, self._dirs.rebuilding, self.changed)
                return
            if self._state is StoreState.READY:
                self._move(StoreState.RESTORING)
            if writing is not None:
                self._drain_views()
                writing.close(flush=False)
                self._serving = self._writing = None
            reopened = Replica(self.config, self._dirs.served, self.changed)
            self._serving = self._writing = reopened
            # Logged with the lock held: whoever waits for the change finds the line written.
            logger.warning(
                'store "%s" reopened after a write error; catching up from position %s'
                " (reads wait until READY)",
                self.name,
                reopened.position or "none",
            )
            self.changed.notify_all()

    # -- corruption -------------------------------------------------------------------------

    def report_corruption(self, error: StoreReadError) -> bool:
        """The materializer's own read or write of the written copy failed (corruption, I/O error);
        ``True`` if the copy is marked, so the materializer's next turn rebuilds it."""
        writing = self._writing
        if writing is None:
            return False
        self._found_corruption(writing, error, "materializer")
        return writing.corruption is not None

    @property
    def column_families(self) -> tuple[str, ...]:
        serving = self._serving
        return serving.engine.column_families if serving is not None else ()

    def verify_step(self, family: str, start: bytes | None, max_entries: int) -> VerifyStep | None:
        """Verify one page of the served copy (``store.table.verifier``); ``None`` if there is no healthy
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
        """Mark ``replica`` corrupt (once: later failures of the same copy change nothing) and log
        it. A marked written copy is the materializer's signal to rebuild it."""
        report = CorruptionReport(error.engine_message, error.file, found_by, time.time())
        with self.changed:
            if (
                replica.corruption is not None
                or self._state is StoreState.STOPPED
                or (replica is not self._serving and replica is not self._writing)
            ):
                return
            replica.mark_corrupt(report)
            self.corruptions_found += 1
            written, served = replica is self._writing, replica is self._serving
            self.changed.notify_all()
        log_corruption_found(self.name, replica.path, report, written=written, served=served)

    # -- rebuilt copies ---------------------------------------------------------------------

    def _swap_in(self, rebuilt: Replica) -> None:
        """Replace the served copy with the rebuilt one, atomically for readers: READY."""
        rebuilt.close()
        self._dirs.mark_complete()
        with self.changed:
            self._drain_views()
            old = self._serving
            if old is not None:
                old.close(flush=False)
            self._dirs.promote()
            self._serving = self._writing = Replica(self.config, self._dirs.served, self.changed)
            replaced = "corrupt" if old is not None and old.corruption is not None else "stale"
            logger.info(
                'store "%s": the rebuilt copy replaced the %s one; reads are answered from it',
                self.name,
                replaced,
            )
            # In the same step: a REBUILDING store whose served copy is the written one is unreadable.
            self._move(StoreState.READY)

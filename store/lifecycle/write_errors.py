"""What the materializer does when RocksDB refuses a write, by kind (``store.exceptions``).

Reads go on meanwhile from the copy as it is: a READY store stays READY, its staleness growing.

- A full volume (:class:`StoreFullError`): wait for space, retrying a write that creates no file
  (``TableFiles.check_writable``) with backoff. RocksDB resumes writing by itself once its volume
  has a write buffer free (``engine.write_buffer_bytes``, at most a quarter of the volume:
  ``store.table.volume.write_buffer_for``; it checks every few seconds), and the copy stays open, so
  nothing applied is lost. Only a refusal RocksDB does not recover from by
  itself (a file size limit, a quota) has the copy reopened, once the volume has had the space for
  a while; then what was applied since the last checkpoint is read again (RESTORING).
- An I/O error (:class:`StoreIOError`) or a refusal of no known kind: say so and retry with
  backoff, the last attempt a reopen of the copy; after ``RetryTuning.write_error_attempts`` failed
  attempts the store is FAILED with the reason.

Corruption (``StoreCorruptWriteError``) has the copy rebuilt, and a closed copy
(``StoreWriterClosedError``) means the store is stopping: ``store.lifecycle.materializer`` handles those.
"""

from __future__ import annotations

import logging
import threading
import time

from store.exceptions import StoreFullError, StoreReadError, StoreWriteError, StoreWriterClosedError
from store.lifecycle.config import StoreConfig
from store.lifecycle.progress import Progress
from store.lifecycle.timing import Backoff
from store.lifecycle.writer import StoreCopies
from store.table.volume import can_write, free_bytes, write_buffer_for
from wire.position import Position

# The most a check for free space writes (a memtable flush needs about a write buffer).
_SPACE_PROBE_MAX_BYTES = 8 * 1024 * 1024
# How long the volume has had space while RocksDB still refuses writes before the copy is reopened:
# RocksDB's own recovery checks for space every 5 seconds.
_RESUME_GRACE_SECONDS = 15.0


class WriteErrors:
    """The materializer's reactions to write errors of one store (on its thread)."""

    def __init__(
        self,
        config: StoreConfig,
        copies: StoreCopies,
        progress: Progress,
        log: logging.LoggerAdapter[logging.Logger],
        stop: threading.Event,
    ) -> None:
        self._config = config
        self._copies = copies
        self._progress = progress
        self._log = log
        self._stop = stop

    def wait_for_space(self, error: StoreFullError, backoff: Backoff) -> None:
        """Return once the written copy takes writes again, or on a stop."""
        buffer_bytes = write_buffer_for(self._config.path, self._config.tuning.rocksdb.write_buffer_bytes)
        self._progress.note_error(str(error))
        self._log.error(
            'store "%s": %s. Materializing is paused; reads go on at position %s, staler each second'
            " until it catches up. RocksDB resumes writing by itself once %d MiB are free on the volume",
            self._config.name,
            error,
            self._position() or "none (nothing is served until the store can open)",
            buffer_bytes // 2**20,
        )
        space_since: float | None = None
        while not self._stop.is_set():
            backoff.wait(self._stop)
            if self._stop.is_set():
                return
            refusal = self._try_write()
            if refusal is None:
                self._resumed()
                return
            if not isinstance(refusal, StoreFullError | StoreWriterClosedError):
                raise refusal  # no longer a matter of space: the materializer reacts to its kind
            if not self._space_back(buffer_bytes):
                space_since = None
                continue
            now = time.monotonic()
            space_since = space_since if space_since is not None else now
            # A closed copy can only be opened; an open one gets time to resume by itself first.
            if (
                self._copies.writing is None or now - space_since >= _RESUME_GRACE_SECONDS
            ) and self._reopened():
                self._resumed()
                return

    def bulk_volume_full(self, error: StoreFullError) -> None:
        """A bulk restore found no room for its files: said once, and the rest of the restore goes
        record by record, whose writes pause (and say so) only if the volume is still full."""
        self._progress.note_error(str(error))
        self._log.error(
            'store "%s": %s; reads go on at position %s', self._config.name, error, self._position() or "none"
        )

    def retry_after_failure(self, error: StoreWriteError, backoff: Backoff) -> bool:
        """Retry writing after an I/O error (or a refusal of no known kind); ``False`` once the
        store is FAILED (every attempt failed), ``True`` once it writes again or on a stop."""
        attempts = self._config.tuning.retry.write_error_attempts
        self._progress.note_error(str(error))
        self._log.error(
            'store "%s": %s; reads go on at position %s; retrying (%d attempts, then the store is FAILED)',
            self._config.name,
            error,
            self._position() or "none",
            attempts,
        )
        last: StoreWriteError = error
        for attempt in range(1, attempts + 1):
            backoff.wait(self._stop)
            if self._stop.is_set():
                return True
            if attempt == attempts and not self._reopened():
                continue  # the last attempt reopens the copy (RocksDB keeps refusing until then)
            refusal = self._try_write()
            if refusal is None:
                self._resumed()
                return True
            if isinstance(refusal, StoreFullError):
                self.wait_for_space(refusal, backoff)
                return True
            last = refusal
            self._log.warning(
                'store "%s": still cannot write (attempt %d of %d): %s',
                self._config.name,
                attempt,
                attempts,
                last,
            )
        reason = (
            f"the store at {self._config.path} kept failing to write through {attempts} attempts"
            f" ({last.__cause__ or last}); check its volume (the kernel log names failing devices),"
            " then restart the store"
        )
        # Logged first: whoever waits for FAILED then finds the line written.
        self._log.error('store "%s" is FAILED: %s', self._config.name, reason)
        self._copies.fail(reason)
        return False

    def _try_write(self) -> StoreWriteError | None:
        """Why the written copy still refuses a write (``None``: it takes writes again)."""
        writing = self._copies.writing
        if writing is None:
            return StoreWriterClosedError(f'store "{self._config.name}" has no copy open to write')
        try:
            writing.engine.check_writable()
        except StoreReadError:
            raise  # corruption: the copy is rebuilt (store.lifecycle.materializer)
        except StoreWriteError as exc:
            return exc
        return None

    def _space_back(self, buffer_bytes: int) -> bool:
        """Whether the volume has room for a memtable flush again (a probe file is written only
        once the volume says it has the room, so a full volume gets no file at all)."""
        path = self._config.path
        return free_bytes(path) >= buffer_bytes and can_write(path, min(buffer_bytes, _SPACE_PROBE_MAX_BYTES))

    def _reopened(self) -> bool:
        """Whether the written copy could be reopened (then it is written from its stored offsets)."""
        try:
            self._copies.reopen()
        except StoreWriteError as exc:
            self._progress.note_error(str(exc))
            self._log.warning('store "%s": still cannot write: %s', self._config.name, exc)
            return False
        return True

    def _resumed(self) -> None:
        self._log.warning(
            'store "%s": its volume takes writes again; materializing resumes', self._config.name
        )

    def _position(self) -> Position:
        writing = self._copies.writing
        return writing.position if writing is not None else Position()

"""Background verification: every entry of a store's served copy read back with checksums verified.

Reads verify the checksum of every block they load, but only the blocks somebody reads; a block
nobody has read since it went bad would be found only when a reader first needs it. The verifier
reads every column family of the served copy from its first key to its last, in small pages paced
to ``verify_bytes_per_second``, on its own thread, off the read path. The first pass starts when
the store opens (a copy that went bad while the service was down is found soon after the start),
the next ``verify_interval_seconds`` after the previous one ended. A failed read is reported to
the store by ``VerifyTarget.verify_step`` itself, which then stops answering from that copy and
rebuilds it; the verifier goes on with the copy that replaces it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Protocol

logger = logging.getLogger(__name__)

PAGE_ENTRIES = 1_000
"""Entries read per step: a step holds the copy open (a swap waits for it), so steps stay short."""

_IDLE_RETRY_SECONDS = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class VerifyStep:
    """One page verified: which copy, where the next page of the family starts (None: its end)."""

    copy: object
    next_start: bytes | None
    entries: int
    bytes: int


class VerifyTarget(Protocol):
    """What the verifier needs from the store it verifies."""

    @property
    def name(self) -> str: ...

    @property
    def column_families(self) -> tuple[str, ...]: ...

    def verify_step(self, family: str, start: bytes | None, max_entries: int) -> VerifyStep | None:
        """Verify one page of the served copy; ``None`` when there is no healthy copy to verify now
        (not open, stopped, or just found corrupt: the store has reported that itself)."""
        ...


class Verifier:
    """Runs verification passes over a store's served copy until ``stop()``.

    ``interval_seconds`` is the pause between the end of a pass and the start of the next;
    ``bytes_per_second`` caps the rate of a pass (keys and values read).
    """

    def __init__(self, target: VerifyTarget, interval_seconds: float, bytes_per_second: int) -> None:
        if interval_seconds <= 0 or bytes_per_second <= 0:
            raise ValueError("verification needs a positive interval and rate; leave it out to disable it")
        self._target = target
        self._interval = interval_seconds
        self._rate = bytes_per_second
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"verifier-{target.name}", daemon=True)
        self.passes = 0  # passes completed without finding corruption
        self.last_pass_ended: float | None = None  # time.monotonic() of the last completed pass

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                completed = self.verify_once()
            except Exception:  # the verifier must never die; the store's reads go on without it
                logger.exception('store "%s": verification failed unexpectedly; retrying', self._target.name)
                completed = False
            self._stop.wait(self._interval if completed else min(self._interval, _IDLE_RETRY_SECONDS))

    def verify_once(self) -> bool:
        """One paced pass over every column family, on the calling thread; ``False`` if it could
        not complete (stop, no copy, corruption found, or the copy was replaced meanwhile)."""
        target = self._target
        started = time.monotonic()
        copy: object | None = None
        entries = size = 0
        for family in target.column_families:
            start: bytes | None = None
            while True:
                if self._stop.is_set():
                    return False
                step = target.verify_step(family, start, PAGE_ENTRIES)
                if step is None:
                    return False
                if copy is None:
                    copy = step.copy
                elif step.copy is not copy:  # a rebuilt copy was swapped in: verify it from the start
                    return False
                entries += step.entries
                size += step.bytes
                # Paced: never ahead of the time the bytes read so far may take.
                ahead = size / self._rate - (time.monotonic() - started)
                if ahead > 0:
                    self._stop.wait(ahead)
                if step.next_start is None:
                    break
                start = step.next_start
        self.passes += 1
        self.last_pass_ended = time.monotonic()
        logger.info(
            'store "%s": verified its copy (%d entries, %.1f MiB, checksums checked) in %.1fs; no corruption',
            target.name,
            entries,
            size / 2**20,
            self.last_pass_ended - started,
        )
        return True

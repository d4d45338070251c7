"""How many bulk restores may run at once in a process.

A bulk restore (``store.lifecycle.bulkload``) keeps about two cores busy and holds a few hundred MiB in its
worker processes while it runs. Several stores restoring at once (a service starting on an empty
volume) would hold that much each, and finish no sooner in total: the work is CPU-bound. So a
store that finds every slot taken waits for one (its status says so) rather than restore record
by record beside them, which measured slower for every store and held more memory.
"""

from __future__ import annotations

import threading


class RestoreSlots:
    """A limit on concurrent bulk restores, shared by the stores given the same instance."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a restore slot limit must be at least 1, got {limit}")
        self.limit = limit
        self._freed = threading.Condition()
        self._running = 0
        self._most_at_once = 0

    @property
    def running(self) -> int:
        """Bulk restores holding a slot now."""
        return self._running

    @property
    def most_at_once(self) -> int:
        """The most slots ever held at the same time."""
        return self._most_at_once

    def try_acquire(self) -> bool:
        """Take a slot if one is free now; the caller must :meth:`release` it."""
        with self._freed:
            if self._running >= self.limit:
                return False
            self._running += 1
            self._most_at_once = max(self._most_at_once, self._running)
            return True

    def acquire(self, stop: threading.Event, check_seconds: float = 0.1) -> bool:
        """Wait until a slot is free and take it; ``False`` (nothing taken) once ``stop`` is set.

        ``stop`` is looked at every ``check_seconds`` while waiting.
        """
        with self._freed:
            while not stop.is_set():
                if self.try_acquire():
                    return True
                self._freed.wait(check_seconds)
            return False

    def release(self) -> None:
        """Give back a slot taken with :meth:`try_acquire` or :meth:`acquire`."""
        with self._freed:
            if self._running == 0:
                raise RuntimeError("released a restore slot that was not held")
            self._running -= 1
            self._freed.notify()


# Stores that are not given their own limit share this one: one bulk restore at a time.
PROCESS_RESTORE_SLOTS = RestoreSlots(1)

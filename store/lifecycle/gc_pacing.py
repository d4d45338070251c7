"""Fewer cyclic garbage collections while a store restores.

A restore creates a message object per record, ten thousand per poll, all tracked by the cyclic
collector. At the default first threshold (700 allocations) they are collected while still
referenced, survive into the older generations, and make those collections frequent too; each
of them also walks every item of the chunk lists being filled. On a restore of 1M records that
was ~1,300 young, ~120 middle and 10 full collections, half a second of the consuming thread's
time. With a first threshold of a few polls, most of a poll's messages are freed by reference
counting before a collection looks at them (34 young, 3 middle, no full ones). Reference
counting frees everything that is not in a cycle anyway, so only cyclic garbage waits longer.

The thresholds are the interpreter's, shared by the whole process: the raised one holds while at
least one store restores, and the previous ones come back when the last restore ends, unless
someone else changed them meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator


class _Pacing:
    """The process's one record of who holds the raised threshold and what to restore."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.saved: tuple[int, int, int] | None = None
        self.raised: tuple[int, int, int] | None = None

    def enter(self, first_threshold: int) -> None:
        with self.lock:
            current = gc.get_threshold()
            if self.holders == 0:
                self.saved = current
            if first_threshold > current[0]:
                self.raised = (first_threshold, current[1], current[2])
                gc.set_threshold(*self.raised)
            self.holders += 1

    def exit(self) -> None:
        with self.lock:
            self.holders -= 1
            if self.holders == 0:
                if self.saved is not None and self.raised is not None and gc.get_threshold() == self.raised:
                    gc.set_threshold(*self.saved)
                self.saved = self.raised = None


_PACING = _Pacing()


@contextlib.contextmanager
def fewer_collections(first_threshold: int) -> Iterator[None]:
    """Raise the collector's first threshold to at least ``first_threshold`` (0: leave it) inside."""
    if first_threshold <= 0:
        yield
        return
    _PACING.enter(first_threshold)
    try:
        yield
    finally:
        _PACING.exit()

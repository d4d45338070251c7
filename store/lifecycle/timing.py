"""The materializer's timing: backoff between retries, and periodic work checked from a loop."""

from __future__ import annotations

import random
import threading
import time


class Backoff:
    """Exponential backoff with full jitter, waiting on an event so a stop interrupts it."""

    def __init__(self, initial: float, maximum: float) -> None:
        self._initial = initial
        self._maximum = maximum
        self._attempt = 0

    def reset(self) -> None:
        self._attempt = 0

    def next_delay(self) -> float:
        """The next wait, in seconds (each one up to twice the one before, up to the maximum)."""
        ceiling = min(self._maximum, self._initial * (2**self._attempt))
        self._attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    def wait(self, stop: threading.Event) -> None:
        stop.wait(self.next_delay())


class Every:
    """A periodic deadline checked from a loop: :meth:`due` is true once per ``interval`` seconds."""

    def __init__(self, interval: float, now: float | None = None) -> None:
        self.interval = interval
        self._next = (time.monotonic() if now is None else now) + interval

    def due(self, now: float) -> bool:
        if now < self._next:
            return False
        self._next = now + self.interval
        return True

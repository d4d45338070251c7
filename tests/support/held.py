"""Hold a real store's materializer at chosen record batches, so that a test observes the store
mid-restore by construction rather than by sampling fast enough."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import pytest

from store.table.replica import Replica

T = TypeVar("T")


class HeldApplies:
    """Holds every store's materializer before it applies its ``n``-th record batch (counted from 1,
    over all stores of the test) for each ``n`` in ``at``, until :meth:`observe` lets it go on.

    Held before the store takes its lock: reads and ``status()`` answer meanwhile.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: Iterable[int]) -> None:
        self._at = set(at)
        self.applied = 0
        self._held = threading.Event()
        self._go = threading.Event()
        real_apply = Replica.apply

        def apply(replica: Replica, records: Any) -> None:
            self.applied += 1
            if self.applied in self._at:
                self._go.clear()
                self._held.set()
                self._go.wait(120)
            real_apply(replica, records)

        monkeypatch.setattr(Replica, "apply", apply)

    def observe(self, look: Callable[[], T], timeout: float = 120) -> T:
        """``look()`` while the materializer is held at the next hold point, then let it go on."""
        assert self._held.wait(timeout), f"no hold point reached in {timeout} s ({self.applied} applied)"
        try:
            return look()
        finally:
            self._held.clear()
            self._go.set()

"""Requests waiting for a store to reach a position (``min_position``, ``as_of``), on the event loop.

A wait is a future, resolved when the store's change listener reports a position that reaches
it: no thread is parked per wait, so a wait ends at its own timeout however many others are
pending, and one client's hopeless waits cost the others nothing (the guard's per-client limit
bounds how many one client holds).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from store import Position, ServableStore


class PositionWaits:
    """The pending position waits of one store; use from one event loop."""

    def __init__(self, store: ServableStore) -> None:
        self._store = store
        self._waiting: dict[asyncio.Future[None], Position] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._wake_scheduled = False

    @property
    def pending(self) -> int:
        """Waits not ended yet."""
        return len(self._waiting)

    async def wait(self, minimum: Position, timeout: float) -> bool:
        """Whether the store reaches ``minimum`` within ``timeout`` seconds (at once if it has)."""
        if self._store.position().reaches(minimum):
            return True
        loop = asyncio.get_running_loop()
        if self._remove_listener is None:
            self._loop = loop
            self._remove_listener = self._store.add_listener(self._on_change)
        reached = loop.create_future()
        self._waiting[reached] = minimum
        try:
            # Checked again once registered: a change between the first check and now has woken nobody.
            if self._store.position().reaches(minimum):
                return True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await reached
                return True
            return False
        finally:
            del self._waiting[reached]

    def close(self) -> None:
        """Stop listening to the store."""
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None

    def _on_change(self) -> None:
        """The store changed (called on its thread, its lock held): wake the loop, once at a time."""
        loop = self._loop
        if not self._waiting or self._wake_scheduled or loop is None:
            return
        self._wake_scheduled = True
        try:
            loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop is closed: nobody is left to wake
            self._wake_scheduled = False

    def _wake(self) -> None:
        # Cleared before the position is read: a change after this read schedules another wake.
        self._wake_scheduled = False
        position = self._store.position()
        for reached, minimum in self._waiting.items():
            if not reached.done() and position.reaches(minimum):
                reached.set_result(None)

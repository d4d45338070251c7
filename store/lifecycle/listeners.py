"""A condition variable that also tells plain callbacks when it notifies: change listeners.

Threads wait for a store's changes on its condition; an event loop cannot block there, so it
registers a listener instead and is called wherever the waiting threads are woken.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


class ListenedCondition(threading.Condition):
    """A ``threading.Condition`` whose :meth:`notify_all` also calls every registered listener.

    Listeners run on the notifying thread with the condition's lock held: they must return at
    once (hand the news to an event loop with ``call_soon_threadsafe``, say). One that raises is
    logged and does not stop the others or the notifier.
    """

    def __init__(self, lock: threading.RLock | threading.Lock | None = None) -> None:
        super().__init__(lock)
        self._listeners: tuple[Callable[[], None], ...] = ()

    def add_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` on every :meth:`notify_all`; returns the function that removes it."""
        with self:
            self._listeners = (*self._listeners, listener)

        def remove() -> None:
            with self:
                self._listeners = tuple(known for known in self._listeners if known is not listener)

        return remove

    def notify_all(self) -> None:
        super().notify_all()
        for listener in self._listeners:
            try:
                listener()
            except Exception:  # a listener's bug must not break the writer that notified
                logger.exception("a store change listener failed")

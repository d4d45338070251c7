"""Counting and logging the values a codec stores as undecodable."""

from __future__ import annotations

import logging
import threading

from store.formats import undecodable

logger = logging.getLogger("store.formats")


class UndecodableValues:
    """Values of one store that could not be decoded: counted, the first and every thousandth logged."""

    def __init__(self, store: str) -> None:
        self._store = store
        self._lock = threading.Lock()
        self.count = 0
        self.last_reason: str | None = None
        self._quiet = False

    def __getstate__(self) -> dict[str, object]:
        return {"store": self._store}

    def __setstate__(self, state: dict[str, object]) -> None:
        # A copy (a restore worker's) starts its own count, and logs nothing: the store's
        # process logs what the worker counted (``add``).
        self._store = str(state["store"])
        self._lock = threading.Lock()
        self.count = 0
        self.last_reason = None
        self._quiet = True

    def mark(self, kind: str, reason: str) -> bytes:
        """The stored marker for a value of problem ``kind`` (``unknown-schema``, ``value-undecodable``)."""
        with self._lock:
            self.count += 1
            count = self.count
            self.last_reason = f"{kind}: {reason}"
        if not self._quiet and (count == 1 or count % 1000 == 0):
            logger.error(
                'store "%s": a value cannot be decoded (%s); reads answer it as an error (%s) until the'
                " topic has a good record for its key; %d so far (statestore_undecodable_values)",
                self._store,
                reason,
                kind,
                count,
            )
        return undecodable(f"{kind}:{reason}")

    def add(self, count: int, example: str | None) -> None:
        """Count ``count`` values a restore worker stored as undecodable (``example``: one's reason)."""
        if count <= 0:
            return
        with self._lock:
            before = self.count
            self.count += count
            after = self.count
        if before == 0 or before // 1000 != after // 1000:
            logger.error(
                'store "%s": %d values of a bulk restore cannot be decoded (%s); reads answer them as'
                " errors until the topic has a good record for their keys; %d so far"
                " (statestore_undecodable_values)",
                self._store,
                count,
                example,
                after,
            )

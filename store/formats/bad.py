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

    def mark(self, kind: str, reason: str) -> bytes:
        """The stored marker for a value of problem ``kind`` (``unknown-schema``, ``value-undecodable``)."""
        with self._lock:
            self.count += 1
            count = self.count
        if count == 1 or count % 1000 == 0:
            logger.error(
                'store "%s": a value cannot be decoded (%s); reads answer it as an error (%s) until the'
                " topic has a good record for its key; %d so far (statestore_undecodable_values)",
                self._store,
                reason,
                kind,
                count,
            )
        return undecodable(f"{kind}:{reason}")

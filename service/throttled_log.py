"""Warnings about a repeated condition (a client kept at a limit), logged once an interval per subject."""

from __future__ import annotations

import logging
import time


class ThrottledWarnings:
    """Logs a warning about a subject (a client, the instance) at most once per ``interval`` seconds."""

    def __init__(self, logger: logging.Logger, interval: float = 60.0) -> None:
        self._logger = logger
        self._interval = interval
        self._warned_at: dict[str, float] = {}

    def warn(self, subject: str, message: str, *args: object) -> None:
        now = time.monotonic()
        last = self._warned_at.get(subject)
        if last is None or now - last >= self._interval:
            self._warned_at[subject] = now
            self._logger.warning(message, *args)

    def forget(self, subject: str) -> None:
        """The condition ended for ``subject``: if it comes back, it is logged at once."""
        self._warned_at.pop(subject, None)

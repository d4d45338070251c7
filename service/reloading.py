"""Values built from files (certificates, keys, CA bundles, token lists), rebuilt when the files change.

cert-manager and Kubernetes Secret volumes replace such files while the service runs. A
:class:`Reloading` value is checked at most once an interval, lazily, when it is asked for: the
files are read and compared with those the value was built from, and a change builds the value
again. A change that cannot be built (a key that does not match its certificate, half a file,
a file missing in the middle of a rotation) keeps the value in use and logs one line saying what is
wrong; the next change is tried again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

from service.exceptions import ConfigError

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _contents(paths: Sequence[Path]) -> tuple[bytes | str, ...]:
    """Each file's bytes, or the reason it cannot be read (a change as well)."""
    found: list[bytes | str] = []
    for path in paths:
        try:
            found.append(path.read_bytes())
        except OSError as exc:
            found.append(f"{path}: {exc.strerror or exc}")
    return tuple(found)


class Reloading(Generic[T]):
    """The value ``build()`` makes from ``paths``, built again when their contents change.

    ``build`` raises ``ConfigError`` (its message names the setting and what to do) for files it
    cannot use; at construction that error propagates, later any error keeps the previous value.
    """

    def __init__(
        self,
        what: str,
        paths: Sequence[Path],
        build: Callable[[], T],
        interval_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self._paths = tuple(paths)
        self._build = build
        self._interval = interval_seconds
        self._clock = clock
        self._seen = _contents(self._paths)
        self._value = build()
        self._next_check = clock() + interval_seconds
        self.reloads = 0  # values built again, for tests and curiosity
        self.failures = 0  # changes kept out because they could not be built

    def current(self) -> T:
        """The value, after checking the files when an interval has passed since the last check."""
        now = self._clock()
        if now >= self._next_check:
            self._next_check = now + self._interval
            self.check()
        return self._value

    def check(self) -> None:
        """Build the value again if the files changed since last seen."""
        seen = _contents(self._paths)
        if seen == self._seen:
            return
        self._seen = seen
        try:
            value = self._build()
        except Exception as exc:  # whatever a new file breaks, serving goes on with the old one
            self.failures += 1
            logger.error(
                "kept the %s in use: its files changed but cannot be used: %s; fix or replace the files"
                " (they are checked again every %g s, no restart needed)",
                self.what,
                exc if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}",
                self._interval,
            )
            return
        self._value = value
        self.reloads += 1
        logger.info("reloaded the %s from %s", self.what, ", ".join(str(p) for p in self._paths))

"""What the materializer counts for readers of the store's status: restore progress, rates, errors."""

from __future__ import annotations

import time
from collections.abc import Mapping

from store.freshness import FreshnessHistogram
from store.state import RestoreMode
from wire.position import Position

_RATE_WINDOW_SECONDS = 10.0


class Progress:
    """Counters shared with readers of the store's status (updated by the materializer only).

    Mappings are replaced, never changed in place, so a reader on another thread always sees a
    whole one.
    """

    def __init__(self) -> None:
        self.end_offsets: Mapping[int, int] = {}
        self.restore_target: Mapping[int, int] = {}
        self.restore_target_refined = False  # whether fetches, not only ListOffsets, set the target
        self.restore_started_at = time.monotonic()
        self.restore_applied = 0
        self.applied_total = 0
        self.null_keys = 0
        self.restore_mode = RestoreMode.RECORDS
        self.last_error: str | None = None
        self.last_error_at = 0.0
        self.last_contact: float | None = None
        self.freshness = FreshnessHistogram()
        self._rate_window: list[tuple[float, int]] = []

    def note_error(self, message: str) -> None:
        """Record the problem the store has now (shown in its status until it goes away)."""
        self.last_error = message
        self.last_error_at = time.monotonic()

    def note_healthy(self, since: float) -> None:
        """Work begun at ``since`` went through: an error noted before then no longer holds."""
        if self.last_error is not None and self.last_error_at < since:
            self.last_error = None

    def begin_restore(self, target: Mapping[int, int]) -> None:
        self.restore_target = dict(target)
        self.restore_target_refined = False
        self.restore_started_at = time.monotonic()
        self.restore_applied = 0
        self._rate_window = [(self.restore_started_at, self.applied_total)]

    def raise_target(self, target: Mapping[int, int], refined: bool) -> None:
        """Fetch responses showed more records than ListOffsets did: restore up to ``target``."""
        merged = dict(self.restore_target)
        for partition, end in target.items():
            merged[partition] = max(merged.get(partition, 0), end)
        self.restore_target = merged
        self.restore_target_refined = refined

    def count(self, applied: int) -> None:
        self.applied_total += applied
        self.restore_applied += applied
        now = time.monotonic()
        window = self._rate_window
        window.append((now, self.applied_total))
        while len(window) > 2 and now - window[0][0] > _RATE_WINDOW_SECONDS:
            window.pop(0)

    def rate(self) -> float:
        """Records applied per second, over the last ten seconds or so."""
        window = self._rate_window
        if len(window) < 2:
            return 0.0
        (t0, n0), (t1, n1) = window[0], window[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def remaining(self, position: Mapping[int, int]) -> int:
        """Records from ``position`` (of the copy being written) to the restore target."""
        return sum(max(0, target - position.get(p, 0)) for p, target in self.restore_target.items())

    def fraction(self, position: Mapping[int, int]) -> float:
        """How much of this restore is done, 0 to 1."""
        remaining = self.remaining(position)
        total = self.restore_applied + remaining
        return self.restore_applied / total if total else 1.0

    def eta_seconds(self, position: Mapping[int, int]) -> float | None:
        """Seconds left at the recent rate (``None`` while nothing is being applied)."""
        rate = self.rate()
        return self.remaining(position) / rate if rate > 0 else None

    def describe_restore(self, position: Mapping[int, int]) -> str:
        """One line on how far the restore is, for the periodic log."""
        remaining = self.remaining(position)
        eta = self.eta_seconds(position)
        target = "" if self.restore_target_refined else "at least "
        return (
            f"{self.fraction(position):.0%} ({self.restore_applied:,} records applied, {remaining:,} to go"
            f" to {target}{Position(self.restore_target)}), {self.rate():,.0f} records/s,"
            f" {'about ' + _duration(eta) + ' left' if eta is not None else 'time left unknown yet'}"
        )


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"

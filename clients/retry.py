"""Retry policy: exponential backoff with full jitter, ``Retry-After``, bounded by a per-call deadline."""

from __future__ import annotations

import dataclasses
import email.utils
import random
import time
from collections.abc import Callable

from clients.exceptions import (
    ServiceUnavailableError,
    StatestoreClientError,
    TooManyRequestsError,
    TransportError,
)


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a call retries transient failures (connection errors, 503, 429).

    The n-th retry (n = 0, 1, ...) waits a uniformly random time in
    ``[0, min(max_backoff, initial_backoff * multiplier**n)]`` ("full jitter"), but never less than
    the service's ``Retry-After``, and never past the call's deadline.
    """

    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    multiplier: float = 2.0
    max_attempts: int | None = None  # None: as many as the deadline allows

    def __post_init__(self) -> None:
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise ValueError("backoffs must be >= 0 and the multiplier >= 1")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1 (or None)")

    def backoff_ceiling(self, retry_number: int) -> float:
        """The upper bound of the jittered wait before retry ``retry_number`` (0-based)."""
        return min(self.max_backoff, self.initial_backoff * self.multiplier ** min(retry_number, 64))

    def delay(
        self, retry_number: int, retry_after: float | None = None, rng: Callable[[], float] = random.random
    ) -> float:
        """The wait before retry ``retry_number``: full jitter, raised to ``retry_after`` if given."""
        jittered = rng() * self.backoff_ceiling(retry_number)
        return max(jittered, retry_after or 0.0)


NO_RETRY = RetryPolicy(max_attempts=1)


def is_retryable(error: BaseException) -> bool:
    """Whether another attempt may succeed: transport failures, 503 and 429 answers."""
    return isinstance(error, TransportError | ServiceUnavailableError | TooManyRequestsError)


def parse_retry_after(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date); ``None`` if absent/invalid."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


class Deadline:
    """A point in monotonic time by which a call must be done."""

    __slots__ = ("_clock", "expires_at", "seconds")

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if seconds <= 0:
            raise ValueError(f"a deadline must be positive, got {seconds} s")
        self._clock = clock
        self.seconds = seconds
        self.expires_at = clock() + seconds

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.expires_at - self._clock())

    @property
    def expired(self) -> bool:
        return self.remaining() <= 0.0


def retry_after_of(error: StatestoreClientError) -> float | None:
    """The ``Retry-After`` the service sent with ``error``, if any."""
    value = getattr(error, "retry_after", None)
    return value if isinstance(value, float | int) else None


def next_delay(
    policy: RetryPolicy,
    attempt: int,
    error: StatestoreClientError,
    deadline: Deadline,
    rng: Callable[[], float] = random.random,
) -> float | None:
    """The wait before the next attempt after ``attempt`` (1-based) failed with ``error``.

    ``None`` means give up: the error is not retryable, the attempts are used up, or the wait
    would end past the deadline.
    """
    if not is_retryable(error):
        return None
    if policy.max_attempts is not None and attempt >= policy.max_attempts:
        return None
    delay = policy.delay(attempt - 1, retry_after_of(error), rng)
    if delay >= deadline.remaining():
        return None
    return delay

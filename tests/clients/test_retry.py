"""Backoff, jitter, Retry-After and deadlines (pure logic)."""

from __future__ import annotations

import pytest

from clients.exceptions import (
    BadRequestError,
    DeadlineExceededError,
    StoreNotReadyError,
    TooManyRequestsError,
    TransportError,
    UnknownStoreError,
)
from clients.retry import Deadline, RetryPolicy, is_retryable, next_delay, parse_retry_after


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def problem(cls: type, status: int, retry_after: float | None = None) -> object:
    return cls({"type": f"urn:statestore:problem:{cls.slug}"}, status, retry_after)


def test_backoff_ceiling_grows_exponentially_up_to_the_maximum() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=1.0, multiplier=2.0)
    assert [policy.backoff_ceiling(n) for n in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert policy.backoff_ceiling(10_000) == 1.0


def test_full_jitter_spans_zero_to_the_ceiling() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=1.0)
    assert policy.delay(3, rng=lambda: 0.0) == 0.0
    assert policy.delay(3, rng=lambda: 0.5) == pytest.approx(0.4)
    assert policy.delay(3, rng=lambda: 0.999999) == pytest.approx(0.8, rel=1e-5)


def test_retry_after_is_a_floor_for_the_delay() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=1.0)
    assert policy.delay(0, retry_after=2.0, rng=lambda: 1.0) == 2.0
    assert policy.delay(5, retry_after=0.01, rng=lambda: 1.0) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (TransportError("refused"), True),
        (problem(StoreNotReadyError, 503), True),
        (problem(TooManyRequestsError, 429), True),
        (problem(UnknownStoreError, 404), False),
        (problem(BadRequestError, 400), False),
        (DeadlineExceededError("late"), False),
    ],
)
def test_only_transport_503_and_429_are_retryable(error: Exception, retryable: bool) -> None:
    assert is_retryable(error) is retryable


def test_next_delay_gives_up_when_the_wait_would_pass_the_deadline() -> None:
    clock = FakeClock()
    deadline = Deadline(1.0, clock=clock)
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=10.0)
    assert next_delay(policy, 1, TransportError("x"), deadline, rng=lambda: 1.0) == pytest.approx(0.1)
    slow = problem(StoreNotReadyError, 503, retry_after=5.0)
    assert next_delay(policy, 1, slow, deadline, rng=lambda: 0.0) is None
    clock.now += 0.95
    assert next_delay(policy, 1, TransportError("x"), deadline, rng=lambda: 1.0) is None


def test_next_delay_respects_max_attempts_and_non_retryable_errors() -> None:
    deadline = Deadline(60.0)
    policy = RetryPolicy(max_attempts=3)
    assert next_delay(policy, 2, TransportError("x"), deadline) is not None
    assert next_delay(policy, 3, TransportError("x"), deadline) is None
    assert next_delay(policy, 1, problem(UnknownStoreError, 404), deadline) is None


def test_deadline_counts_down_and_never_goes_negative() -> None:
    clock = FakeClock()
    deadline = Deadline(2.0, clock=clock)
    assert deadline.remaining() == 2.0
    clock.now += 1.5
    assert deadline.remaining() == pytest.approx(0.5)
    assert not deadline.expired
    clock.now += 10
    assert deadline.remaining() == 0.0
    assert deadline.expired
    with pytest.raises(ValueError, match="positive"):
        Deadline(0)


def test_retry_after_parses_seconds_and_http_dates() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    now = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:30 GMT", now=lambda: now) == pytest.approx(10.0)


def test_policy_rejects_unusable_settings() -> None:
    with pytest.raises(ValueError, match="multiplier"):
        RetryPolicy(multiplier=0.5)
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)

"""Problem type → exception mapping (pure logic)."""

from __future__ import annotations

import pytest

from clients import exceptions as e
from clients.retry import is_retryable
from wire.position import Position
from wire.problems import CATALOGUE


def test_the_client_knows_every_problem_type_of_the_server_and_no_other() -> None:
    assert set(e.PROBLEM_TYPES) == {problem.uri for problem in CATALOGUE.values()}
    assert all(e.PROBLEM_TYPES[problem.uri].slug == slug for slug, problem in CATALOGUE.items())


@pytest.mark.parametrize("slug", sorted(CATALOGUE))
def test_problem_maps_on_type(slug: str) -> None:
    problem = CATALOGUE[slug]
    body = {"type": problem.uri, "title": problem.title, "status": problem.status, "detail": "what happened"}
    error = e.problem_error(body, problem.status, retry_after=1.5)
    assert type(error) is e.PROBLEM_TYPES[problem.uri]
    assert isinstance(error, e.ProblemError)
    assert isinstance(error, e.StatestoreClientError)
    assert error.status == problem.status
    assert error.retry_after == 1.5
    assert error.problem["detail"] == "what happened"
    assert "what happened" in str(error)
    # Retried exactly when the status says the next attempt may succeed.
    assert is_retryable(error) == (problem.status in (429, 503))


def test_families_group_related_problems() -> None:
    assert issubclass(e.InvalidParameterError, e.BadRequestError)
    assert issubclass(e.BatchTooLargeError, e.PayloadTooLargeError)
    assert issubclass(e.PositionNotReachedError, e.ServiceUnavailableError)
    assert issubclass(e.TransportError, ConnectionError)
    assert issubclass(e.DeadlineExceededError, TimeoutError)
    # A JSON store's bad value is a decoding failure too, whichever way the client met it.
    assert issubclass(e.StoredValueNotJsonError, e.ValueDecodeError)


def test_limit_member_is_exposed_on_payload_errors() -> None:
    error = e.problem_error({"type": e.PROBLEM_TYPE_PREFIX + "batch-too-large", "limit": 10000}, 413)
    assert isinstance(error, e.PayloadTooLargeError)
    assert error.limit == 10000


def test_unknown_types_fall_back_on_the_status_family() -> None:
    assert type(e.problem_error({"type": "urn:other"}, 503)) is e.ServiceUnavailableError
    assert type(e.problem_error({}, 502)) is e.ServiceUnavailableError
    assert type(e.problem_error({}, 400)) is e.BadRequestError
    odd = e.problem_error({"type": "urn:other", "detail": "teapot"}, 418)
    assert type(odd) is e.UnexpectedResponseError
    assert "418" in str(odd)


def test_index_and_history_problems_retry_or_not_and_expiry_carries_its_floor() -> None:
    assert is_retryable(e.problem_error({"type": e.PROBLEM_TYPE_PREFIX + "index-not-ready"}, 503))
    assert not is_retryable(e.problem_error({"type": e.PROBLEM_TYPE_PREFIX + "unknown-index"}, 404))
    assert not is_retryable(e.problem_error({"type": e.PROBLEM_TYPE_PREFIX + "history-not-kept"}, 400))
    expired = e.problem_error(
        {"type": e.PROBLEM_TYPE_PREFIX + "history-expired", "as_of": "0:3", "floor": "0:40,1:12"}, 410
    )
    assert isinstance(expired, e.HistoryExpiredError)
    assert not is_retryable(expired)
    assert expired.floor == Position({0: 40, 1: 12})
    assert e.problem_error({"type": e.PROBLEM_TYPE_PREFIX + "history-expired"}, 410).floor is None  # type: ignore[attr-defined]
    assert type(e.problem_error({"type": "urn:other"}, 410)) is e.HistoryExpiredError

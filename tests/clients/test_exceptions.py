"""Problem type → exception mapping (pure logic)."""

from __future__ import annotations

import pytest

from clients import exceptions as e
from clients.position import Position
from clients.retry import is_retryable

SLUGS = {
    "unknown-store": (404, e.UnknownStoreError),
    "key-not-found": (404, e.KeyNotFoundError),
    "route-not-found": (404, e.RouteNotFoundError),
    "method-not-allowed": (405, e.MethodNotAllowedError),
    "bad-key-encoding": (400, e.BadKeyEncodingError),
    "invalid-position": (400, e.InvalidPositionError),
    "malformed-request": (400, e.MalformedRequestError),
    "invalid-parameter": (422, e.InvalidParameterError),
    "unsupported-media-type": (415, e.UnsupportedMediaTypeError),
    "batch-too-large": (413, e.BatchTooLargeError),
    "page-too-large": (413, e.PageTooLargeError),
    "key-too-large": (413, e.KeyTooLargeError),
    "body-too-large": (413, e.BodyTooLargeError),
    "store-not-ready": (503, e.StoreNotReadyError),
    "position-not-reached": (503, e.PositionNotReachedError),
    "unauthorized": (401, e.UnauthorizedError),
    "forbidden": (403, e.ForbiddenError),
    "too-many-requests": (429, e.TooManyRequestsError),
    "client-too-many-requests": (429, e.ClientTooManyRequestsError),
    "request-timeout": (503, e.RequestTimeoutError),
    "unknown-index": (404, e.UnknownIndexError),
    "index-not-ready": (503, e.IndexNotReadyError),
    "history-not-kept": (400, e.HistoryNotKeptError),
    "history-expired": (410, e.HistoryExpiredError),
    "wrong-shard": (421, e.WrongShardError),
}


def test_every_documented_problem_type_has_its_own_exception() -> None:
    assert set(e.PROBLEM_TYPES) == {e.PROBLEM_TYPE_PREFIX + slug for slug in SLUGS}


@pytest.mark.parametrize("slug", sorted(SLUGS))
def test_problem_maps_on_type(slug: str) -> None:
    status, cls = SLUGS[slug]
    problem = {
        "type": e.PROBLEM_TYPE_PREFIX + slug,
        "title": "t",
        "status": status,
        "detail": "what happened",
    }
    error = e.problem_error(problem, status, retry_after=1.5)
    assert type(error) is cls
    assert isinstance(error, e.ProblemError)
    assert isinstance(error, e.StatestoreClientError)
    assert error.status == status
    assert error.retry_after == 1.5
    assert error.problem["detail"] == "what happened"
    assert "what happened" in str(error)


def test_families_group_related_problems() -> None:
    assert issubclass(e.InvalidParameterError, e.BadRequestError)
    assert issubclass(e.BatchTooLargeError, e.PayloadTooLargeError)
    assert issubclass(e.PositionNotReachedError, e.ServiceUnavailableError)
    assert issubclass(e.TransportError, ConnectionError)
    assert issubclass(e.DeadlineExceededError, TimeoutError)


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

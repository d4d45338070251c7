"""Every problem type the service answers with: its slug, HTTP status and title (docs/http-api.md).

The one list of them, shared by the service and the clients: the service's raise sites name an
entry (``raise KEY_TOO_LARGE("the key has 5000 bytes", extras=...)``, which makes a
:class:`ProblemError`), and the clients map each entry to an exception of theirs
(``clients.exceptions``). A new problem type is one line here. The ``type`` member of an answer is
``TYPE_PREFIX + slug``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from wire.exceptions import WireError

TYPE_PREFIX = "urn:statestore:problem:"


class ProblemError(WireError):
    """A request failed for a reason the client can act on; made by calling a catalogue entry.

    ``problem`` is its entry (slug, status, title); ``extras`` are the problem-specific members
    listed in docs/http-api.md. The service renders it as RFC 9457 problem+json.
    """

    def __init__(
        self,
        problem: ProblemType,
        detail: str,
        *,
        extras: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.problem = problem
        self.detail = detail
        self.extras = dict(extras or {})
        self.headers = dict(headers or {})

    @property
    def slug(self) -> str:
        return self.problem.slug

    @property
    def status(self) -> int:
        return self.problem.status

    @property
    def title(self) -> str:
        return self.problem.title


@dataclasses.dataclass(frozen=True, slots=True)
class ProblemType:
    """One kind of problem answer; calling it makes the :class:`ProblemError` to raise."""

    slug: str
    status: int
    title: str

    @property
    def uri(self) -> str:
        """The problem's ``type`` member."""
        return TYPE_PREFIX + self.slug

    def __call__(
        self,
        detail: str,
        *,
        extras: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> ProblemError:
        return ProblemError(self, detail, extras=extras, headers=headers)


CATALOGUE: dict[str, ProblemType] = {}
"""Every problem type by slug."""


def _problem(slug: str, status: int, title: str) -> ProblemType:
    problem = CATALOGUE[slug] = ProblemType(slug, status, title)
    return problem


# Requests the service cannot route.
ROUTE_NOT_FOUND = _problem("route-not-found", 404, "Route not found")
METHOD_NOT_ALLOWED = _problem("method-not-allowed", 405, "Method not allowed")
# Who may read.
UNAUTHORIZED = _problem("unauthorized", 401, "Unauthorized")
FORBIDDEN = _problem("forbidden", 403, "Forbidden")
# What was asked for.
UNKNOWN_STORE = _problem("unknown-store", 404, "Unknown store")
KEY_NOT_FOUND = _problem("key-not-found", 404, "Key not found")
UNKNOWN_INDEX = _problem("unknown-index", 404, "Unknown index")
HISTORY_NOT_KEPT = _problem("history-not-kept", 400, "History not kept")
HISTORY_EXPIRED = _problem("history-expired", 410, "History expired")
WRONG_SHARD = _problem("wrong-shard", 421, "Wrong shard")
# Bad input.
BAD_KEY_ENCODING = _problem("bad-key-encoding", 400, "Bad key encoding")
INVALID_POSITION = _problem("invalid-position", 400, "Invalid position")
MALFORMED_REQUEST = _problem("malformed-request", 400, "Malformed request")
INVALID_PARAMETER = _problem("invalid-parameter", 422, "Invalid parameter")
UNSUPPORTED_MEDIA_TYPE = _problem("unsupported-media-type", 415, "Unsupported media type")
# Requests above the limits.
BATCH_TOO_LARGE = _problem("batch-too-large", 413, "Batch too large")
PAGE_TOO_LARGE = _problem("page-too-large", 413, "Page too large")
KEY_TOO_LARGE = _problem("key-too-large", 413, "Key too large")
BODY_TOO_LARGE = _problem("body-too-large", 413, "Body too large")
ANSWER_TOO_LARGE = _problem("answer-too-large", 413, "Answer too large")
URI_TOO_LONG = _problem("uri-too-long", 414, "URI too long")
REQUEST_HEAD_TOO_LARGE = _problem("request-head-too-large", 431, "Request head too large")
TOO_MANY_REQUESTS = _problem("too-many-requests", 429, "Too many requests")
CLIENT_TOO_MANY_REQUESTS = _problem("client-too-many-requests", 429, "Too many requests from this client")
# The service cannot answer now; retry.
STORE_NOT_READY = _problem("store-not-ready", 503, "Store not ready")
POSITION_NOT_REACHED = _problem("position-not-reached", 503, "Position not reached")
INDEX_NOT_READY = _problem("index-not-ready", 503, "Index not ready")
REQUEST_TIMEOUT = _problem("request-timeout", 503, "Request timeout")
CLIENT_TOO_MANY_CONNECTIONS = _problem(
    "client-too-many-connections", 503, "Too many connections from this client"
)
# The store found its files corrupt: it answers nothing from them and rebuilds from its topic.
STORE_CORRUPT = _problem("store-corrupt", 503, "Store corrupt")
# The service cannot answer correctly: the topic holds a value its format forbids, or a bug.
VALUE_NOT_JSON = _problem("value-not-json", 502, "Stored value is not JSON")
INTERNAL_ERROR = _problem("internal-error", 500, "Internal error")

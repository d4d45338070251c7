"""Errors raised by the ``clients`` package.

Hierarchy::

    StatestoreClientError
    ├── ClientConfigError (also ValueError)     not told enough to start (no URL, STATESTORE_URL unset)
    ├── TransportError (also ConnectionError)   the service could not be reached or the connection broke
    ├── DeadlineExceededError (also TimeoutError)  the call's deadline passed (``last_error`` tells why)
    ├── UnexpectedResponseError                 an answer the HTTP API does not describe
    ├── ValueDecodeError (also ValueError)      a stored value does not decode per the store's value format
    ├── SchemaMismatchError (also ValueError)   a Spark value schema that cannot apply to the store
    ├── ShardingError                           a sharded store the client cannot route to (URL, shards)
    ├── UnsupportedSparkError                   what the installed PySpark version or session kind cannot do
    └── ProblemError                            the service answered an RFC 9457 problem
        ├── UnknownStoreError                   404 unknown-store
        ├── UnknownIndexError                   404 unknown-index
        ├── KeyNotFoundError                    404 key-not-found (``get`` turns it into ``None``)
        ├── RouteNotFoundError                  404 route-not-found
        ├── MethodNotAllowedError               405 method-not-allowed
        ├── BadRequestError
        │   ├── BadKeyEncodingError             400 bad-key-encoding
        │   ├── InvalidPositionError            400 invalid-position
        │   ├── HistoryNotKeptError             400 history-not-kept
        │   ├── MalformedRequestError           400 malformed-request
        │   ├── InvalidParameterError           422 invalid-parameter
        │   └── UnsupportedMediaTypeError       415 unsupported-media-type
        ├── PayloadTooLargeError
        │   ├── BatchTooLargeError              413 batch-too-large
        │   ├── PageTooLargeError               413 page-too-large
        │   ├── KeyTooLargeError                413 key-too-large
        │   ├── BodyTooLargeError               413 body-too-large
        │   ├── AnswerTooLargeError             413 answer-too-large
        │   ├── UriTooLongError                 414 uri-too-long
        │   └── RequestHeadTooLargeError        431 request-head-too-large
        ├── UnauthorizedError                   401 unauthorized
        ├── ForbiddenError                      403 forbidden
        ├── HistoryExpiredError                 410 history-expired (``floor``: the oldest position answered)
        ├── WrongShardError                     421 wrong-shard (the client re-reads the sharding once)
        ├── TooManyRequestsError                429 too-many-requests (retried)
        │   └── ClientTooManyRequestsError      429 client-too-many-requests (retried)
        ├── ServiceUnavailableError             503 (retried)
        │   ├── StoreNotReadyError              503 store-not-ready
        │   ├── PositionNotReachedError         503 position-not-reached
        │   ├── IndexNotReadyError              503 index-not-ready
        │   ├── StoreCorruptError               503 store-corrupt
        │   ├── RequestTimeoutError             503 request-timeout
        │   └── ClientTooManyConnectionsError   503 client-too-many-connections
        ├── StoredValueNotJsonError (also ValueDecodeError)  502 value-not-json
        ├── StoredValueNotUtf8Error (also ValueDecodeError)  502 value-not-utf8
        ├── UnknownSchemaError (also ValueDecodeError)       502 unknown-schema
        ├── ValueUndecodableError (also ValueDecodeError)    502 value-undecodable
        └── InternalServerError                 500 internal-error

A key that is absent is not an error: ``get`` answers ``None``. Errors are mapped on the problem
``type``, never on its title or detail. httpx errors are converted with ``raise ... from exc``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wire import problems
from wire.position import Position

PROBLEM_TYPE_PREFIX = problems.TYPE_PREFIX


class StatestoreClientError(Exception):
    """Root of every error the statestore clients raise."""


class TransportError(StatestoreClientError, ConnectionError):
    """The service could not be reached, or the connection failed mid-request."""


class ClientConfigError(StatestoreClientError, ValueError):
    """The client was not told enough to start (e.g. no URL given and ``STATESTORE_URL`` unset)."""


class DeadlineExceededError(StatestoreClientError, TimeoutError):
    """The call did not succeed before its deadline; ``last_error`` is the last failure seen, if any."""

    def __init__(self, message: str, last_error: BaseException | None = None) -> None:
        super().__init__(message)
        self.last_error = last_error


class UnexpectedResponseError(StatestoreClientError):
    """The service answered something the HTTP API does not describe (wrong content, unknown problem)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ValueDecodeError(StatestoreClientError, ValueError):
    """A stored value cannot be decoded per the store's value format (e.g. invalid JSON)."""


class SchemaMismatchError(StatestoreClientError, ValueError):
    """A value schema was given that cannot apply to the store (e.g. the store does not hold JSON)."""


class ShardingError(StatestoreClientError):
    """The store is sharded in a way this client cannot route to (e.g. its URL holds no ``{shard}``)."""


class UnsupportedSparkError(StatestoreClientError):
    """Something the installed PySpark version or the session kind cannot do; the message names both."""


class ProblemError(StatestoreClientError):
    """The service answered with an RFC 9457 problem; the members are kept on the exception."""

    slug: str | None = None
    position: Position | None = None
    """The answer's ``Statestore-Position``, when it carried one (e.g. a 404 ``key-not-found``)."""

    def __init__(self, problem: Mapping[str, Any], status: int, retry_after: float | None = None) -> None:
        self.problem = dict(problem)
        self.status = status
        self.type = str(problem.get("type", ""))
        self.title = str(problem.get("title", ""))
        self.detail = str(problem.get("detail", "") or "")
        self.instance = str(problem.get("instance", "") or "")
        self.retry_after = retry_after
        text = self.detail or self.title or self.type
        super().__init__(f"{status} {self.type}: {text} ({self.instance})" if self.instance else text)


class UnknownStoreError(ProblemError):
    """The store is not configured on the service; check the name against ``client.stores()``."""

    slug = problems.UNKNOWN_STORE.slug


class UnknownIndexError(ProblemError):
    """The store declares no index of that name; ``client.store(name).raw["indexes"]`` lists them."""

    slug = problems.UNKNOWN_INDEX.slug


class KeyNotFoundError(ProblemError):
    """The key is absent; ``get`` answers ``None`` instead of raising this."""

    slug = problems.KEY_NOT_FOUND.slug


class RouteNotFoundError(ProblemError):
    """The service has no such route: the client and service versions may disagree."""

    slug = problems.ROUTE_NOT_FOUND.slug


class MethodNotAllowedError(ProblemError):
    """The route does not take this method (the service is read-only)."""

    slug = problems.METHOD_NOT_ALLOWED.slug


class BadRequestError(ProblemError):
    """The request was rejected as malformed; fix the request, retrying will not help."""


class BadKeyEncodingError(BadRequestError):
    slug = problems.BAD_KEY_ENCODING.slug


class InvalidPositionError(BadRequestError):
    slug = problems.INVALID_POSITION.slug


class HistoryNotKeptError(BadRequestError):
    """An ``as_of`` read of a store that keeps no history: configure ``history`` on the store."""

    slug = problems.HISTORY_NOT_KEPT.slug


class MalformedRequestError(BadRequestError):
    slug = problems.MALFORMED_REQUEST.slug


class InvalidParameterError(BadRequestError):
    slug = problems.INVALID_PARAMETER.slug


class UnsupportedMediaTypeError(BadRequestError):
    slug = problems.UNSUPPORTED_MEDIA_TYPE.slug


class PayloadTooLargeError(ProblemError):
    """Something in the request exceeds a service limit; ``limit`` holds it when the service says."""

    @property
    def limit(self) -> int | None:
        value = self.problem.get("limit")
        return value if isinstance(value, int) else None


class BatchTooLargeError(PayloadTooLargeError):
    slug = problems.BATCH_TOO_LARGE.slug


class PageTooLargeError(PayloadTooLargeError):
    slug = problems.PAGE_TOO_LARGE.slug


class KeyTooLargeError(PayloadTooLargeError):
    slug = problems.KEY_TOO_LARGE.slug


class BodyTooLargeError(PayloadTooLargeError):
    slug = problems.BODY_TOO_LARGE.slug


class AnswerTooLargeError(PayloadTooLargeError):
    """The answer would carry more than ``limits.max_answer_rows`` rows or ``limits.max_answer_bytes``
    bytes of values: ask for fewer keys, values or rows at once."""

    slug = problems.ANSWER_TOO_LARGE.slug


class UriTooLongError(PayloadTooLargeError):
    """The request target (path and query) is longer than ``limits.max_url_bytes``."""

    slug = "uri-too-long"


class RequestHeadTooLargeError(PayloadTooLargeError):
    """The request line and headers are longer than ``limits.max_request_head_bytes``."""

    slug = "request-head-too-large"


class UnauthorizedError(ProblemError):
    """The bearer token is missing or invalid: pass ``token=`` to the client."""

    slug = problems.UNAUTHORIZED.slug


class ForbiddenError(ProblemError):
    """The token is valid but may not read this store."""

    slug = problems.FORBIDDEN.slug


class HistoryExpiredError(ProblemError):
    """The ``as_of`` position is older than the history the store keeps; ``floor`` is the oldest it answers.

    Reads at that position can no longer be reproduced exactly: pin a newer position (at least ``floor``).
    For a read ``as_of_time``, ``time_floor`` is the oldest time answered (epoch ms), when known.
    """

    slug = problems.HISTORY_EXPIRED.slug

    @property
    def time_floor(self) -> int | None:
        """The oldest time (epoch ms) the store answers exactly, if the service said."""
        value = self.problem.get("time_floor")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def floor(self) -> Position | None:
        """The oldest position the store still answers exactly, if the service said (and said it well)."""
        value = self.problem.get("floor")
        try:
            return Position.parse(value) if isinstance(value, str) else None
        except ValueError:
            return None


class WrongShardError(ProblemError):
    """A key was sent to a shard that does not hold it (421): the client's sharding is out of date.

    The client re-reads the store's sharding and sends the request again once; ``shard`` is the
    shard the service says holds the first misrouted key, when it says.
    """

    slug = problems.WRONG_SHARD.slug

    @property
    def shard(self) -> int | None:
        value = self.problem.get("shard")
        return value if isinstance(value, int) else None


class TooManyRequestsError(ProblemError):
    """The service's concurrency limit was reached; the client retries these until its deadline."""

    slug = problems.TOO_MANY_REQUESTS.slug


class ClientTooManyRequestsError(TooManyRequestsError):
    """This client (its token, else its address) has as many requests in flight as one client may.

    Retried like other 429s; if it persists, send fewer requests at once (fewer threads or
    executors per token) rather than retrying harder.
    """

    slug = problems.CLIENT_TOO_MANY_REQUESTS.slug


class ServiceUnavailableError(ProblemError):
    """The service cannot answer right now (503); the client retries these until its deadline."""


class StoreNotReadyError(ServiceUnavailableError):
    slug = problems.STORE_NOT_READY.slug


class PositionNotReachedError(ServiceUnavailableError):
    slug = problems.POSITION_NOT_REACHED.slug


class RequestTimeoutError(ServiceUnavailableError):
    slug = problems.REQUEST_TIMEOUT.slug


class ClientTooManyConnectionsError(ServiceUnavailableError):
    """This client's address has ``limits.max_connections_per_client`` connections open: the new one
    was answered this and closed. Retried like other 503s; reuse connections rather than open more."""

    slug = "client-too-many-connections"


class IndexNotReadyError(ServiceUnavailableError):
    """The index is still being built; the client retries until its deadline like other 503s."""

    slug = problems.INDEX_NOT_READY.slug


class StoreCorruptError(ServiceUnavailableError):
    """The store found corruption in its files and answers nothing until a copy rebuilt from its topic
    replaces them; retried until the call's deadline like other 503s (another replica may answer)."""

    slug = problems.STORE_CORRUPT.slug


class StoredValueNotJsonError(ProblemError, ValueDecodeError):
    """The key's value in a JSON store is not a JSON document (the topic holds a bad record)."""

    slug = problems.VALUE_NOT_JSON.slug


class StoredValueNotUtf8Error(ProblemError, ValueDecodeError):
    """The key's value in a ``string`` store is not UTF-8 text (the topic holds a bad record)."""

    slug = problems.VALUE_NOT_UTF8.slug


class UnknownSchemaError(ProblemError, ValueDecodeError):
    """The key's record names a schema id the Schema Registry does not know: the store could not
    decode it at ingest (the next record for the key replaces it)."""

    slug = problems.UNKNOWN_SCHEMA.slug


class ValueUndecodableError(ProblemError, ValueDecodeError):
    """The key's record is not Confluent-framed or does not decode under its schema: the store could
    not decode it at ingest (the next record for the key replaces it)."""

    slug = problems.VALUE_UNDECODABLE.slug


class InternalServerError(ProblemError):
    """The service failed unexpectedly (its log has the error); not retried."""

    slug = problems.INTERNAL_ERROR.slug


def _leaf_classes(root: type[ProblemError]) -> list[type[ProblemError]]:
    found: list[type[ProblemError]] = []
    for sub in root.__subclasses__():
        if sub.slug is not None:
            found.append(sub)
        found.extend(_leaf_classes(sub))
    return found


PROBLEM_TYPES: dict[str, type[ProblemError]] = {
    PROBLEM_TYPE_PREFIX + cls.slug: cls for cls in _leaf_classes(ProblemError) if cls.slug
}
"""Problem ``type`` URI → exception class."""

_BY_STATUS: dict[int, type[ProblemError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    413: PayloadTooLargeError,
    414: PayloadTooLargeError,
    415: UnsupportedMediaTypeError,
    422: BadRequestError,
    410: HistoryExpiredError,
    421: WrongShardError,
    429: TooManyRequestsError,
    431: PayloadTooLargeError,
    503: ServiceUnavailableError,
}


def problem_error(
    problem: Mapping[str, Any], status: int, retry_after: float | None = None
) -> StatestoreClientError:
    """The typed exception for a problem answer: by ``type``, else by status family."""
    cls = PROBLEM_TYPES.get(str(problem.get("type", "")))
    if cls is None:
        cls = _BY_STATUS.get(status)
    if cls is None:
        if status >= 500:
            cls = ServiceUnavailableError if status in (502, 504) else None
        if cls is None:
            return UnexpectedResponseError(
                f"the service answered {status} with an unknown problem type {problem.get('type')!r}: "
                f"{problem.get('detail') or problem.get('title') or ''}".rstrip(": "),
                status,
            )
    return cls(problem, status, retry_after)

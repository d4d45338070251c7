"""The bounds on what one request may ask."""

from __future__ import annotations

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
)

from store import MAX_SCAN_LIMIT


class LimitSettings(BaseModel):
    """Bounds on what one request may ask, so no request can exhaust the service."""

    model_config = ConfigDict(extra="forbid")

    max_batch_keys: int = Field(
        default=10_000,
        ge=1,
        description="keys (or index values) one batch request may ask; more get 413 batch-too-large",
    )
    max_scan_limit: int = Field(
        default=MAX_SCAN_LIMIT,
        ge=1,
        le=MAX_SCAN_LIMIT,
        description="the largest page a scan or index lookup may ask; more get 413 page-too-large",
    )
    max_key_bytes: int = Field(
        default=4096,
        ge=1,
        description="bytes of a key, prefix, cursor or indexed value; more get 413 key-too-large",
    )
    max_body_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1, description="bytes of a request body; more get 413 body-too-large"
    )
    max_answer_bytes: ByteSize = Field(
        default=ByteSize(64 * 1024 * 1024),
        ge=1,
        description=(
            "Bytes of stored values one answer may carry (batch get, scan, index reads; a key asked twice "
            "counts twice); more get 413 answer-too-large, refused before the answer is built."
        ),
    )
    max_answer_rows: int = Field(
        default=100_000,
        ge=1,
        description=(
            "Rows one index batch answer may hold (every value's matches, one row for a value without); "
            "more get 413 answer-too-large, so a small request cannot ask for a huge answer."
        ),
    )
    min_position_timeout_seconds: float = Field(
        default=5.0,
        ge=0,
        description=(
            "the longest a read waits for `min_position` or `as_of` (a request's `timeout_ms` may ask less)"
        ),
    )
    max_position_waiters: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Accepted so that configurations setting it still load, and ignored (a warning says so): a "
            "position wait holds no thread, and max_concurrent_requests_per_client bounds one client's."
        ),
    )
    max_concurrent_requests: int = Field(
        default=1024, ge=1, description="Store requests served at once; more get 429 too-many-requests."
    )
    max_concurrent_requests_per_client: int = Field(
        default=256,
        ge=1,
        description=(
            "Store requests served at once for one client (a bearer token, else an address); more get 429 "
            "client-too-many-requests, so one greedy client cannot take every slot."
        ),
    )
    request_timeout_ms: int = Field(
        default=30_000,
        ge=1,
        description=(
            "A store request running longer (e.g. waiting for min_position) gets 503 request-timeout."
        ),
    )
    request_head_timeout_ms: int = Field(
        default=10_000,
        ge=1,
        description=(
            "A connection whose request head (request line and headers) is not complete this long after it "
            "opened, or after the request's first byte, is closed."
        ),
    )
    max_request_head_bytes: ByteSize = Field(
        default=ByteSize(64 * 1024),
        ge=1024,
        description=(
            "Bytes of one request head (request line and headers, as sent); a longer one gets 431 "
            "request-head-too-large as soon as it passes the bound, before anything else is checked."
        ),
    )
    max_url_bytes: ByteSize = Field(
        default=ByteSize(32 * 1024),
        ge=256,
        description=(
            "Bytes of one request's target (path and query string, as sent); a longer one gets 414 "
            "uri-too-long."
        ),
    )
    idle_connection_timeout_ms: int = Field(
        default=5_000,
        ge=1,
        description="A keep-alive connection with no request in progress is closed after this long.",
    )
    max_connections_per_client: int = Field(
        default=256,
        ge=1,
        description=(
            "Connections open at once from one address; more are answered 503 client-too-many-connections "
            "(with Retry-After) and closed as soon as they open. One client "
            "cannot use more than its share of requests anyway (max_concurrent_requests_per_client); behind"
            " a proxy that hides the clients' addresses, raise it."
        ),
    )
    retry_after_seconds: int = Field(
        default=1,
        ge=1,
        description="Seconds a client is told to wait (Retry-After) when a store is not ready or behind.",
    )

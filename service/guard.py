"""Bounds on requests in flight: at most ``limits.max_concurrent_requests`` store requests at once
(else ``429 too-many-requests``), at most ``limits.max_concurrent_requests_per_client`` of them from
one client (else ``429 client-too-many-requests``), and none waiting past
``limits.request_timeout_ms`` (else ``503 request-timeout``). Probes and metrics are exempt, so a
busy service still reports its health.

A client is its bearer token when it sends one (all the executors of one Spark job share it), else
its address: one greedy job or host takes its share of the instance, never all of it.
"""

from __future__ import annotations

import hashlib
import time

from starlette.types import ASGIApp, Receive, Scope, Send

from service.exceptions import ProblemError
from service.problems import problem_body
from service.settings import LimitSettings

GUARDED_PREFIX = "/v1/"
DEADLINE_KEY = "statestore.deadline"


class RequestGuard:
    """ASGI middleware enforcing the concurrency limit and the request timeout."""

    def __init__(self, app: ASGIApp, limits: LimitSettings) -> None:
        self.app = app
        self.max_in_flight = limits.max_concurrent_requests
        self.max_per_client = limits.max_concurrent_requests_per_client
        self.timeout = limits.request_timeout_ms / 1000
        self.retry_after = str(limits.retry_after_seconds)
        self.in_flight = 0
        # Requests in flight per client; a client leaves the map when its last request ends.
        self.per_client: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(GUARDED_PREFIX):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            await _send_problem(
                scope,
                send,
                ProblemError(
                    429,
                    "too-many-requests",
                    "Too many requests",
                    f"{self.in_flight} requests are in flight, the most this instance takes; retry later",
                    headers={"Retry-After": self.retry_after},
                ),
            )
            return
        client = client_key(scope)
        held = self.per_client.get(client, 0)
        if held >= self.max_per_client:
            await _send_problem(
                scope,
                send,
                ProblemError(
                    429,
                    "client-too-many-requests",
                    "Too many requests from this client",
                    f"this client has {held} requests in flight, the most one client may have"
                    " (limits.max_concurrent_requests_per_client); wait for answers before sending more",
                    headers={"Retry-After": self.retry_after},
                ),
            )
            return
        # Only waits can run long (min_position, a slow body); they honour this deadline, which
        # costs nothing on requests that never wait, unlike a timer per request.
        scope[DEADLINE_KEY] = time.monotonic() + self.timeout
        self.in_flight += 1
        self.per_client[client] = held + 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            remaining = self.per_client[client] - 1
            if remaining:
                self.per_client[client] = remaining
            else:
                del self.per_client[client]


def client_key(scope: Scope) -> str:
    """Who sent the request: a digest of its bearer token, else its address (never the secret)."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            return "token:" + hashlib.sha256(value).hexdigest()[:32]
    peer = scope.get("client")
    return f"address:{peer[0]}" if peer else "address:unknown"


def remaining_seconds(scope: Scope) -> float | None:
    """Seconds left before the request's deadline (``None`` outside guarded routes)."""
    deadline = scope.get(DEADLINE_KEY)
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def request_timeout(limits: LimitSettings) -> ProblemError:
    return ProblemError(
        503,
        "request-timeout",
        "Request timeout",
        f"the request ran past {limits.request_timeout_ms} ms (limits.request_timeout_ms); retry later",
        headers={"Retry-After": str(limits.retry_after_seconds)},
    )


async def _send_problem(scope: Scope, send: Send, problem: ProblemError) -> None:
    raw_path = scope.get("raw_path")
    instance = raw_path.decode("latin-1") if isinstance(raw_path, bytes) else scope["path"]
    body, headers = problem_body(problem, instance)
    await send(
        {
            "type": "http.response.start",
            "status": problem.status,
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
        }
    )
    await send({"type": "http.response.body", "body": body})

"""Bounds on requests in flight: at most ``limits.max_concurrent_requests_per_client`` store
requests from one client (else ``429 client-too-many-requests``), at most
``limits.max_concurrent_requests`` in all (else ``429 too-many-requests``), and none waiting past
``limits.request_timeout_ms`` (else ``503 request-timeout``). Probes and metrics are exempt, so a
busy service still reports its health.

A client is the configured token it sends (all the executors of one Spark job share it), else its
address: one greedy job or host takes its share of the instance, never all of it. Only configured
tokens count, so a client cannot dodge its share by sending a new made-up token with each request.
An answer the client does not read does not hold its slot: see ``service.connections``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from service.auth import Auth
from service.auth_settings import AuthSettings
from service.limit_settings import LimitSettings
from service.problems import problem_body
from service.throttled_log import ThrottledWarnings
from wire.problems import (
    CLIENT_TOO_MANY_REQUESTS,
    REQUEST_TIMEOUT,
    TOO_MANY_REQUESTS,
    ProblemError,
    ProblemType,
)

logger = logging.getLogger(__name__)

GUARDED_PREFIX = "/v1/"
DEADLINE_KEY = "statestore.deadline"
# A client (or the instance) kept at its limit is logged again after this long, not per refusal.
WARNING_INTERVAL_SECONDS = 60.0


class InFlight:
    """Requests in flight, in all and per client: one per app, shared by every path into it."""

    def __init__(self) -> None:
        self.count = 0
        # Requests in flight per client; a client leaves the map when its last request ends.
        self.per_client: dict[str, int] = {}
        # Clients in ``per_client`` (and the instance, under "") logged as full.
        self.warnings = ThrottledWarnings(logger, WARNING_INTERVAL_SECONDS)


class RequestGuard:
    """ASGI middleware enforcing the concurrency limits and the request timeout.

    ``on_refusal`` is told the problem type of every request a limit refuses (for metrics).
    Guards given one ``in_flight`` count their requests together.
    """

    def __init__(
        self,
        app: ASGIApp,
        limits: LimitSettings,
        auth: Auth | AuthSettings | None = None,
        on_refusal: Callable[[str], None] | None = None,
        in_flight: InFlight | None = None,
    ) -> None:
        self.app = app
        self.max_in_flight = limits.max_concurrent_requests
        self.max_per_client = limits.max_concurrent_requests_per_client
        self.timeout = limits.request_timeout_ms / 1000
        self.retry_after = str(limits.retry_after_seconds)
        self.identify = (auth if isinstance(auth, Auth) else Auth(auth or AuthSettings())).client
        self.on_refusal = on_refusal
        self.counts = InFlight() if in_flight is None else in_flight
        self.per_client = self.counts.per_client
        self._warnings = self.counts.warnings

    @property
    def in_flight(self) -> int:
        """Requests in flight now."""
        return self.counts.count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(GUARDED_PREFIX):
            await self.app(scope, receive, send)
            return
        client = self.identify(scope)
        refusal = self.admit(scope, client)
        if refusal is not None:
            await send_problem(scope, send, refusal)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.leave(client)

    def admit(self, scope: Scope, client: str) -> ProblemError | None:
        """Count a request of ``client`` in flight (``leave`` ends it), setting its deadline; or the
        problem refusing it (counted by ``on_refusal``, nothing else changed)."""
        held = self.per_client.get(client, 0)
        # The client's own share is checked first: when both are reached, the client is the cause.
        if held >= self.max_per_client:
            self._warnings.warn(
                client,
                "%s has %d requests in flight, limits.max_concurrent_requests_per_client; it gets 429 %s"
                " until some end (it should send fewer at once)",
                client,
                held,
                CLIENT_TOO_MANY_REQUESTS.slug,
            )
            return self._refusal(
                CLIENT_TOO_MANY_REQUESTS,
                f"this client ({client}) has {held} requests in flight, the most one client may have"
                " (limits.max_concurrent_requests_per_client); wait for answers before sending more,"
                " or send from fewer threads or executors at once",
            )
        counts = self.counts
        if counts.count >= self.max_in_flight:
            self._warnings.warn(
                "",
                "%d requests are in flight, limits.max_concurrent_requests; new ones get 429 %s"
                " (the instance is at capacity: add replicas)",
                counts.count,
                TOO_MANY_REQUESTS.slug,
            )
            return self._refusal(
                TOO_MANY_REQUESTS,
                f"{counts.count} requests are in flight, the most this instance takes"
                " (limits.max_concurrent_requests); retry after Retry-After seconds",
            )
        # Only waits can run long (min_position, a slow body); they honour this deadline, which
        # costs nothing on requests that never wait, unlike a timer per request.
        scope[DEADLINE_KEY] = time.monotonic() + self.timeout
        counts.count += 1
        self.per_client[client] = held + 1
        return None

    def leave(self, client: str) -> None:
        """A request ``admit`` counted has ended."""
        self.counts.count -= 1
        remaining = self.per_client[client] - 1
        if remaining:
            self.per_client[client] = remaining
        else:
            del self.per_client[client]
            self._warnings.forget(client)

    def _refusal(self, refusal: ProblemType, detail: str) -> ProblemError:
        if self.on_refusal is not None:
            self.on_refusal(refusal.slug)
        return refusal(detail, headers={"Retry-After": self.retry_after})


def remaining_seconds(scope: Scope) -> float | None:
    """Seconds left before the request's deadline (``None`` outside guarded routes)."""
    deadline = scope.get(DEADLINE_KEY)
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def request_timeout(limits: LimitSettings) -> ProblemError:
    return REQUEST_TIMEOUT(
        f"the request ran past {limits.request_timeout_ms} ms (limits.request_timeout_ms); retry later",
        headers={"Retry-After": str(limits.retry_after_seconds)},
    )


async def send_problem(scope: Scope, send: Send, problem: ProblemError) -> None:
    """Answer ``problem`` from ASGI middleware (outside the app's exception handlers)."""
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

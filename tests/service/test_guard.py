"""The request guard's accounting: global and per-client slots, taken and always given back."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from typing import Any

import pytest

from service.auth import Auth
from service.auth_settings import AuthSettings
from service.guard import RequestGuard
from service.limit_settings import LimitSettings

GREEDY, POLITE, SECRET = b"greedy-job-token", b"dashboard-token", b"s3cret-token"
TOKENS = AuthSettings(
    mode="tokens",
    tokens=[
        {"name": name, "sha256": hashlib.sha256(token).hexdigest(), "stores": ["*"]}  # type: ignore[list-item]
        for name, token in (("greedy-job", GREEDY), ("dashboard", POLITE), ("ops", SECRET))
    ],
)


def scope(
    path: str = "/v1/stores/s/keys/k", token: bytes | None = None, host: str = "10.0.0.1"
) -> dict[str, Any]:
    headers = [(b"authorization", b"Bearer " + token)] if token else []
    return {"type": "http", "path": path, "headers": headers, "client": (host, 5000)}


class HeldApp:
    """An ASGI app whose requests stay in flight until released (or fail when told to); counts the
    requests that reached it, and keeps every request sent through the guard (``requests``)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0
        self.requests: list[asyncio.Future[None]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.entered += 1
        await self.release.wait()
        if scope["path"].endswith("/boom"):
            raise RuntimeError("handler failed")

    async def finish(self) -> None:
        """Release every request and wait until each has ended."""
        self.release.set()
        await asyncio.gather(*self.requests, return_exceptions=True)


async def send_through(guard: RequestGuard, app: HeldApp, request: dict[str, Any], send: Any) -> bool:
    """Send ``request`` through ``guard``; whether it reached ``app`` (else the guard answered it)."""
    entered = app.entered
    task = asyncio.ensure_future(guard(request, None, send))
    app.requests.append(task)
    while not task.done() and app.entered == entered:
        await asyncio.sleep(0)  # one step of the event loop: no time involved
    return app.entered > entered


async def refusal(
    guard: RequestGuard, request: dict[str, Any], app: HeldApp
) -> tuple[int, dict[str, Any]] | None:
    """The status and problem body the guard answers by itself, or ``None`` if it let the request in."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    if await send_through(guard, app, request, send):
        return None
    return sent[0]["status"], json.loads(sent[1]["body"])


def slug(answer: tuple[int, dict[str, Any]] | None) -> tuple[int, str] | None:
    return None if answer is None else (answer[0], answer[1]["type"].rsplit(":", 1)[-1])


def guard_for(app: HeldApp, refused: list[str] | None = None, **limits: int) -> RequestGuard:
    on_refusal = None if refused is None else refused.append
    return RequestGuard(app, LimitSettings(**limits), TOKENS, on_refusal)  # type: ignore[arg-type]


def test_one_client_gets_its_share_and_others_still_get_in() -> None:
    async def run() -> None:
        app = HeldApp()
        refused: list[str] = []
        guard = guard_for(app, refused, max_concurrent_requests=5, max_concurrent_requests_per_client=2)
        assert await refusal(guard, scope(token=GREEDY), app) is None
        # The same token from another host is the same client (another executor of the job).
        assert await refusal(guard, scope(token=GREEDY, host="10.0.0.9"), app) is None
        answer = await refusal(guard, scope(token=GREEDY), app)
        assert slug(answer) == (429, "client-too-many-requests")
        assert answer is not None
        assert 'token "greedy-job"' in answer[1]["detail"]
        assert "limits.max_concurrent_requests_per_client" in answer[1]["detail"]
        # Another token, and clients without one (known by their address), are let in.
        assert await refusal(guard, scope(token=POLITE), app) is None
        assert await refusal(guard, scope(host="10.0.0.2"), app) is None
        assert await refusal(guard, scope(host="10.0.0.3"), app) is None
        # The instance is full now (5 in flight): the instance's limit answers.
        assert slug(await refusal(guard, scope(host="10.0.0.4"), app)) == (429, "too-many-requests")
        # Probes never count.
        assert await refusal(guard, scope(path="/healthz"), app) is None
        assert guard.per_client == {
            'token "greedy-job"': 2,
            'token "dashboard"': 1,
            "address 10.0.0.2": 1,
            "address 10.0.0.3": 1,
        }
        assert refused == ["client-too-many-requests", "too-many-requests"]
        await app.finish()
        assert (guard.in_flight, guard.per_client) == (0, {})

    asyncio.run(run())


def test_a_client_at_its_share_is_told_so_even_when_the_instance_is_full() -> None:
    async def run() -> None:
        app = HeldApp()
        guard = guard_for(app, max_concurrent_requests=2, max_concurrent_requests_per_client=2)
        for _ in range(2):
            assert await refusal(guard, scope(token=GREEDY), app) is None
        # Both limits are reached; the client's own is the one it can act on.
        assert slug(await refusal(guard, scope(token=GREEDY), app)) == (429, "client-too-many-requests")
        assert slug(await refusal(guard, scope(token=POLITE), app)) == (429, "too-many-requests")
        app.release.set()

    asyncio.run(run())


def test_a_failing_request_gives_its_slots_back() -> None:
    async def run() -> None:
        app = HeldApp()
        guard = guard_for(app, max_concurrent_requests_per_client=1)
        assert await send_through(guard, app, scope(path="/v1/stores/s/boom"), None)
        assert guard.per_client == {"address 10.0.0.1": 1}
        await app.finish()
        assert isinstance(app.requests[0].exception(), RuntimeError)
        assert (guard.in_flight, guard.per_client) == (0, {})

    asyncio.run(run())


def test_only_a_configured_token_names_a_client_and_the_token_is_never_kept() -> None:
    identify = Auth(TOKENS).client
    assert identify(scope(token=SECRET)) == 'token "ops"'
    assert identify(scope(token=b"  " + SECRET + b" ")) == 'token "ops"'
    # A made-up token would otherwise be a new client per request, dodging its share: the address.
    assert identify(scope(token=b"made-up-1", host="10.0.0.7")) == "address 10.0.0.7"
    basic = {"type": "http", "headers": [(b"authorization", b"Basic " + SECRET)]}
    assert identify(basic) == "address unknown"
    # In open mode tokens identify nobody.
    assert Auth(AuthSettings(mode="open")).client(scope(token=SECRET)) == "address 10.0.0.1"
    assert Auth(AuthSettings()).client(scope(token=SECRET, host="::1")) == "address ::1"


def test_a_client_kept_at_its_share_is_logged_once_a_minute_not_per_refusal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> None:
        app = HeldApp()
        guard = guard_for(app, max_concurrent_requests_per_client=1)
        assert await refusal(guard, scope(token=GREEDY), app) is None
        for _ in range(5):
            assert slug(await refusal(guard, scope(token=GREEDY), app)) == (429, "client-too-many-requests")
        assert slug(await refusal(guard, scope(token=GREEDY), app)) == (429, "client-too-many-requests")
        await app.finish()
        # Once its requests are done the client starts afresh, and is logged again if it comes back.
        app.release.clear()
        assert await refusal(guard, scope(token=GREEDY), app) is None
        assert slug(await refusal(guard, scope(token=GREEDY), app)) == (429, "client-too-many-requests")
        app.release.set()

    with caplog.at_level(logging.WARNING, logger="service.guard"):
        asyncio.run(run())
    warnings = [r.getMessage() for r in caplog.records if r.name == "service.guard"]
    assert len(warnings) == 2, warnings
    assert 'token "greedy-job" has 1 requests in flight' in warnings[0]
    assert "client-too-many-requests" in warnings[0]
    assert all(token.decode() not in warnings[0] for token in (GREEDY, SECRET))

"""The request guard's accounting: global and per-client slots, taken and always given back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from service.guard import RequestGuard, client_key
from service.settings import LimitSettings


def scope(
    path: str = "/v1/stores/s/keys/k", token: bytes | None = None, host: str = "10.0.0.1"
) -> dict[str, Any]:
    headers = [(b"authorization", b"Bearer " + token)] if token else []
    return {"type": "http", "path": path, "headers": headers, "client": (host, 5000)}


class HeldApp:
    """An ASGI app whose requests stay in flight until released (or fail when told to)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.entered += 1
        await self.release.wait()
        if scope["path"].endswith("/boom"):
            raise RuntimeError("handler failed")


async def refusal(guard: RequestGuard, request: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The status and problem body the guard answers by itself, or ``None`` if it let the request in."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    task = asyncio.ensure_future(guard(request, None, send))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    if not task.done():
        return None
    return sent[0]["status"], json.loads(sent[1]["body"])


def test_one_client_gets_its_share_and_others_still_get_in() -> None:
    async def run() -> None:
        app = HeldApp()
        limits = LimitSettings(max_concurrent_requests=5, max_concurrent_requests_per_client=2)
        guard = RequestGuard(app, limits)  # type: ignore[arg-type]
        assert await refusal(guard, scope(token=b"greedy")) is None
        assert await refusal(guard, scope(token=b"greedy")) is None
        status, body = await refusal(guard, scope(token=b"greedy")) or (0, {})
        assert status == 429
        assert body["type"].endswith(":client-too-many-requests")
        assert "max_concurrent_requests_per_client" in body["detail"]
        # Another token, and a client without one (known by its address), are let in.
        assert await refusal(guard, scope(token=b"polite")) is None
        assert await refusal(guard, scope(host="10.0.0.2")) is None
        assert await refusal(guard, scope(host="10.0.0.3")) is None
        # The instance is full now (5 in flight): the global limit answers.
        status, body = await refusal(guard, scope(host="10.0.0.4")) or (0, {})
        assert (status, body["type"].split(":")[-1]) == (429, "too-many-requests")
        # Probes never count.
        assert await refusal(guard, scope(path="/healthz")) is None
        assert guard.per_client == {
            client_key(scope(token=b"greedy")): 2,
            client_key(scope(token=b"polite")): 1,
            "address:10.0.0.2": 1,
            "address:10.0.0.3": 1,
        }
        app.release.set()
        await asyncio.sleep(0.01)
        assert (guard.in_flight, guard.per_client) == (0, {})

    asyncio.run(run())


def test_a_failing_request_gives_its_slots_back() -> None:
    async def run() -> None:
        app = HeldApp()
        guard = RequestGuard(app, LimitSettings(max_concurrent_requests_per_client=1))  # type: ignore[arg-type]
        task = asyncio.ensure_future(guard(scope(path="/v1/stores/s/boom"), None, None))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        assert guard.per_client == {"address:10.0.0.1": 1}
        app.release.set()
        await asyncio.gather(task, return_exceptions=True)
        assert (guard.in_flight, guard.per_client) == (0, {})

    asyncio.run(run())


def test_client_key_never_holds_the_token() -> None:
    key = client_key(scope(token=b"s3cret"))
    assert key.startswith("token:")
    assert "s3cret" not in key
    assert key != client_key(scope(token=b"other"))
    # The same token from two hosts is one client (the executors of one job).
    assert key == client_key(scope(token=b"s3cret", host="10.9.9.9"))
    assert client_key({"type": "http", "headers": []}) == "address:unknown"

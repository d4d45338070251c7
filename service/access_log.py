"""The access log (``logging.access_log``): one line per HTTP request, on logger ``statestore.access``.

A line names the client (address, and the configured token's name when it sent one), the request,
the status code, the bytes answered, the duration and, for reads, the position answered::

    127.0.0.1:50112 token "analytics" "GET /v1/stores/products/keys/p1 HTTP/1.1" 200 15 B 0.4 ms at 0:12,1:9

In JSON (``logging.format: json``) the same figures are fields: ``client``, ``token``, ``method``,
``path``, ``code``, ``bytes``, ``duration_ms``, ``position``. Tokens themselves are never logged.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.auth import Auth
from service.openapi_docs import POSITION_HEADER

logger = logging.getLogger("statestore.access")

_POSITION = POSITION_HEADER.lower().encode()


class AccessLogMiddleware:
    """Logs every HTTP request once its answer has been sent (or has failed)."""

    def __init__(self, app: ASGIApp, auth: Auth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        code = 500
        sent = 0
        position: str | None = None

        async def recording_send(message: Message) -> None:
            nonlocal code, sent, position
            if message["type"] == "http.response.start":
                code = message["status"]
                for name, value in message.get("headers") or ():
                    if name.lower() == _POSITION:
                        position = value.decode("latin-1")
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            self._log(scope, code, sent, position, (time.perf_counter() - started) * 1000)

    def _log(self, scope: Scope, code: int, sent: int, position: str | None, duration_ms: float) -> None:
        peer = scope.get("client")
        client = f"{peer[0]}:{peer[1]}" if peer else "unknown"
        known = self.auth.token(scope)
        token = known.name if known is not None else None
        query = scope.get("query_string", b"")
        path = scope.get("path", "") + (f"?{query.decode('latin-1')}" if query else "")
        method = scope.get("method", "")
        logger.info(
            '%s%s "%s %s HTTP/%s" %d %d B %.1f ms%s',
            client,
            f' token "{token}"' if token else "",
            method,
            path,
            scope.get("http_version", "1.1"),
            code,
            sent,
            duration_ms,
            f" at {position}" if position else "",
            extra={
                "client": client,
                "token": token,
                "method": method,
                "path": path,
                "code": code,
                "bytes": sent,
                "duration_ms": round(duration_ms, 3),
                "position": position,
            },
        )

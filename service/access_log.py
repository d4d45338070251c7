"""The access log (``logging.access_log``): one line per HTTP request, on logger ``statestore.access``.

A line names the client (address, and the configured token's name when it sent one), the request,
the status code, the bytes answered, the duration and, for reads, the position answered::

    127.0.0.1:50112 token "analytics" "GET /v1/stores/products/keys/p1 HTTP/1.1" 200 15 B 0.4 ms at 0:12,1:9

In JSON (``logging.format: json``) the same figures are fields: ``client``, ``token``, ``method``,
``path``, ``code``, ``bytes``, ``duration_ms``, ``position``. Tokens themselves are never logged:
the values of query parameters named like a credential (``access_token=``, ``password=``) are
replaced by ``REDACTED``. In a text line, the path (as decoded: ``%0A`` is a newline) and query
have control characters, quotes and backslashes escaped as ``\\xNN``, so a request cannot write a
line or a field of its choosing (JSON escapes them itself).
"""

from __future__ import annotations

import logging
import re
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.auth import Auth
from service.openapi_docs import POSITION_HEADER

logger = logging.getLogger("statestore.access")

_POSITION = POSITION_HEADER.lower().encode()
# What a text line must not carry raw: line breaks and other controls (C0, C1, the Unicode line
# and paragraph separators), and the quote and backslash that delimit and escape its fields.
_UNSAFE = re.compile(r'[\x00-\x1f\x7f-\x9f\u2028\u2029"\\]')
_CREDENTIAL = re.compile(r"token|secret|passw|auth|credential|signature|api[_-]?key", re.I)


def escaped(text: str) -> str:
    """``text`` with every character a text log line must not carry raw written ``\\xNN``."""
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def redacted_query(query: str) -> str:
    """``query`` (as sent) with the value of every parameter named like a credential replaced."""
    if not _CREDENTIAL.search(query):
        return query
    parts = []
    for part in query.split("&"):
        name, equals, _value = part.partition("=")
        parts.append(f"{name}{equals}REDACTED" if equals and _CREDENTIAL.search(name) else part)
    return "&".join(parts)


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
        path = scope.get("path", "") + (f"?{redacted_query(query.decode('latin-1'))}" if query else "")
        method = scope.get("method", "")
        logger.info(
            '%s%s "%s %s HTTP/%s" %d %d B %.1f ms%s',
            client,
            f' token "{token}"' if token else "",
            method,
            escaped(path),
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

"""``GET /v1/stores/{store}/keys/{key}``, the most frequent request, on a short path (and the
batch get, ``POST .../keys:batchGet``, through its route's handler).

The app (``service.app.ServiceApp``) hands a GET whose path the key route matches to
:class:`KeyPath` (behind the access log when it is on), past the framework's layers (telemetry,
its error and exception middleware, body limit, routing): the request guard admits and counts it
(the same guard object as the other routes', so both paths share its limits), the key endpoint
answers it, errors by the same problem handlers (an unexpected one as
``service.problems.AnswerUnexpectedErrors`` does), and it is counted and timed as the metrics
middleware counts the others. The answer is written as two ASGI messages from the stored bytes,
its headers from values prepared once (a position's text is kept while the store stays at it).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from service.guard import RequestGuard, send_problem
from service.metrics import Metrics
from service.openapi_docs import POSITION_HEADER
from service.problems import on_problem, on_store_error, unexpected_error_answer
from service.read_requests import ReadRequests
from service.reads import Reader
from service.values import BadValues, bad_value_problem, not_utf8_detail
from store import Position, StoreError
from wire.problems import KEY_NOT_FOUND, VALUE_NOT_UTF8, ProblemError

_POSITION = POSITION_HEADER.lower().encode("latin-1")
_START = "http.response.start"
_BODY = "http.response.body"


class KeyAnswer:
    """The value of one key, checked, with the position it was read at (bytes for the header)."""

    __slots__ = ("media_type", "position", "value")

    def __init__(self, value: bytes, media_type: bytes, position: bytes) -> None:
        self.value = value
        self.media_type = media_type
        self.position = position


class KeyReader:
    """Reads the key a request names, refusing what the route refuses (with its problem)."""

    def __init__(self, requests: ReadRequests, reader: Reader, bad_values: BadValues) -> None:
        self._requests = requests
        self._reader = reader
        self._bad_values = bad_values
        self._position: tuple[Position | None, bytes] = (None, b"")
        self._media_types: dict[str, bytes] = {}

    def _position_bytes(self, position: Position) -> bytes:
        last, text = self._position
        if position is not last:
            text = str(position).encode("latin-1")
            self._position = (position, text)
        return text

    async def answer(self, request: Request) -> KeyAnswer:
        asked = self._requests.key(request)
        served, key = asked.served, asked.key
        value, position = await self._reader.read_key(served, asked.options, key)
        if value is None:
            raise KEY_NOT_FOUND(
                f'store "{served.name}" has no such key',
                extras={"store": served.name},
                headers={POSITION_HEADER: str(position)},
            )
        value_format = served.value_format
        if value_format == "json" and not self._bad_values.is_json(served.name, key, value):
            problem, detail = bad_value_problem(served.name, value)
            raise problem(detail, extras={"store": served.name}, headers={POSITION_HEADER: str(position)})
        if value_format == "string" and not self._bad_values.is_utf8(served.name, key, value):
            raise VALUE_NOT_UTF8(
                not_utf8_detail(served.name),
                extras={"store": served.name},
                headers={POSITION_HEADER: str(position)},
            )
        if asked.projection is not None:
            value = asked.projection.stored(value)
        media_type = self._media_types.get(served.media_type)
        if media_type is None:
            media_type = self._media_types[served.media_type] = served.media_type.encode("latin-1")
        return KeyAnswer(value, media_type, self._position_bytes(position))

    async def response(self, request: Request) -> Response:
        """The answer as a framework response (the route's own handler: HEAD, the OpenAPI document)."""
        answer = await self.answer(request)
        return Response(
            answer.value,
            media_type=answer.media_type.decode("latin-1"),
            headers={POSITION_HEADER: answer.position.decode("latin-1")},
        )


ErrorAnswer = Callable[[Request, Exception], Awaitable[Response]]


async def error_answer(request: Request, exc: Exception) -> Response:
    """The answer to ``exc``, raised answering ``request`` (called while it is handled): its problem,
    as the app's problem handlers give it; an unexpected one as ``AnswerUnexpectedErrors`` does,
    without a layer (``500 internal-error``, logged with its traceback)."""
    if isinstance(exc, ProblemError):
        return await on_problem(request, exc)
    if isinstance(exc, StoreError):
        return await on_store_error(request, exc)
    return unexpected_error_answer(request.scope)


class KeyEndpoint:
    """Answers a key GET whose scope holds its ``path_params``, errors as problems (an unexpected
    one as ``500 internal-error``, logged, the connection kept)."""

    def __init__(self, keys: KeyReader) -> None:
        self._keys = keys

    async def respond(self, scope: Scope, receive: Receive, send: Send) -> int:
        """Answer the request; the status answered."""
        request = Request(scope, receive)
        try:
            answer = await self._keys.answer(request)
        except Exception as exc:  # nothing was sent yet
            response = await error_answer(request, exc)
        else:
            value = answer.value
            await send(
                {
                    "type": _START,
                    "status": 200,
                    "headers": [
                        (_POSITION, answer.position),
                        (b"content-length", b"%d" % len(value)),
                        (b"content-type", answer.media_type),
                    ],
                }
            )
            await send({"type": _BODY, "body": value})
            return 200
        await response(scope, receive, send)
        return response.status_code


class RouteEndpoint:
    """Answers a request with a route's handler (one taking the request), errors as problems as
    :class:`KeyEndpoint` does: the batch get's, on the short path."""

    def __init__(self, handler: Callable[[Request], Awaitable[Response]]) -> None:
        self._handler = handler

    async def respond(self, scope: Scope, receive: Receive, send: Send) -> int:
        """Answer the request; the status answered."""
        request = Request(scope, receive)
        try:
            response = await self._handler(request)
        except Exception as exc:  # nothing was sent yet
            response = await error_answer(request, exc)
        await response(scope, receive, send)
        return response.status_code


class KeyPath:
    """ASGI app of the short path: what ``MetricsMiddleware(RequestGuard(endpoint))`` does (the
    guard's admission, deadline and counts; the request counted and timed under its route's
    template), in one call rather than a layer, and a ``send`` wrapper, per concern."""

    def __init__(
        self,
        endpoint: KeyEndpoint | RouteEndpoint,
        guard: RequestGuard,
        metrics: Metrics,
        template: str,
        method: str = "GET",
    ) -> None:
        self._endpoint = endpoint
        self._guard = guard
        self._metrics = metrics
        self._template = template
        self._method = method

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        status = 500
        try:
            guard = self._guard
            client = guard.identify(scope)
            refusal = guard.admit(scope, client)
            if refusal is not None:
                status = refusal.status
                await send_problem(scope, send, refusal)
                return
            try:
                status = await self._endpoint.respond(scope, receive, send)
            finally:
                guard.leave(client)
        finally:
            self._metrics.observe(self._method, self._template, str(status), time.perf_counter() - started)

"""RFC 9457 problem details: the one shape every error answer takes (see docs/reference/http-api.md).

Besides :class:`~service.exceptions.ProblemError`, the framework's own answers (unknown route,
wrong method, query or body validation) and the store's errors (a stopped store, an index being
built, history not kept or expired) are converted here, by exception handlers, so read paths
need no ``try`` of their own and no answer is ever HTML or a bare ``{"detail": ...}``.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from store import (
    HistoryExpiredError,
    HistoryNotKeptError,
    IndexNotReadyError,
    Position,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreState,
    TimeExpiredError,
    UnknownIndexError,
)
from wire.problems import (
    HISTORY_EXPIRED,
    HISTORY_NOT_KEPT,
    INDEX_NOT_READY,
    INTERNAL_ERROR,
    INVALID_PARAMETER,
    MALFORMED_REQUEST,
    METHOD_NOT_ALLOWED,
    ROUTE_NOT_FOUND,
    STORE_CORRUPT,
    STORE_NOT_READY,
    UNKNOWN_INDEX,
    ProblemError,
)

logger = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"


def problem_body(problem: ProblemError, instance: str) -> tuple[bytes, dict[str, str]]:
    """The problem+json body for ``problem`` about the request path ``instance``, and its headers."""
    body: dict[str, Any] = {
        "type": problem.problem.uri,
        "title": problem.title,
        "status": problem.status,
        "detail": problem.detail,
        "instance": instance,
    }
    body.update(problem.extras)
    encoded = orjson.dumps(body)
    headers = {
        "content-type": PROBLEM_MEDIA_TYPE,
        "content-length": str(len(encoded)),
        **problem.headers,
    }
    return encoded, headers


def problem_response(problem: ProblemError, instance: str) -> Response:
    """The problem+json answer for ``problem`` about the request path ``instance``."""
    body, headers = problem_body(problem, instance)
    return Response(body, status_code=problem.status, headers=headers)


def _validation_errors(errors: Any) -> list[dict[str, Any]]:
    """Framework validation errors, reduced to JSON-safe ``{"loc", "msg"}`` members."""
    return [
        {"loc": [str(part) for part in error.get("loc", ())], "msg": str(error.get("msg", ""))}
        for error in errors
        if isinstance(error, Mapping)
    ]


def _instance(request: Request) -> str:
    """The request path as sent (still percent-encoded), so keys that are not UTF-8 survive."""
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path


def store_not_ready(store: str, state: StoreState, retry_after: int) -> ProblemError:
    """``503 store-not-ready``: the store cannot answer reads in ``state``."""
    return STORE_NOT_READY(
        f'store "{store}" is {state.value}; it serves once READY (GET /v1/stores/{store} shows progress)',
        extras={"store": store, "state": state.value},
        headers={"Retry-After": str(retry_after)},
    )


def store_corrupt(store: str, retry_after: int) -> ProblemError:
    """``503 store-corrupt``: a read of the store's files failed (corruption, I/O error), so its copy
    answers nothing until a copy rebuilt from the topic replaces it. The store logs it once."""
    return STORE_CORRUPT(
        f'store "{store}" found corruption in its files and answers no read from them; it is rebuilding'
        f" from its topic and answers again once rebuilt (GET /v1/stores/{store} shows progress)",
        extras={"store": store},
        headers={"Retry-After": str(retry_after)},
    )


def index_not_ready(store: str, index: str, retry_after: int) -> ProblemError:
    """``503 index-not-ready``: the index is being built."""
    return INDEX_NOT_READY(
        f'index "{index}" of store "{store}" is being built; retry shortly'
        f" (GET /v1/stores/{store} shows its progress)",
        extras={"store": store, "index": index},
        headers={"Retry-After": str(retry_after)},
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _Asked:
    """What a request that met a store error asked for (from its path), and the app it asked."""

    request: Request

    @property
    def store(self) -> str:
        return str(self.request.path_params.get("store", ""))

    @property
    def index(self) -> str:
        return str(self.request.path_params.get("index", ""))

    @property
    def retry_after(self) -> int:
        return int(self.request.app.state.settings.limits.retry_after_seconds)

    def index_building(self) -> bool:
        """Whether the store declares the index and is building it (some views know only ready ones)."""
        registry = self.request.app.state.registry
        served = registry.get(self.store)
        status = registry.status_of(served) if served is not None else None
        index = status.indexes.get(self.index) if status is not None else None
        return index is not None and index.state != "ready"


def _closed(exc: StoreError, asked: _Asked) -> ProblemError:
    return store_not_ready(asked.store, StoreState.STOPPED, asked.retry_after)


def _corrupt(exc: StoreError, asked: _Asked) -> ProblemError:
    # Not logged here: the store logs a corrupt copy once, not once per request.
    return store_corrupt(asked.store, asked.retry_after)


def _history_not_kept(exc: StoreError, asked: _Asked) -> ProblemError:
    return HISTORY_NOT_KEPT(
        f'store "{asked.store}" keeps no history, so it cannot answer as_of a position;'
        " read without as_of, or configure history on the store",
        extras={"store": asked.store},
    )


def _history_expired(exc: StoreError, asked: _Asked) -> ProblemError:
    assert isinstance(exc, HistoryExpiredError)
    if isinstance(exc, TimeExpiredError):
        return HISTORY_EXPIRED(
            str(exc),
            extras={
                "store": asked.store,
                "as_of_time": exc.as_of,
                "time_floor": exc.floor,
                **({} if exc.key is None else {"key": base64.b64encode(exc.key).decode()}),
            },
        )
    floor = exc.floor if isinstance(exc.floor, Position) else None
    return HISTORY_EXPIRED(
        f'store "{asked.store}" answers as_of positions from {floor or "(none yet)"} on;'
        f" {exc.as_of or '(empty)'} is older. Read at a newer position",
        extras={
            "store": asked.store,
            "as_of": str(exc.as_of),
            "floor": None if floor is None else str(floor),
        },
    )


def _index_not_ready(exc: StoreError, asked: _Asked) -> ProblemError:
    return index_not_ready(asked.store, asked.index, asked.retry_after)


def _unknown_index(exc: StoreError, asked: _Asked) -> ProblemError:
    if asked.index_building():
        return index_not_ready(asked.store, asked.index, asked.retry_after)
    return UNKNOWN_INDEX(
        f'store "{asked.store}" has no index "{asked.index}";'
        f" its indexes are listed by GET /v1/stores/{asked.store}",
        extras={"store": asked.store, "index": asked.index},
    )


STORE_PROBLEMS: dict[type[StoreError], Callable[[StoreError, _Asked], ProblemError]] = {
    StoreClosedError: _closed,
    StoreCorruptError: _corrupt,
    HistoryNotKeptError: _history_not_kept,
    HistoryExpiredError: _history_expired,
    IndexNotReadyError: _index_not_ready,
    UnknownIndexError: _unknown_index,
}
"""How each store error a read can meet is answered; any other is an ``internal-error``."""


async def on_problem(request: Request, exc: Exception) -> Response:
    """The answer to a :class:`ProblemError` raised while answering ``request``."""
    assert isinstance(exc, ProblemError)
    return problem_response(exc, _instance(request))


async def _on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        problem = ROUTE_NOT_FOUND(f"no route {request.url.path}; see docs/reference/http-api.md")
    elif exc.status_code == 405:
        problem = METHOD_NOT_ALLOWED(
            f"{request.method} is not allowed on {request.url.path}; the API is read-only",
            headers=dict(exc.headers or {}),
        )
    elif exc.status_code < 500:
        problem = MALFORMED_REQUEST(str(exc.detail), extras={"errors": [{"msg": str(exc.detail)}]})
    else:
        return await _on_unexpected(request, exc)
    return problem_response(problem, _instance(request))


async def _on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = _validation_errors(exc.errors())
    in_body = any(error["loc"][:1] == ["body"] for error in errors)
    if in_body:
        problem = MALFORMED_REQUEST("the request body has the wrong shape", extras={"errors": errors})
    else:
        summary = "; ".join(f"{'.'.join(e['loc'][1:]) or e['loc']}: {e['msg']}" for e in errors)
        problem = INVALID_PARAMETER(summary or "a parameter is invalid", extras={"errors": errors})
    return problem_response(problem, _instance(request))


def _internal_error() -> ProblemError:
    return INTERNAL_ERROR("the service failed unexpectedly; the error is in its log")


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("unexpected error answering %s %s", request.method, request.url.path)
    return problem_response(_internal_error(), _instance(request))


class AnswerUnexpectedErrors:
    """ASGI middleware answering an error that no handler knows with ``500 internal-error``, and
    keeping the connection: the framework's last-resort handler answers it too, but then hands
    the error on to the server, which closes the connection under the client."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_noting_start(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_noting_start)
        except Exception:
            if started:  # part of an answer is out: only a closed connection tells the client
                raise
            answer = unexpected_error_answer(scope)
            await answer(scope, receive, send)


def unexpected_error_answer(scope: Scope) -> Response:
    """Log the error being handled (with its traceback); the ``500 internal-error`` answering it."""
    logger.exception("unexpected error answering %s %s", scope.get("method"), scope.get("path"))
    raw_path = scope.get("raw_path")
    instance = raw_path.decode("latin-1") if isinstance(raw_path, bytes) else str(scope["path"])
    return problem_response(_internal_error(), instance)


async def on_store_error(request: Request, exc: Exception) -> Response:
    """The answer to a store error met while answering ``request`` (``internal-error`` if unknown)."""
    assert isinstance(exc, StoreError)
    convert = next((c for t, c in STORE_PROBLEMS.items() if isinstance(exc, t)), None)
    if convert is None:
        return await _on_unexpected(request, exc)
    return problem_response(convert(exc, _Asked(request)), _instance(request))


def install_problem_handlers(app: FastAPI) -> None:
    """Route every error the app can raise to a problem+json answer."""
    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(StarletteHTTPException, _on_http_exception)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StoreError, on_store_error)
    app.add_exception_handler(Exception, _on_unexpected)  # errors of the outer middleware
    app.add_middleware(AnswerUnexpectedErrors)  # added first: innermost, inside metrics and guard


def problem_schema() -> dict[str, Any]:
    """The OpenAPI schema of a problem answer."""
    return {
        "type": "object",
        "required": ["type", "title", "status", "detail", "instance"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "instance": {"type": "string"},
        },
        "additionalProperties": True,
    }

"""RFC 9457 problem details: the one shape every error answer takes (see docs/http-api.md).

Besides :class:`~service.exceptions.ProblemError`, the framework's own answers (unknown route,
wrong method, query or body validation) are converted here, so no answer is ever HTML or a bare
``{"detail": ...}``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from service.exceptions import ProblemError
from store import StoreCorruptError

logger = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:statestore:problem:"


def problem_body(problem: ProblemError, instance: str) -> tuple[bytes, dict[str, str]]:
    """The problem+json body for ``problem`` about the request path ``instance``, and its headers."""
    body: dict[str, Any] = {
        "type": TYPE_PREFIX + problem.slug,
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


async def _on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProblemError)
    return problem_response(exc, _instance(request))


async def _on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        problem = ProblemError(
            404, "route-not-found", "Route not found", f"no route {request.url.path}; see docs/http-api.md"
        )
    elif exc.status_code == 405:
        problem = ProblemError(
            405,
            "method-not-allowed",
            "Method not allowed",
            f"{request.method} is not allowed on {request.url.path}; the API is read-only",
            headers=dict(exc.headers or {}),
        )
    else:
        problem = ProblemError(exc.status_code, "http-error", "HTTP error", str(exc.detail))
    return problem_response(problem, _instance(request))


async def _on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = _validation_errors(exc.errors())
    in_body = any(error["loc"][:1] == ["body"] for error in errors)
    if in_body:
        problem = ProblemError(
            400,
            "malformed-request",
            "Malformed request",
            "the request body has the wrong shape",
            extras={"errors": errors},
        )
    else:
        summary = "; ".join(f"{'.'.join(e['loc'][1:]) or e['loc']}: {e['msg']}" for e in errors)
        problem = ProblemError(
            422,
            "invalid-parameter",
            "Invalid parameter",
            summary or "a parameter is invalid",
            extras={"errors": errors},
        )
    return problem_response(problem, _instance(request))


def store_corrupt(store: str, retry_after: int) -> ProblemError:
    """503 ``store-corrupt``: a read of the store's files failed (corruption, I/O error), so its copy
    answers nothing until a copy rebuilt from the topic replaces it. The store logs it once."""
    return ProblemError(
        503,
        "store-corrupt",
        "Store corrupt",
        f'store "{store}" found corruption in its files and answers no read from them; it is rebuilding'
        f" from its topic and answers again once rebuilt (GET /v1/stores/{store} shows progress)",
        extras={"store": store},
        headers={"Retry-After": str(retry_after)},
    )


async def _on_store_corrupt(request: Request, exc: Exception) -> Response:
    # Not logged here: the store logs a corrupt copy once, not once per request.
    retry_after = request.app.state.settings.limits.retry_after_seconds
    problem = store_corrupt(str(request.path_params.get("store", "")), retry_after)
    return problem_response(problem, _instance(request))


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("unexpected error answering %s %s", request.method, request.url.path)
    problem = ProblemError(
        500, "internal-error", "Internal error", "the service failed unexpectedly; the error is in its log"
    )
    return problem_response(problem, _instance(request))


def install_problem_handlers(app: FastAPI) -> None:
    """Route every error the app can raise to a problem+json answer."""
    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(StarletteHTTPException, _on_http_exception)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StoreCorruptError, _on_store_corrupt)
    app.add_exception_handler(Exception, _on_unexpected)


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

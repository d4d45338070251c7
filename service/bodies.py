"""Request bodies and batch sizes: reading a body within limits, and the problems of bad ones."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import ClientDisconnect, Request

from service import openapi_docs as docs
from service.guard import remaining_seconds, request_timeout
from service.limit_settings import LimitSettings
from wire.problems import (
    BATCH_TOO_LARGE,
    BODY_TOO_LARGE,
    KEY_TOO_LARGE,
    MALFORMED_REQUEST,
    UNSUPPORTED_MEDIA_TYPE,
    ProblemError,
    ProblemType,
)

JSON = "application/json"


def malformed(detail: str, errors: list[dict[str, Any]] | None = None) -> ProblemError:
    """``400 malformed-request``: the body is not valid JSON / Arrow or has the wrong shape."""
    return MALFORMED_REQUEST(detail, extras={"errors": errors or [{"msg": detail}]})


def too_large(problem: ProblemType, detail: str, limit: int) -> ProblemError:
    """A ``413`` problem naming the ``limit`` that was passed."""
    return problem(detail, extras={"limit": limit})


def check_key_length(what: str, key: bytes, max_key_bytes: int) -> None:
    """``413 key-too-large`` when ``key`` (a key, prefix, cursor or indexed value) is too long."""
    if len(key) > max_key_bytes:
        raise too_large(KEY_TOO_LARGE, f"{what} has {len(key)} bytes", max_key_bytes)


def batch_media_type(request: Request, what: str) -> str:
    """The batch body's media type (JSON or Arrow); ``415 unsupported-media-type`` otherwise."""
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type not in (JSON, docs.ARROW_MEDIA_TYPE):
        raise UNSUPPORTED_MEDIA_TYPE(
            f"send the {what} as {JSON} or {docs.ARROW_MEDIA_TYPE}, not {media_type or '(none)'}",
        )
    return media_type


async def read_body(request: Request, limits: LimitSettings) -> bytes:
    """The whole request body, refused above ``limits.max_body_bytes`` and cut by the request deadline."""
    try:
        # asyncio's own timeout (the service runs on asyncio, as its position waits do): one timer,
        # where a cancel scope costs a batch get a third of its work per request.
        async with asyncio.timeout(remaining_seconds(request.scope)):
            return await _read_body(request, limits.max_body_bytes)
    except TimeoutError as exc:
        raise request_timeout(limits) from exc


async def _read_body(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _body_too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise _body_too_large(max_bytes)
            chunks.append(chunk)
    except ClientDisconnect as exc:
        raise malformed("the client disconnected before sending the whole body") from exc
    return b"".join(chunks)


def _body_too_large(max_bytes: int) -> ProblemError:
    return too_large(BODY_TOO_LARGE, f"the request body is above {max_bytes} bytes", max_bytes)


def check_batch(count: int, longest: int, max_keys: int, max_key_bytes: int, what: str = "keys") -> None:
    """``413 batch-too-large`` above ``max_keys`` items, ``413 key-too-large`` for an item too long."""
    if count > max_keys:
        raise too_large(BATCH_TOO_LARGE, f"{count} {what} asked; split the batch", max_keys)
    if longest > max_key_bytes:
        raise too_large(KEY_TOO_LARGE, f"one of the {what} has {longest} bytes", max_key_bytes)

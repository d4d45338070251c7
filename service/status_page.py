"""``GET /``: the status page, server-rendered HTML that refreshes itself, with no external asset.

It shows what ``GET /v1/stores`` answers, under the same rules: with ``auth.mode: tokens`` it
needs a bearer token and shows only the stores that token may read. Without a valid token the
answer is ``401``: a page offering to enter a token when the client asks for HTML (a browser),
else the usual ``unauthorized`` problem. A token entered there is kept in the browser tab
(``sessionStorage``) and sent as ``Authorization: Bearer`` by the page's own script, which
refreshes the page in place every few seconds (a ``<meta>`` refresh when scripts are off).

The stylesheet and the script are inlined from package data and allowed by their hashes in the
``Content-Security-Policy``, which also forbids loading anything from elsewhere.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
from pathlib import Path

import anyio
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import HTMLResponse

from service.auth import Auth
from service.registry import StoreRegistry
from service.routes import store_info
from service.status_html import PageContext, render_status_page, render_token_page
from wire.problems import ProblemError

REFRESH_SECONDS = 2


ASSETS = Path(__file__).resolve().parent / "assets"


def _asset(name: str) -> str:
    return (ASSETS / name).read_text(encoding="utf-8")


def _source_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def content_security_policy(css: str, script: str) -> str:
    """Only the page's own inline style and script run; it fetches only from this service."""
    return "; ".join(
        (
            "default-src 'none'",
            f"style-src {_source_hash(css)}",
            f"script-src {_source_hash(script)}",
            "connect-src 'self'",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def add_status_page(app: FastAPI, registry: StoreRegistry, auth: Auth) -> None:
    """Serve the status page at ``/``, showing each caller the stores ``auth`` lets it read."""
    css, script = _asset("status.css"), _asset("status.js")
    headers = {
        "Content-Security-Policy": content_security_policy(css, script),
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }

    def context(request: Request) -> PageContext:
        root = request.scope.get("root_path", "")
        return PageContext(
            css=css,
            script=script,
            refresh_seconds=REFRESH_SECONDS,
            now=datetime.datetime.now(datetime.UTC),
            root_path=root,
            base_url=str(request.base_url).rstrip("/"),
            tokens=not auth.open,
        )

    @app.get(
        "/",
        response_class=HTMLResponse,
        summary="The status page (HTML): every store's state, restore progress, lag and last error",
        responses={200: {"content": {"text/html": {}}, "description": "the status page"}},
    )
    async def status_page(request: Request) -> HTMLResponse:
        try:
            allowed = auth.allowed_stores(request)
        except ProblemError as problem:
            if problem.status != 401 or not _wants_html(request):
                raise
            rejected = "authorization" in request.headers
            page = render_token_page(context(request), rejected=rejected)
            return HTMLResponse(page, status_code=401, headers={**headers, **problem.headers})
        shown = [served for served in registry.all() if allowed is None or served.name in allowed]

        def infos() -> list[dict[str, object]]:
            return [store_info(registry, served) for served in shown]

        # A store's status may touch its files: off the event loop, as /metrics does.
        page = render_status_page(await anyio.to_thread.run_sync(infos), context(request))
        return HTMLResponse(page, headers=headers)

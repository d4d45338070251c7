"""Swagger UI at ``/docs``, its assets served from the installed package: no CDN, so it works air-gapped.

The assets (Swagger UI's bundle, stylesheet and an icon) come from the ``fastapi-offline``
distribution, which ships them as package data.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

DOCS_PATH = "/docs"
ASSETS_PACKAGE = "fastapi_offline"

# Served name -> (file in the package's static folder, media type).
_ASSETS = {
    "swagger-ui-bundle.js": ("swagger-ui-bundle.js", "text/javascript"),
    "swagger-ui.css": ("swagger-ui.css", "text/css"),
    "favicon.png": ("favicon.png", "image/png"),
}
_CACHE = "public, max-age=86400"


def asset_directory() -> Path:
    """The folder the installed assets are read from."""
    return Path(str(resources.files(ASSETS_PACKAGE) / "static"))


@functools.cache
def _asset_bytes() -> dict[str, bytes]:
    """Every asset's content, read once per process (about 1.7 MB)."""
    directory = asset_directory()
    missing = [file for file, _ in _ASSETS.values() if not (directory / file).is_file()]
    if missing:
        raise RuntimeError(f"Swagger UI assets {missing} are missing from {directory}; reinstall statestore")
    return {name: (directory / file).read_bytes() for name, (file, _) in _ASSETS.items()}


def add_api_docs(app: FastAPI) -> None:
    """Serve Swagger UI for ``app``'s OpenAPI document at ``/docs`` (``app`` has ``docs_url=None``)."""
    assets = _asset_bytes()

    @app.get(DOCS_PATH, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} API",
            swagger_js_url=f"{root}{DOCS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_PATH}/favicon.png",
            # Nothing may be fetched from elsewhere: no online validator badge.
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get(DOCS_PATH + "/{asset}", include_in_schema=False)
    async def swagger_asset(asset: str) -> Response:
        if asset not in assets:
            raise HTTPException(404)  # answered as the usual route-not-found problem
        _, media_type = _ASSETS[asset]
        return Response(assets[asset], media_type=media_type, headers={"Cache-Control": _CACHE})

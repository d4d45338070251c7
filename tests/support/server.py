"""Run an ASGI app under a real uvicorn server on a free loopback port, in a background thread."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from service.connections import server_options
from service.local.broker import free_port
from service.settings import Settings


@contextlib.contextmanager
def serve_app(app: Any, *, host: str = "127.0.0.1", port: int | None = None, **config: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn (uvloop + httptools) and yield its base URL; stop on exit.

    An app with settings (``create_app``'s) gets the server options ``statestore serve`` uses.
    """
    port = port or free_port(host)
    settings = getattr(getattr(app, "state", None), "settings", None)
    if isinstance(settings, Settings):
        config = {**server_options(settings), **config}
    config.setdefault("http", "httptools")
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level="warning", loop="uvloop", **config)
    )
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on {host}:{port}")
        time.sleep(0.01)
    scheme = "https" if config.get("ssl_certfile") else "http"
    try:
        yield f"{scheme}://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)

"""Fixtures for the client tests: services on real uvicorn servers, and one shared SparkSession."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from service.app import create_app
from service.settings import Settings
from store import InMemoryStore, ServableStore
from tests.support.server import serve_app

ServeStores = Callable[..., str]


def json_records(rows: Mapping[str, Any], partition: int = 0) -> list[tuple[int, int, bytes, bytes | None]]:
    """``(partition, offset, key, value)`` records for an ``InMemoryStore`` from a dict of JSON values."""
    return [
        (partition, offset, key.encode(), None if value is None else json.dumps(value).encode())
        for offset, (key, value) in enumerate(rows.items())
    ]


def make_settings(formats: Mapping[str, str], **overrides: Any) -> Settings:
    stores = [{"name": name, "topic": name, "value_format": fmt} for name, fmt in formats.items()]
    return Settings(stores=stores, **overrides)


@pytest.fixture
def serve_stores() -> Iterator[ServeStores]:
    """Factory: serve ``{name: (store, value_format)}`` on a real uvicorn server; returns the base URL."""
    with contextlib.ExitStack() as stack:

        def serve(
            stores: Mapping[str, tuple[ServableStore, str]], port: int | None = None, **overrides: Any
        ) -> str:
            settings = make_settings({name: fmt for name, (_, fmt) in stores.items()}, **overrides)
            app = create_app(settings, stores={name: store for name, (store, _) in stores.items()})
            return stack.enter_context(serve_app(app, port=port))

        yield serve


class BackgroundServer:
    """A service started later on a fixed port, from another thread (for restart tests)."""

    def __init__(self, app: Any, port: int, delay: float) -> None:
        self._stop = threading.Event()
        self.started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(app, port, delay), daemon=True)
        self._thread.start()

    def _run(self, app: Any, port: int, delay: float) -> None:
        if self._stop.wait(delay):
            return
        with serve_app(app, port=port):
            self.started.set()
            self._stop.wait()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


@pytest.fixture
def products_store() -> InMemoryStore:
    store = InMemoryStore("products")
    rows = {f"p{i:03d}": {"name": f"product {i}", "price": i * 1.5} for i in range(250)}
    store.apply(json_records(rows))
    return store

"""Fixtures for the client tests: services on real uvicorn servers, and one shared SparkSession."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from clients import StatestoreClient
from clients.store_files import DIR_VARIABLE
from service.app import create_app
from service.settings import Settings
from store import InMemoryStore, ServableStore
from tests.support.server import serve_app
from tests.support.spark_session import classic_session

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


@pytest.fixture(autouse=True)
def private_store_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stores read whole are shared through files of this test's own directory (in this process:
    Spark's Python workers keep the environment their session started with)."""
    directory = tmp_path / "store-files"
    monkeypatch.setenv(DIR_VARIABLE, str(directory))
    return directory


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


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2,4] SparkSession for every Spark test (see :func:`classic_session`)."""
    session = classic_session()
    yield session
    session.stop()


def wait_until_ready(url: str, timeout: float = 60.0) -> None:
    """Block until every store of the service at ``url`` is READY."""
    deadline = time.monotonic() + timeout
    with StatestoreClient(url, deadline=timeout) as client:
        while time.monotonic() < deadline:
            if all(info.state == "READY" for info in client.stores()):
                return
            time.sleep(0.05)
    raise AssertionError(f"the service at {url} was not ready within {timeout} s")


@contextlib.contextmanager
def real_service(
    bootstrap_servers: str,
    state_dir: Path,
    stores: Mapping[str, tuple[str, str]],
    extra: Mapping[str, Mapping[str, Any]] | None = None,
) -> Iterator[str]:
    """The real service (real ``store.Store`` per store, fed by the broker) on uvicorn; yields its URL.

    ``stores`` maps store name to ``(topic, value_format)``; ``extra`` adds store settings by name
    (``{"positions": {"indexes": [...], "history": {...}}}``).
    """
    extra = extra or {}
    settings = Settings(
        kafka={"bootstrap_servers": bootstrap_servers},
        state_dir=state_dir,
        stores=[
            {"name": name, "topic": topic, "value_format": fmt, **extra.get(name, {})}
            for name, (topic, fmt) in stores.items()
        ],
    )
    with serve_app(create_app(settings)) as url:
        wait_until_ready(url)
        yield url

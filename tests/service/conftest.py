"""Factories for the HTTP tests: a real uvicorn server around the app, fed by in-memory stores."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import httpx
import pytest

from service.app import create_app
from service.settings import Settings
from store import InMemoryStore, RestoreProgress, ServableStore, StoreState, StoreStatus
from tests.support.server import serve_app


@dataclasses.dataclass
class Service:
    """A running service: its base URL, a client bound to it, and the stores it serves."""

    url: str
    client: httpx.Client
    stores: Mapping[str, ServableStore]
    settings: Settings


class RestoringStore(InMemoryStore):
    """An in-memory store whose status shows it restoring with ``progress``."""

    def __init__(self, name: str, progress: RestoreProgress) -> None:
        super().__init__(name, state=StoreState.RESTORING)
        self.progress = progress

    def status(self) -> StoreStatus:
        return dataclasses.replace(super().status(), restore=self.progress)


class WatchedStore(InMemoryStore):
    """An in-memory store that tells when the service starts listening to it, which it does when a
    read first waits for a position the store has not reached."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.listened = threading.Event()

    def add_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        remove = super().add_listener(listener)
        self.listened.set()
        return remove


def apply_once_waited(
    store: WatchedStore, records: Sequence[tuple[int, int, bytes, bytes | None]]
) -> threading.Thread:
    """Start a thread that applies ``records`` once a read waits for the store (the read was
    answered after the write because it waited, whatever the speed of the machine); join it."""

    def apply() -> None:
        if store.listened.wait(60):  # else the read, never waiting, fails the test by itself
            store.apply(records)

    thread = threading.Thread(target=apply, name="apply-once-waited")
    thread.start()
    return thread


def product_store() -> InMemoryStore:
    """A READY json store with a few products over three partitions, and one non-UTF-8 key."""
    store = InMemoryStore("products")
    store.apply(
        [
            (0, 0, b"p1", b'{"name":"Pen"}'),
            (1, 0, b"p2", b'{"name":"Ink"}'),
            (2, 0, b"a/b", b'{"name":"Slash"}'),
            (2, 1, b"\xff\x00", b'{"name":"Binary"}'),
        ]
    )
    return store


DEFAULT_STORES = [
    {"name": "products", "topic": "products", "value_format": "json"},
    {"name": "notes", "topic": "notes-topic", "value_format": "string"},
    {"name": "blobs", "topic": "blobs", "value_format": "bytes"},
]


@pytest.fixture
def make_service() -> Iterator[Callable[..., Service]]:
    """Factory: serve ``stores`` (name -> store) with a real uvicorn, under settings ``overrides``;
    ``configs`` are store settings added to the default ones (indexes, history)."""
    with contextlib.ExitStack() as stack:

        def make(
            stores: Mapping[str, ServableStore] | None = None,
            configs: list[dict[str, Any]] | None = None,
            **overrides: Any,
        ) -> Service:
            if stores is None:
                notes = InMemoryStore("notes", topic="notes-topic")
                notes.apply([(0, 0, b"n1", "héllo".encode())])
                blobs = InMemoryStore("blobs")
                blobs.apply([(0, 0, b"b1", b"\x00\x01\xfe")])
                stores = {"products": product_store(), "notes": notes, "blobs": blobs}
            fields: dict[str, Any] = {"stores": [*DEFAULT_STORES, *(configs or [])], **overrides}
            settings = Settings(**fields)
            url = stack.enter_context(serve_app(create_app(settings, stores)))
            client = stack.enter_context(httpx.Client(base_url=url, timeout=30))
            return Service(url=url, client=client, stores=stores, settings=settings)

        yield make


@pytest.fixture
def service(make_service: Callable[..., Service]) -> Service:
    """The default service: products (json), notes (string) and blobs (bytes), all READY."""
    return make_service()


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    """The answer is an RFC 9457 problem of type ``slug``; returns its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:statestore:problem:{slug}"
    assert body["status"] == status
    assert body["title"]
    assert body["detail"]
    assert body["instance"].startswith("/")
    return body

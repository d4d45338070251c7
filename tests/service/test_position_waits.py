"""Position waits end at their own timeout, and one client's hopeless waits do not delay another's."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
from collections.abc import Callable, Iterator

import httpx

from store import InMemoryStore, Position, ReadOnlyKeyValueStore
from tests.service.conftest import Service, assert_problem

HOPELESS, PATIENT = "hopeless-job", "dashboard"
HOPELESS_WAITS = 100  # more than the 64 worker threads position waits used to hold


class CountingStore(InMemoryStore):
    """An in-memory store that counts the views taken, so a test knows its requests were read."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.views = 0
        self._counted = threading.Condition()

    @contextlib.contextmanager
    def view(self, as_of: Position | None = None) -> Iterator[ReadOnlyKeyValueStore]:
        with self._counted:
            self.views += 1
            self._counted.notify_all()
        with super().view(as_of) as view:
            yield view

    def wait_for_views(self, count: int) -> None:
        with self._counted:
            assert self._counted.wait_for(lambda: self.views >= count, timeout=30), self.views


def _get(url: str, token: str, path: str) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    return f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n\r\n".encode()


def test_a_short_wait_answers_while_another_client_holds_many_hopeless_waits(
    make_service: Callable[..., Service],
) -> None:
    store = CountingStore("products")
    store.apply([(0, 0, b"p1", b'{"v":1}'), (1, 0, b"p2", b'{"v":1}')])
    service = make_service(
        {"products": store},
        auth={
            "mode": "tokens",
            "tokens": [
                {"name": name, "sha256": hashlib.sha256(name.encode()).hexdigest(), "stores": ["*"]}
                for name in (HOPELESS, PATIENT)
            ],
        },
        limits={"min_position_timeout_seconds": 60},
    )
    host, port = service.url.removeprefix("http://").split(":")
    hopeless = _get(service.url, HOPELESS, "/v1/stores/products/keys/p1?min_position=0:500&timeout_ms=60000")
    sockets = [socket.create_connection((host, int(port))) for _ in range(HOPELESS_WAITS)]
    patient = httpx.Client(base_url=service.url, timeout=5, headers={"Authorization": f"Bearer {PATIENT}"})
    try:
        for held in sockets:
            held.sendall(hopeless)
        store.wait_for_views(HOPELESS_WAITS)  # every hopeless request was read once and now waits

        # A wait of 100 ms ends after 100 ms: its answer is position-not-reached, not a client timeout.
        short = patient.get(
            "/v1/stores/products/keys/p1", params={"min_position": "0:500", "timeout_ms": 100}
        )
        body = assert_problem(short, 503, "position-not-reached")
        assert body["position"] == "0:1,1:1"

        # A read-your-write wait is answered as soon as the write lands, not after the others' waits.
        views = store.views
        answers: list[httpx.Response] = []
        reader = threading.Thread(
            target=lambda: answers.append(
                patient.get(
                    "/v1/stores/products/keys/p2", params={"min_position": "1:2", "timeout_ms": 30_000}
                )
            )
        )
        reader.start()
        store.wait_for_views(views + 1)
        store.apply([(1, 1, b"p2", b'{"v":2}')])
        reader.join(timeout=30)
        assert [(a.status_code, a.json()) for a in answers] == [(200, {"v": 2})]
        assert answers[0].headers["Statestore-Position"] == "0:1,1:2"

        # The hopeless waits were waiting all along: reaching their position answers every one.
        store.apply([(0, 499, b"p1", b'{"v":500}')])
        for held in sockets:
            held.settimeout(30)
            assert held.recv(65536).startswith(b"HTTP/1.1 200 OK"), "a hopeless wait did not get its answer"
    finally:
        patient.close()
        for held in sockets:
            held.close()

"""A client that stops reading its answers has its connection cut after ``request_timeout_ms``."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from store import InMemoryStore
from tests.service.conftest import Service
from tests.support.sockets import closed_by_server, connect

BIG = 2 * 1024 * 1024
REQUESTS = 20


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def connection_warnings() -> Iterator[list[str]]:
    handler = _Records()
    logger = logging.getLogger("service.connections")
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def test_a_client_that_never_reads_is_cut_off_and_others_are_served(
    make_service: Callable[..., Service], connection_warnings: list[str]
) -> None:
    blobs = InMemoryStore("blobs")
    blobs.apply([(0, 0, b"big", b"x" * BIG)])
    service = make_service(stores={"blobs": blobs}, limits={"request_timeout_ms": 300})
    host, port = service.url.removeprefix("http://").split(":")
    request = f"GET /v1/stores/blobs/keys/big HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    reader = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect((host, int(port)))
    try:
        # Twenty pipelined requests for 2 MiB each: far more than the socket buffers hold.
        reader.sendall(request * REQUESTS)
        deadline = time.monotonic() + 30
        while not any("did not read its answer" in m for m in connection_warnings):
            assert time.monotonic() < deadline, "the server never cut the connection of a client not reading"
            time.sleep(0.05)
        # Reading now gets what was in flight, then the end: never all the answers.
        received = 0
        reader.settimeout(10)
        with contextlib.suppress(ConnectionResetError):  # a reset or an end of stream: closed
            while chunk := reader.recv(1 << 20):
                received += len(chunk)
        assert received < REQUESTS * BIG
    finally:
        reader.close()
    assert "closed the connection of 127.0.0.1:" in connection_warnings[0]
    assert "limits.request_timeout_ms" in connection_warnings[0]
    # The service goes on serving everyone else.
    answer = service.client.get("/v1/stores/blobs/keys/big")
    assert answer.status_code == 200
    assert len(answer.content) == BIG


def _answered(sock: socket.socket, request: bytes) -> bool:
    """Send ``request`` and read its whole (small) answer; whether it was a 200."""
    sock.sendall(request)
    sock.settimeout(10)
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        answer += chunk
    return answer.startswith(b"HTTP/1.1 200 ")


HEALTH = b"GET /healthz HTTP/1.1\r\nHost: statestore\r\n\r\n"
PARTIAL = b"GET /v1/stores/products/keys/p1 HTTP/1.1\r\nHost: statestore\r\nAccept: */*\r\n"


def test_connections_without_a_complete_request_head_and_idle_ones_are_closed(
    make_service: Callable[..., Service], caplog: pytest.LogCaptureFixture
) -> None:
    service = make_service(limits={"request_head_timeout_ms": 300, "idle_connection_timeout_ms": 300})
    silent = connect(service.url)
    partial = connect(service.url)
    partial.sendall(PARTIAL)
    idle = connect(service.url)
    assert _answered(idle, HEALTH)
    partial_second = connect(service.url)
    assert _answered(partial_second, HEALTH)
    partial_second.sendall(PARTIAL)
    trickle = connect(service.url)
    try:
        with caplog.at_level(logging.WARNING, logger="service.connections"):
            for sock in (silent, partial, idle, partial_second):
                assert closed_by_server(sock), sock
            # A head sent a byte at a time is closed too: the deadline is the whole head's.
            closed = False
            for byte in PARTIAL * 100:
                try:
                    trickle.sendall(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                time.sleep(0.01)
            assert closed, "a head trickled a byte at a time was never cut"
        assert any("no complete request head within 0.3 s" in r.getMessage() for r in caplog.records)
    finally:
        for sock in (silent, partial, idle, partial_second, trickle):
            sock.close()
    assert service.client.get("/healthz").status_code == 200


def test_one_address_holds_at_most_its_connections_and_others_are_served(
    make_service: Callable[..., Service], caplog: pytest.LogCaptureFixture
) -> None:
    service = make_service(limits={"max_connections_per_client": 20, "request_head_timeout_ms": 500})
    held = [connect(service.url) for _ in range(20)]
    others = httpx.Client(
        base_url=service.url, transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=10
    )
    try:
        for sock in held:
            assert _answered(sock, HEALTH)  # open, and counted by the server
        with caplog.at_level(logging.WARNING, logger="service.connections"):
            # Many more connections sending part of a head: closed at once, or at the head deadline.
            flood = [connect(service.url) for _ in range(200)]
            for sock in flood:
                with contextlib.suppress(OSError):
                    sock.sendall(PARTIAL)
            assert others.get("/v1/stores/products/keys/p1").status_code == 200
            assert all(closed_by_server(sock) for sock in flood)
        assert any("limits.max_connections_per_client" in r.getMessage() for r in caplog.records)
        # The connections within the limit still serve.
        assert all(_answered(sock, HEALTH) for sock in held[:3])
        assert others.get("/v1/stores/products/keys/p1").status_code == 200
    finally:
        others.close()
        for sock in held:
            sock.close()


def test_a_connection_above_the_cap_is_answered_503_with_retry_after_before_it_is_closed(
    make_service: Callable[..., Service],
) -> None:
    service = make_service(limits={"max_connections_per_client": 3, "retry_after_seconds": 7})
    held = [connect(service.url) for _ in range(3)]
    try:
        for sock in held:
            assert _answered(sock, HEALTH)  # open, and counted by the server
        refused = connect(service.url)
        refused.settimeout(10)
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := refused.recv(65536):
                answer += chunk
        refused.close()
    finally:
        for sock in held:
            sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    assert lines[0] == "HTTP/1.1 503 Service Unavailable"
    assert headers["retry-after"] == "7"
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    problem = json.loads(body)
    assert problem["type"] == "urn:statestore:problem:client-too-many-connections"
    assert problem["limit"] == 3
    assert "limits.max_connections_per_client" in problem["detail"]

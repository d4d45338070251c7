"""A client that stops reading its answers has its connection cut after ``request_timeout_ms``."""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from store import InMemoryStore
from tests.service.conftest import Service

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

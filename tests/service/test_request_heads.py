"""Request heads are bounded in bytes: too large a head gets 431, too long a target 414, as problems."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Callable

import pytest

from tests.service.conftest import Service
from tests.support.heads import read_until_closed, stream_huge_header

HEAD_LIMIT = 8 * 1024
URL_LIMIT = 2 * 1024
HUGE_HEADER = 64 * 1024 * 1024  # what a client tries to send; the server must stop reading long before


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of the answer on ``sock``, read until the server closes it."""
    head, _, body = read_until_closed(sock).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _problem(sock: socket.socket, status: int, slug: str) -> dict[str, object]:
    code, headers, body = _answer(sock)
    assert code == status, body
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    problem: dict[str, object] = json.loads(body)
    assert problem["type"] == f"urn:statestore:problem:{slug}"
    assert problem["status"] == status
    assert str(problem["instance"]).startswith("/")
    return problem


def test_a_huge_header_is_refused_with_431_once_the_head_passes_its_bound(
    make_service: Callable[..., Service],
) -> None:
    token = "s3cret"
    service = make_service(
        limits={"max_request_head_bytes": HEAD_LIMIT},
        auth={
            "mode": "tokens",
            "tokens": [{"name": "t", "sha256": hashlib.sha256(token.encode()).hexdigest(), "stores": ["*"]}],
        },
    )
    with _connect(service.url) as sock:
        sent = stream_huge_header(sock, "/v1/stores/products/keys/p1", HUGE_HEADER)
        # Checked before auth (this request has no token): the head's size is the first thing known.
        problem = _problem(sock, 431, "request-head-too-large")
    assert problem["limit"] == HEAD_LIMIT
    assert "limits.max_request_head_bytes" in str(problem["detail"])
    # The server stopped reading: the client could not push the whole header, only what the
    # socket buffers on both sides hold.
    assert sent < HUGE_HEADER
    # The service goes on: a head within the bound is served.
    ok = service.client.get(
        "/v1/stores/products/keys/p1",
        headers={"Authorization": f"Bearer {token}", "X-Pad": "a" * (HEAD_LIMIT // 2)},
    )
    assert ok.status_code == 200


@pytest.mark.parametrize("split", [False, True])
def test_a_head_of_exactly_the_bound_is_served_and_one_byte_more_is_not(
    make_service: Callable[..., Service], split: bool
) -> None:
    service = make_service(limits={"max_request_head_bytes": HEAD_LIMIT})
    start = b"GET /healthz HTTP/1.1\r\nHost: statestore\r\nX-Pad: "
    end = b"\r\n\r\n"
    exact = start + b"a" * (HEAD_LIMIT - len(start) - len(end)) + end
    assert len(exact) == HEAD_LIMIT
    for head, status in ((exact, 200), (exact[:-4] + b"a" + end, 431)):
        with _connect(service.url) as sock:
            # Two requests in one write: the first's head fits, the rest counts for the second.
            if split:
                sock.sendall(head[:100])
                sock.sendall(
                    head[100:] + b"GET /healthz HTTP/1.1\r\nHost: statestore\r\nConnection: close\r\n\r\n"
                )
            else:
                sock.sendall(head + b"GET /healthz HTTP/1.1\r\nHost: statestore\r\nConnection: close\r\n\r\n")
            code, _, body = _answer(sock)
        assert code == status, body
        if status == 200:
            assert body.count(b'{"status":"alive"}') == 2  # both pipelined requests answered


def test_a_70_kb_url_is_a_414_problem_not_text(make_service: Callable[..., Service]) -> None:
    service = make_service()  # the default bounds
    with _connect(service.url) as sock:
        sock.sendall(
            b"GET /v1/stores/products/keys/" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: statestore\r\n\r\n"
        )
        problem = _problem(sock, 414, "uri-too-long")
    assert problem["limit"] == 32 * 1024
    assert problem["instance"] == "/v1/stores/products/keys/" + "a" * (200 - len("/v1/stores/products/keys/"))


def test_a_target_above_its_own_bound_is_414_within_the_head_bound(
    make_service: Callable[..., Service],
) -> None:
    service = make_service(limits={"max_url_bytes": URL_LIMIT})
    long_key = "k" * URL_LIMIT
    with _connect(service.url) as sock:
        sock.sendall(f"GET /v1/stores/products/keys/{long_key} HTTP/1.1\r\nHost: statestore\r\n\r\n".encode())
        problem = _problem(sock, 414, "uri-too-long")
    assert problem["limit"] == URL_LIMIT
    # Within the bound the same route answers as usual (a 404 problem for a key it lacks).
    short = service.client.get("/v1/stores/products/keys/" + "k" * (URL_LIMIT // 2))
    assert short.status_code == 404

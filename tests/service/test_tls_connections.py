"""TLS connections are bounded from accept: the per-address cap and the head deadline hold before and
during the handshake, as on plain HTTP (real sockets, a real uvicorn, certificates made here)."""

from __future__ import annotations

import contextlib
import json
import logging
import select
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from service.local.broker import free_port
from tests.service.conftest import Service
from tests.support.certificates import Authority
from tests.support.sockets import closed_by_server, connect

REPO = Path(__file__).resolve().parents[2]
HEALTH = b"GET /healthz HTTP/1.1\r\nHost: statestore\r\n\r\n"


def tls_service(
    make_service: Callable[..., Service], tmp_path: Path, **overrides: object
) -> tuple[Service, Authority]:
    authority = Authority(tmp_path, "server")
    issued = authority.server()
    service = make_service(
        http={"tls": {"certfile": str(issued.cert), "keyfile": str(issued.key)}}, **overrides
    )
    assert service.url.startswith("https://")
    return service, authority


def closed_within(socks: list[socket.socket], seconds: float) -> set[socket.socket]:
    """The sockets of ``socks`` the server closes within ``seconds`` (watched together)."""
    closed: set[socket.socket] = set()
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and len(closed) < len(socks):
        readable, _, _ = select.select([s for s in socks if s not in closed], [], [], left)
        for sock in readable:
            try:
                ended = not sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                ended = True
            if ended:
                closed.add(sock)
    return closed


def healthy_over_tls(sock: socket.socket, authority: Authority) -> bool:
    """Complete the handshake on ``sock`` and ask /healthz; whether the answer is a 200."""
    context = ssl.create_default_context(cafile=authority.bundle)
    with context.wrap_socket(sock, server_hostname="127.0.0.1") as secure:
        secure.settimeout(10)
        secure.sendall(HEALTH)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = secure.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer.startswith(b"HTTP/1.1 200 ")


def test_silent_tls_connections_over_the_cap_are_closed_at_once(
    make_service: Callable[..., Service], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A head deadline far beyond the waits below: what closes the connections is the cap.
    service, authority = tls_service(
        make_service, tmp_path, limits={"max_connections_per_client": 20, "request_head_timeout_ms": 60_000}
    )
    held = [connect(service.url) for _ in range(20)]
    try:
        with caplog.at_level(logging.WARNING, logger="service.connections"):
            flood = [connect(service.url) for _ in range(40)]
            try:
                assert all(closed_by_server(sock) for sock in flood)
            finally:
                for sock in flood:
                    sock.close()
        assert any("limits.max_connections_per_client" in r.getMessage() for r in caplog.records)
        # The twenty within the cap are open, still waiting for their handshakes, and serve.
        assert not any(closed_by_server(sock, timeout=0.2) for sock in held)
        assert all(healthy_over_tls(sock, authority) for sock in held[:3])
        # Another address is served meanwhile.
        context = ssl.create_default_context(cafile=authority.bundle)
        with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2", verify=context)) as other:
            assert other.get(f"{service.url}/healthz").status_code == 200
    finally:
        for sock in held:
            sock.close()


def test_tls_connections_without_a_handshake_or_a_head_are_closed_at_the_head_deadline(
    make_service: Callable[..., Service], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service, authority = tls_service(make_service, tmp_path, limits={"request_head_timeout_ms": 300})
    silent = [connect(service.url) for _ in range(60)]
    half_hello = connect(service.url)
    half_hello.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # the start of a ClientHello
    # A completed handshake and then nothing: the deadline counts from accept, so it closes too.
    context = ssl.create_default_context(cafile=authority.bundle)
    no_head = context.wrap_socket(connect(service.url), server_hostname="127.0.0.1")
    try:
        with caplog.at_level(logging.WARNING, logger="service.connections"):
            assert all(closed_by_server(sock) for sock in silent)
            assert closed_by_server(half_hello)
            with contextlib.suppress(ssl.SSLError):  # an abrupt end, as the connection is cut
                assert closed_by_server(no_head)
        assert any("no complete request head within 0.3 s" in r.getMessage() for r in caplog.records)
    finally:
        for sock in (*silent, half_hello, no_head):
            sock.close()
    assert healthy_over_tls(connect(service.url), authority)


def test_statestore_serve_over_tls_caps_silent_connections(tmp_path: Path) -> None:
    """The command itself (no stores, so no broker needed): silent TLS connections are capped."""
    authority = Authority(tmp_path, "server")
    issued = authority.server()
    port = free_port()
    config = tmp_path / "statestore.yaml"
    config.write_text(
        f"state_dir: {tmp_path / 'state'}\n"
        f"http: {{host: 127.0.0.1, port: {port}, tls: {{certfile: {issued.cert}, keyfile: {issued.key}}}}}\n"
        "limits: {max_connections_per_client: 20, request_head_timeout_ms: 60000}\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--config", str(config)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"https://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=authority.bundle)
    held: list[socket.socket] = []
    try:
        with httpx.Client(verify=context, timeout=5) as client:
            for _ in range(300):
                with contextlib.suppress(httpx.TransportError):
                    if client.get(f"{url}/healthz").status_code == 200:
                        break
                assert process.poll() is None, "statestore serve stopped"
                time.sleep(0.1)
        held = [connect(url) for _ in range(60)]
        # The cap closes 40 at once; the head deadline, a minute away, closes none meanwhile.
        assert len(closed_within(held, 10)) == 40
    finally:
        for sock in held:
            sock.close()
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert "limits.max_connections_per_client" in output


HEAD_LIMIT = 8 * 1024


def _answer_over_tls(secure: ssl.SSLSocket) -> tuple[int, dict[str, object] | bytes]:
    """The status of the answer on ``secure`` and its body (parsed when a problem), read to its end."""
    data = b""
    with contextlib.suppress(ConnectionResetError, ssl.SSLError):  # an abrupt end after the answer
        while chunk := secure.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"content-type: application/problem+json" in head.lower():
        problem: dict[str, object] = json.loads(body)
        return status, problem
    return status, body


def test_a_tls_connections_request_head_is_bounded_in_bytes_too(
    make_service: Callable[..., Service], tmp_path: Path
) -> None:
    service, authority = tls_service(make_service, tmp_path, limits={"max_request_head_bytes": HEAD_LIMIT})
    context = ssl.create_default_context(cafile=authority.bundle)
    start = b"GET /healthz HTTP/1.1\r\nHost: statestore\r\nX-Pad: "
    end = b"\r\n\r\n"
    exact = start + b"a" * (HEAD_LIMIT - len(start) - len(end)) + end
    closing = b"GET /healthz HTTP/1.1\r\nHost: statestore\r\nConnection: close\r\n\r\n"
    for head, status in ((exact, 200), (exact[:-4] + b"a" + end, 431)):
        with context.wrap_socket(connect(service.url), server_hostname="127.0.0.1") as secure:
            secure.settimeout(10)
            secure.sendall(head + closing)  # the decrypted bytes are what counts
            code, answer = _answer_over_tls(secure)
        assert code == status, answer
        if status == 200:
            assert isinstance(answer, bytes)
            assert answer.count(b'{"status":"alive"}') == 2
        else:
            assert isinstance(answer, dict)
            assert answer["type"] == "urn:statestore:problem:request-head-too-large"
            assert answer["limit"] == HEAD_LIMIT


def test_a_huge_header_over_tls_is_refused_with_431_before_it_is_read(
    make_service: Callable[..., Service], tmp_path: Path
) -> None:
    huge = 64 * 1024 * 1024
    service, authority = tls_service(make_service, tmp_path, limits={"max_request_head_bytes": HEAD_LIMIT})
    context = ssl.create_default_context(cafile=authority.bundle)
    with context.wrap_socket(connect(service.url), server_hostname="127.0.0.1") as secure:
        secure.settimeout(10)
        secure.sendall(b"GET /v1/stores/products/keys/p1 HTTP/1.1\r\nHost: statestore\r\nX-Pad: ")
        sent = 0
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, ssl.SSLError):
            while sent < huge:
                sent += secure.send(b"a" * 65536)
        code, answer = _answer_over_tls(secure)
    assert code == 431, answer
    assert isinstance(answer, dict)
    assert answer["limit"] == HEAD_LIMIT
    # The server stopped reading: only what the socket buffers hold got through, not the header.
    assert sent < huge
    assert healthy_over_tls(connect(service.url), authority)

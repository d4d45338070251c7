"""Clients streaming huge request heads (the real service in a child process): each is refused with
431 once its head passes the bound, the others are served meanwhile, and memory stays where it was."""

from __future__ import annotations

import socket
import threading

import httpx

from tests.faults.conftest import ServiceFactory
from tests.faults.test_request_bombs import peak_memory
from tests.support.heads import read_until_closed, stream_huge_header

FLOODERS = 8
HEADER_BYTES = 64 * 1024 * 1024  # what each flooding head would be
# Peak memory the flood may add: far below one flooding head, above the heads' bound times the
# connections (64 KiB each) and the socket buffers. Unbounded, each head was buffered whole.
MAX_GROWTH_BYTES = 32 * 1024 * 1024


def _flood(url: str, answers: list[bytes], sent: list[int]) -> None:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sent.append(stream_huge_header(sock, "/v1/stores", HEADER_BYTES))
        answers.append(read_until_closed(sock))


def test_clients_streaming_huge_heads_are_refused_and_cost_no_memory(start_service: ServiceFactory) -> None:
    service = start_service("127.0.0.1:1", [])  # no store: the heads are refused before any route
    service.wait_for(lambda: service.client.get("/healthz").status_code == 200, 60, "the service to answer")
    before = peak_memory(service)
    answers: list[bytes] = []
    sent: list[int] = []
    threads = [threading.Thread(target=_flood, args=(service.url, answers, sent)) for _ in range(FLOODERS)]
    for thread in threads:
        thread.start()
    # Another client is served meanwhile (how fast is the benchmark's business: bench/header_flood_bench.py).
    with httpx.Client(base_url=service.url, timeout=30) as other:
        probes = [other.get("/healthz").status_code for _ in range(20)]
    for thread in threads:
        thread.join(timeout=120)
    assert probes == [200] * 20
    assert len(answers) == FLOODERS
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert b"urn:statestore:problem:request-head-too-large" in answer
    # The server stopped reading each: no client could push its whole head.
    assert max(sent) < HEADER_BYTES
    assert peak_memory(service) - before < MAX_GROWTH_BYTES
    assert "request-head-too-large" in service.log

"""auth.mode=tokens: bearer tokens, checked by SHA-256, limited to their stores."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Callable

import pytest

from tests.service.conftest import Service, assert_problem
from tests.support.sockets import connect


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture
def guarded(make_service: Callable[..., Service]) -> Service:
    return make_service(
        auth={
            "mode": "tokens",
            "tokens": [
                {"name": "analytics", "sha256": digest("s3cret-a"), "stores": ["products"]},
                {"name": "ops", "sha256": digest("s3cret-o").upper(), "stores": ["*"]},
            ],
        }
    )


def test_missing_or_wrong_token_is_unauthorized(guarded: Service) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic s3cret-a"}):
        response = guarded.client.get("/v1/stores/products/keys/p1", headers=headers)
        assert_problem(response, 401, "unauthorized")
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert_problem(guarded.client.get("/v1/stores"), 401, "unauthorized")


def test_token_reads_its_stores_only(guarded: Service) -> None:
    headers = {"Authorization": "Bearer s3cret-a"}
    assert guarded.client.get("/v1/stores/products/keys/p1", headers=headers).json() == {"name": "Pen"}
    body = assert_problem(guarded.client.get("/v1/stores/notes/keys/n1", headers=headers), 403, "forbidden")
    assert body["store"] == "notes"
    listed = guarded.client.get("/v1/stores", headers=headers).json()["stores"]
    assert [s["name"] for s in listed] == ["products"]


def test_token_with_star_reads_every_store(guarded: Service) -> None:
    headers = {"Authorization": "Bearer s3cret-o"}
    assert guarded.client.get("/v1/stores/notes/keys/n1", headers=headers).text == "héllo"
    assert len(guarded.client.get("/v1/stores", headers=headers).json()["stores"]) == 3


def test_metrics_can_require_a_token_while_probes_stay_open(make_service: Callable[..., Service]) -> None:
    service = make_service(
        auth={
            "mode": "tokens",
            "metrics": "token",
            "tokens": [{"name": "prometheus", "sha256": digest("scrape"), "stores": ["products"]}],
        }
    )
    for headers in ({}, {"Authorization": "Bearer nope"}):
        assert_problem(service.client.get("/metrics", headers=headers), 401, "unauthorized")
    scraped = service.client.get("/metrics", headers={"Authorization": "Bearer scrape"})
    assert scraped.status_code == 200
    assert 'statestore_state{state="READY",store="products"} 1.0' in scraped.text
    assert service.client.get("/healthz").status_code == 200
    assert service.client.get("/readyz").status_code == 200


def test_probes_and_metrics_need_no_token(guarded: Service) -> None:
    assert guarded.client.get("/healthz").status_code == 200
    assert guarded.client.get("/readyz").status_code == 200
    assert guarded.client.get("/metrics").status_code == 200


def _answer_status(sock: socket.socket, path: str, authorization: str | None) -> int:
    """Send one GET on ``sock`` (kept alive) and read its whole answer; its status."""
    header = f"Authorization: {authorization}\r\n" if authorization else ""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: test\r\n{header}\r\n".encode())
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
    while len(body) < length:
        body += sock.recv(65536)
    return int(head[9:12])


def test_one_connection_is_judged_by_the_token_each_request_sends(guarded: Service) -> None:
    # Whom a connection's token identifies is kept for the connection; a request sending another
    # token (or none, or a wrong one) on it is judged by what it sends.
    sock = connect(guarded.url)
    sock.settimeout(30)
    with sock:
        notes = "/v1/stores/notes/keys/n1"
        assert _answer_status(sock, notes, "Bearer s3cret-a") == 403
        assert _answer_status(sock, "/v1/stores/products/keys/p1", "Bearer s3cret-a") == 200
        assert _answer_status(sock, notes, "Bearer s3cret-o") == 200
        assert _answer_status(sock, notes, "Bearer nope") == 401
        assert _answer_status(sock, notes, None) == 401
        assert _answer_status(sock, notes, "Basic s3cret-o") == 401
        assert _answer_status(sock, notes, "bearer  s3cret-o ") == 200
        assert _answer_status(sock, notes, "Bearer s3cret-a") == 403

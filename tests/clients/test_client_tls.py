"""The client over TLS: a CA bundle path or an SSL context verifies the service's certificate."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from clients import StatestoreClient, TransportError
from clients.retry import RetryPolicy
from service.app import create_app
from store import InMemoryStore
from tests.clients.conftest import json_records, make_settings
from tests.support.server import serve_app


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


def test_tls_verifies_with_a_ca_bundle_or_context_and_rejects_unknown_certificates(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    store = InMemoryStore("products")
    store.apply(json_records({"p1": {"name": "Pen"}}))
    app = create_app(make_settings({"products": "json"}), stores={"products": store})
    with serve_app(app, ssl_certfile=str(cert), ssl_keyfile=str(key)) as url:
        assert url.startswith("https://")
        with StatestoreClient(url, verify=str(cert)) as client:
            assert client.get("products", "p1") == {"name": "Pen"}
        with StatestoreClient(url, verify=ssl.create_default_context(cafile=str(cert))) as client:
            assert client.get_many("products", ["p1", "p2"]) == [{"name": "Pen"}, None]
        with (
            StatestoreClient(url, retry=RetryPolicy(max_attempts=1)) as untrusting,
            pytest.raises(TransportError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"),
        ):
            untrusting.get("products", "p1")

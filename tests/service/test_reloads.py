"""Certificates, keys, CA bundles and the tokens file are read again when they change on disk: new
connections use them, open ones keep being served, and a bad file keeps the one in use."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from service.exceptions import ConfigError
from service.settings import load_settings
from tests.service.conftest import Service, assert_problem
from tests.support.certificates import Authority, Issued

INTERVAL = 0.1
HEALTH = b"GET /healthz HTTP/1.1\r\nHost: statestore\r\n\r\n"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def replace(target: Path, content: bytes) -> None:
    """Write ``content`` to ``target`` at once, as a Secret volume's update or cert-manager does."""
    staged = target.with_suffix(".staged")
    staged.write_bytes(content)
    os.replace(staged, target)


def rotate(authority: Authority, live: Issued, common_name: str = "statestore") -> int:
    """A new server certificate and key for ``live``'s files; returns its serial number."""
    fresh = authority.issue("fresh", common_name, dns_names=("localhost",), ips=("127.0.0.1",))
    replace(live.key, fresh.key.read_bytes())
    replace(live.cert, fresh.cert.read_bytes())
    return authority.serial_of(fresh)


def served_serial(url: str, authority: Authority, client: Issued | None = None) -> int:
    """The serial number of the certificate a new connection to ``url`` is served with."""
    host, port = url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=authority.bundle)
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as secure,
    ):
        der = secure.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number


def eventually(condition: Callable[[], bool], what: str, attempts: int = 200) -> None:
    """Poll ``condition`` (each poll is a new connection, which is when the files are checked)."""
    for _ in range(attempts):
        if condition():
            return
        time.sleep(INTERVAL / 2)
    raise AssertionError(f"never saw {what}")


def test_a_rotated_server_certificate_is_used_by_new_connections_while_open_ones_go_on(
    make_service: Callable[..., Service], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    authority = Authority(tmp_path, "server")
    live = authority.server()
    first = authority.serial_of(live)
    tls = {"certfile": str(live.cert), "keyfile": str(live.key), "reload_interval_seconds": INTERVAL}
    service = make_service(http={"tls": tls}, limits={"idle_connection_timeout_ms": 60_000})
    context = ssl.create_default_context(cafile=authority.bundle)
    with httpx.Client(base_url=service.url, verify=context, limits=httpx.Limits(max_connections=1)) as kept:
        assert kept.get("/healthz").status_code == 200  # one connection, kept open
        assert served_serial(service.url, authority) == first
        with caplog.at_level(logging.INFO, logger="service.reloading"):
            second = rotate(authority, live)
            eventually(lambda: served_serial(service.url, authority) == second, "the rotated certificate")
        assert any("reloaded the TLS certificate (http.tls)" in r.getMessage() for r in caplog.records)
        # The connection opened before the rotation is still served, with the old certificate.
        answer = kept.get("/v1/stores/products/keys/p1")
        assert answer.json() == {"name": "Pen"}
        stream = answer.extensions["network_stream"]
        peer = stream.get_extra_info("ssl_object").getpeercert(True)
        assert x509.load_der_x509_certificate(peer).serial_number == first

        # A broken key (half written, or not matching): the certificate in use stays, and one line says so.
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="service.reloading"):
            replace(live.key, b"-----BEGIN PRIVATE KEY-----\nbroken\n")
            eventually(
                lambda: (
                    served_serial(service.url, authority) == second
                    and any(
                        "kept the TLS certificate (http.tls) in use" in r.getMessage() for r in caplog.records
                    )
                ),
                "the line about the broken key",
            )
            assert served_serial(service.url, authority) == second
        message = next(r.getMessage() for r in caplog.records if "kept the TLS" in r.getMessage())
        assert str(live.key) in message
        assert "fix or replace the files" in message
        assert len([r for r in caplog.records if "kept the TLS" in r.getMessage()]) == 1  # once per change
        # Fixed: the next good files are taken.
        third = rotate(authority, live)
        eventually(lambda: served_serial(service.url, authority) == third, "the certificate after the fix")
        assert kept.get("/healthz").status_code == 200


def test_a_rotated_client_ca_bundle_trusts_the_new_ca(
    make_service: Callable[..., Service], tmp_path: Path
) -> None:
    server_ca = Authority(tmp_path, "server")
    server = server_ca.server()
    old_ca, new_ca = Authority(tmp_path, "old"), Authority(tmp_path, "new")
    bundle = tmp_path / "clients-ca.pem"
    bundle.write_bytes(old_ca.bundle.read_bytes())
    tls = {
        "certfile": str(server.cert),
        "keyfile": str(server.key),
        "client_ca": str(bundle),
        "reload_interval_seconds": INTERVAL,
    }
    auth = {"mode": "tokens", "certificates": [{"name": "etl", "common_name": "spark-etl", "stores": ["*"]}]}
    service = make_service(http={"tls": tls}, auth=auth)
    by_old = old_ca.issue("by-old", "spark-etl", client=True)
    by_new = new_ca.issue("by-new", "spark-etl", client=True)

    def reads(issued: Issued) -> bool:
        context = ssl.create_default_context(cafile=server_ca.bundle)
        context.load_cert_chain(issued.cert, issued.key)
        try:
            with httpx.Client(base_url=service.url, verify=context) as client:
                return client.get("/v1/stores/products/keys/p1").status_code == 200
        except httpx.TransportError:
            return False

    assert reads(by_old)
    assert not reads(by_new)
    replace(bundle, new_ca.bundle.read_bytes())
    eventually(lambda: reads(by_new), "the new client CA trusted")
    assert not reads(by_old)


def test_the_tokens_file_is_read_again_when_it_changes(
    make_service: Callable[..., Service], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"- {{name: first, sha256: {digest('one')}, stores: [products]}}\n")
    service = make_service(
        auth={"mode": "tokens", "tokens_file": str(tokens), "reload_interval_seconds": INTERVAL}
    )

    def status(token: str) -> int:
        return service.client.get(
            "/v1/stores/products/keys/p1", headers={"Authorization": f"Bearer {token}"}
        ).status_code

    assert status("one") == 200
    assert status("two") == 401
    with caplog.at_level(logging.INFO, logger="service.reloading"):
        replace(tokens, f"- {{name: second, sha256: {digest('two')}, stores: ['*']}}\n".encode())
        eventually(lambda: status("two") == 200, "the new token accepted")
    assert status("one") == 401
    assert any("reloaded the token list (auth.tokens_file)" in r.getMessage() for r in caplog.records)
    # A file that names a store the service does not have, or is not a list: the token list in use stays.
    for bad, reason in (
        (f"- {{name: third, sha256: {digest('three')}, stores: [orders]}}\n", "names unknown stores: orders"),
        ("name: not-a-list\n", "must hold a list of tokens"),
    ):
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="service.reloading"):
            replace(tokens, bad.encode())
            eventually(
                lambda: (
                    status("two") == 200
                    and any("kept the token list" in r.getMessage() for r in caplog.records)
                ),
                "the bad file",
            )
        assert any(reason in r.getMessage() for r in caplog.records)
        assert status("two") == 200
        assert_problem(
            service.client.get("/v1/stores/products/keys/p1", headers={"Authorization": "Bearer three"}),
            401,
            "unauthorized",
        )


def test_a_tokens_file_that_cannot_be_used_at_start_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_text(
        "stores: [{name: products, topic: products}]\n"
        f"auth: {{mode: tokens, tokens_file: {tmp_path / 'missing.yaml'}}}\n"
    )
    with pytest.raises(ConfigError, match=r"auth\.tokens_file: cannot read .*missing\.yaml"):
        load_settings(config)
    (tmp_path / "tokens.yaml").write_text(f"- {{name: a, sha256: {digest('a')}, stores: [orders]}}\n")
    config.write_text(
        "stores: [{name: products, topic: products}]\n"
        f"auth: {{mode: tokens, tokens_file: {tmp_path / 'tokens.yaml'}}}\n"
    )
    with pytest.raises(ConfigError, match=r"token 'a' in .* names unknown stores: orders"):
        load_settings(config)

"""Client certificates beside tokens: a verified certificate's CN or DNS name maps to stores as a token
does; a certificate of another CA is refused in the handshake (real uvicorn, real TLS sockets)."""

from __future__ import annotations

import hashlib
import ssl
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from service.exceptions import ConfigError
from service.settings import TlsSettings, load_settings
from service.startup import check_tls
from tests.service.conftest import Service, assert_problem
from tests.support.certificates import Authority, Issued


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Pki:
    """The server's CA and certificate, the clients' CA, and a stranger CA."""

    def __init__(self, directory: Path) -> None:
        self.server_ca = Authority(directory, "server")
        self.server = self.server_ca.server()
        self.clients = Authority(directory, "clients")
        self.stranger = Authority(directory, "stranger")

    def context(self, issued: Issued | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.server_ca.bundle)
        if issued is not None:
            context.load_cert_chain(issued.cert, issued.key)
        return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def mtls(make_service: Callable[..., Service], pki: Pki) -> Service:
    return make_service(
        http={
            "tls": {
                "certfile": str(pki.server.cert),
                "keyfile": str(pki.server.key),
                "client_ca": str(pki.clients.bundle),
            }
        },
        auth={
            "mode": "tokens",
            "tokens": [{"name": "ops", "sha256": digest("s3cret-o"), "stores": ["*"]}],
            "certificates": [
                {"name": "etl", "common_name": "spark-etl", "stores": ["products"]},
                {"name": "reports", "common_name": "reports.example", "stores": ["notes"]},
            ],
        },
    )


@pytest.fixture
def client_for(mtls: Service, pki: Pki) -> Iterator[Callable[[Issued | None], httpx.Client]]:
    clients: list[httpx.Client] = []

    def make(issued: Issued | None) -> httpx.Client:
        client = httpx.Client(base_url=mtls.url, verify=pki.context(issued), timeout=10)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def test_a_certificate_reads_the_stores_of_its_common_name(
    client_for: Callable[[Issued | None], httpx.Client], pki: Pki
) -> None:
    etl = client_for(pki.clients.issue("etl", "spark-etl", client=True))
    assert etl.get("/v1/stores/products/keys/p1").json() == {"name": "Pen"}
    body = assert_problem(etl.get("/v1/stores/notes/keys/n1"), 403, "forbidden")
    assert "certificate" in body["detail"]
    assert [s["name"] for s in etl.get("/v1/stores").json()["stores"]] == ["products"]
    # A DNS subject alternative name counts as the certificate's name too.
    reports = client_for(
        pki.clients.issue("reports", "someone-else", dns_names=("reports.example",), client=True)
    )
    assert reports.get("/v1/stores/notes/keys/n1").text == "héllo"
    assert_problem(reports.get("/v1/stores/products/keys/p1"), 403, "forbidden")


def test_tokens_still_work_with_or_without_a_certificate_and_a_token_is_judged_alone(
    client_for: Callable[[Issued | None], httpx.Client], pki: Pki
) -> None:
    anonymous = client_for(None)  # no certificate: the handshake succeeds, a token is needed
    assert_problem(anonymous.get("/v1/stores/products/keys/p1"), 401, "unauthorized")
    token = {"Authorization": "Bearer s3cret-o"}
    assert anonymous.get("/v1/stores/notes/keys/n1", headers=token).text == "héllo"
    etl = client_for(pki.clients.issue("etl", "spark-etl", client=True))
    assert etl.get("/v1/stores/notes/keys/n1", headers=token).text == "héllo"
    # A wrong token is not rescued by a good certificate.
    assert_problem(
        etl.get("/v1/stores/products/keys/p1", headers={"Authorization": "Bearer nope"}), 401, "unauthorized"
    )
    # A verified certificate whose name is not configured identifies nobody.
    unknown = client_for(pki.clients.issue("unknown", "intruder", client=True))
    assert_problem(unknown.get("/v1/stores/products/keys/p1"), 401, "unauthorized")


def test_a_certificate_of_another_ca_is_refused_in_the_handshake(
    mtls: Service,
    client_for: Callable[[Issued | None], httpx.Client],
    pki: Pki,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stranger = client_for(pki.stranger.issue("stranger", "spark-etl", client=True))
    with caplog.at_level("WARNING", logger="service.connections"):
        with pytest.raises(httpx.TransportError):
            stranger.get("/v1/stores/products/keys/p1")
        # The server's side of the handshake may end after the client's.
        for _ in range(100):
            if any("refused the TLS handshake" in r.getMessage() for r in caplog.records):
                break
            time.sleep(0.05)
    refusal = next(r.getMessage() for r in caplog.records if "refused the TLS handshake" in r.getMessage())
    assert "CERTIFICATE_VERIFY_FAILED" in refusal
    # TLS 1.1 and older are refused as well.
    old = pki.context(pki.clients.issue("etl", "spark-etl", client=True))
    old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the very point: an outdated version
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{mtls.url}/healthz", verify=old)


def test_certificates_that_cannot_mean_one_thing_or_a_missing_ca_are_config_errors(
    tmp_path: Path, pki: Pki
) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_text(
        "stores: [{name: products, topic: products}]\n"
        "auth:\n  mode: tokens\n  certificates:\n"
        "    - {name: a, common_name: etl, stores: [products]}\n"
        "    - {name: b, common_name: etl, stores: ['*']}\n"
    )
    with pytest.raises(ConfigError, match="common_name 'etl' is listed more than once"):
        load_settings(config)
    config.write_text(
        "stores: [{name: products, topic: products}]\n"
        "auth: {mode: tokens, certificates: [{name: a, common_name: etl, stores: [orders]}]}\n"
    )
    with pytest.raises(ConfigError, match="auth certificate 'a' names unknown stores: orders"):
        load_settings(config)
    missing = TlsSettings(certfile=pki.server.cert, keyfile=pki.server.key, client_ca=tmp_path / "nope.pem")
    with pytest.raises(ConfigError, match=r"^http.tls.client_ca: .*nope.pem does not exist$"):
        check_tls(missing)
    pki.server.key.write_text("not a key")  # a broken key is named too
    with pytest.raises(ConfigError, match=r"http\.tls: cannot use certificate"):
        check_tls(TlsSettings(certfile=pki.server.cert, keyfile=pki.server.key))

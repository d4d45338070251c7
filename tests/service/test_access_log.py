"""The access log cannot be forged, keeps no query-string credential, and names the real peer."""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
import pytest

from service.access_log import escaped
from tests.service.conftest import Service

FORGED = '/v1/stores/products/keys/p1%0D%0A10.0.0.1:1 "GET /admin HTTP/1.1" 200 1 B 0.1 ms%E2%80%A8x'


def _access_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "statestore.access"]


def test_control_characters_of_the_path_are_escaped_in_the_text_line(
    make_service: Callable[..., Service], caplog: pytest.LogCaptureFixture
) -> None:
    service = make_service(logging={"access_log": True})
    with caplog.at_level(logging.INFO, logger="statestore.access"):
        assert service.client.get(FORGED).status_code == 404
    (record,) = _access_lines(caplog)
    line = record.getMessage()
    assert "\n" not in line
    assert "\r" not in line
    assert "\u2028" not in line
    assert "\\x0d\\x0a10.0.0.1:1 \\x22GET /admin HTTP/1.1\\x22 200 1 B" in line
    assert "\\u2028x" in line
    # The request is one quoted field: the only quotes left are its own.
    assert line.count('"') == 2
    # The JSON log's field keeps the decoded path (JSON escapes it).
    assert "\r\n10.0.0.1:1" in record.path  # type: ignore[attr-defined]


def test_query_string_credentials_are_redacted(
    make_service: Callable[..., Service], caplog: pytest.LogCaptureFixture
) -> None:
    service = make_service(logging={"access_log": True})
    with caplog.at_level(logging.INFO, logger="statestore.access"):
        service.client.get("/v1/stores/products/keys/p1?access_token=hunter2&key_encoding=utf8&api_key=k3y")
    (record,) = _access_lines(caplog)
    for text in (record.getMessage(), record.path):  # type: ignore[attr-defined]
        assert "hunter2" not in text
        assert "k3y" not in text
        assert "?access_token=REDACTED&key_encoding=utf8&api_key=REDACTED" in text


def test_escaping_leaves_ordinary_text_alone() -> None:
    assert escaped("/v1/stores/prodüct/keys/a b?x=1&y=%0A") == "/v1/stores/prodüct/keys/a b?x=1&y=%0A"
    assert escaped("a\tb\\c\x85") == "a\\x09b\\x5cc\\x85"


def test_forwarded_for_is_not_believed_unless_its_sender_is_named(
    make_service: Callable[..., Service], caplog: pytest.LogCaptureFixture
) -> None:
    service = make_service(logging={"access_log": True})  # no forwarded_allow_ips: the default
    spoofing = {"X-Forwarded-For": "10.9.9.9"}
    with caplog.at_level(logging.INFO, logger="statestore.access"):
        assert service.client.get("/v1/stores/products/keys/p1", headers=spoofing).status_code == 200
    (record,) = _access_lines(caplog)
    assert record.client.startswith("127.0.0.1:")  # type: ignore[attr-defined]
    assert "10.9.9.9" not in record.getMessage()


def test_forwarded_for_is_believed_from_a_named_proxy(
    make_service: Callable[..., Service], caplog: pytest.LogCaptureFixture
) -> None:
    service = make_service(
        logging={"access_log": True},
        http={"forwarded_allow_ips": ["127.0.0.2"]},
    )
    proxy = httpx.Client(
        base_url=service.url, transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=10
    )
    with proxy, caplog.at_level(logging.INFO, logger="statestore.access"):
        assert (
            proxy.get("/v1/stores/products/keys/p1", headers={"X-Forwarded-For": "10.9.9.9"}).status_code
            == 200
        )
        # Another client, not named, is its own address whatever it says.
        assert (
            service.client.get(
                "/v1/stores/products/keys/p1", headers={"X-Forwarded-For": "10.9.9.9"}
            ).status_code
            == 200
        )
    first, second = _access_lines(caplog)
    assert first.client.startswith("10.9.9.9:")  # type: ignore[attr-defined]
    assert second.client.startswith("127.0.0.1:")  # type: ignore[attr-defined]

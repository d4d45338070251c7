"""Security: no secret in any log line, error body or status document; open mode said out loud; no
write path on any route."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.routing import Route

from service.app import create_app
from service.local.broker import LocalBroker
from tests.faults.conftest import ServiceFactory
from tests.service.conftest import Service, assert_problem, make_service  # noqa: F401 (fixture)
from tests.support.kafka import create_topic
from tests.support.stores import REPO

FILE_PASSWORD = "file-sasl-password-7f3a"
ENV_PASSWORD = "env-sasl-password-91c2"
TOKEN = "bearer-token-5d8e0b"
SECRETS = (FILE_PASSWORD, ENV_PASSWORD, TOKEN)


def test_no_secret_in_logs_errors_or_status(own_broker: LocalBroker, start_service: ServiceFactory) -> None:
    create_topic(own_broker.bootstrap_servers, "accounts", partitions=1)
    service = start_service(
        own_broker.bootstrap_servers,
        [{"name": "accounts", "topic": "accounts", "value_format": "json"}],
        kafka={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "reader",
            "sasl.password": FILE_PASSWORD,
        },
        env={"STATESTORE_KAFKA__SASL_PASSWORD": ENV_PASSWORD},
        auth={
            "mode": "tokens",
            "tokens": [
                {"name": "ops", "sha256": hashlib.sha256(TOKEN.encode()).hexdigest(), "stores": ["*"]}
            ],
        },
        log_level="DEBUG",
    )
    good = {"Authorization": f"Bearer {TOKEN}"}
    # The broker takes no SASL: the store keeps failing to connect, and says so.
    service.wait_for(
        lambda: service.client.get("/v1/stores/accounts", headers=good).json()["last_error"] is not None,
        60,
        "the store to report the failing connection",
    )
    answers = [
        service.client.get("/v1/stores", headers=good),
        service.client.get("/v1/stores/accounts", headers=good),
        service.client.get("/v1/stores/accounts/keys/a1", headers=good),
        service.client.post("/v1/stores/accounts/keys:batchGet", headers=good, json={"keys": ["a1"]}),
        service.client.post(
            "/v1/stores/accounts/keys:batchGet",
            headers={**good, "Content-Type": "application/json"},
            content=b"{not json",
        ),
        service.client.get("/v1/stores/accounts/scan", headers=good, params={"limit": "many"}),
        service.client.delete("/v1/stores/accounts/keys/a1", headers=good),
        service.client.get("/v1/stores/nope", headers=good),
        service.client.get("/v1/nothing-here", headers=good),
        service.client.get("/v1/stores", headers={"Authorization": f"Bearer {TOKEN}x"}),
        service.client.get("/v1/stores", headers={"Authorization": f"Basic {TOKEN}"}),
        service.client.get("/v1/stores/accounts/keys/a1", params={"access_token": TOKEN}),
        service.client.get("/readyz"),
        service.client.get("/metrics"),
        service.client.get("/openapi.json"),
    ]
    assert {answer.status_code for answer in answers} >= {200, 400, 401, 404, 405, 422, 503}
    assert service.client.get("/v1/stores", headers=good).json()["stores"][0]["last_error"]
    assert service.terminate() in (0, -15)
    log = service.log
    assert 'store "accounts"' in log  # its errors were logged
    assert "auth.mode is 'open'" not in log
    for secret in SECRETS:
        assert secret not in log
        for answer in answers:
            assert secret not in answer.text
            assert all(secret not in value for value in answer.headers.values())


def test_a_configuration_error_names_the_setting_not_the_secret(tmp_path: Path) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_text(
        "kafka: {bootstrap_servers: '127.0.0.1:1', sasl.password: " + FILE_PASSWORD + "}\n"
        "stores: [{name: 'bad name', topic: t}]\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--config", str(config)],
        cwd=REPO,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={"STATESTORE_KAFKA__SASL_PASSWORD": ENV_PASSWORD, "PATH": ""},
    )
    assert run.returncode == 2
    assert "stores.0.name" in run.stderr
    for secret in SECRETS:
        assert secret not in run.stdout + run.stderr


def test_open_mode_is_logged_as_a_warning(own_broker: LocalBroker, start_service: ServiceFactory) -> None:
    service = start_service(own_broker.bootstrap_servers, [])
    service.wait_ready()
    assert re.search(
        r"WARNING +service\.app: auth\.mode is 'open': every client may read every store", service.log
    )


# -- no write path ----------------------------------------------------------------------------------

READ_METHODS = {"GET", "HEAD"}
OTHER_METHODS = ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"]
BATCH_ROUTES = {"/v1/stores/{store}/keys:batchGet", "/v1/stores/{store}/indexes/{index}:batchGet"}
POSITIONS: dict[str, Any] = {
    "name": "positions",
    "topic": "positions",
    "value_format": "json",
    "indexes": [{"name": "by_ticker", "field": "ticker"}],
}


def concrete(template: str) -> str:
    return (
        template.replace("{store}", "products")
        .replace("{key:path}", "p1")
        .replace("{index}", "by_ticker")
        .replace("{value}", "AAPL")
    )


def every_route() -> list[str]:
    from service.settings import Settings, StoreSettings  # noqa: PLC0415

    app = create_app(Settings(stores=[StoreSettings(**POSITIONS)]), {})
    return sorted({route.path for route in app.routes if isinstance(route, Route)})


def test_every_route_is_covered_here() -> None:
    routes = set(every_route())
    assert routes >= BATCH_ROUTES
    assert {"/healthz", "/readyz", "/metrics", "/v1/stores", "/v1/stores/{store}/keys/{key:path}"} <= routes


@pytest.mark.parametrize("template", every_route())
def test_no_route_takes_a_write(make_service: Callable[..., Service], template: str) -> None:  # noqa: F811
    service = make_service()
    path = concrete(template)
    methods = [m for m in OTHER_METHODS if not (m == "POST" and template in BATCH_ROUTES)]
    for method in methods:
        answer = service.client.request(method, path, content=b'{"keys": ["p1"], "value": "x"}')
        assert_problem(answer, 405, "method-not-allowed")
        assert "read-only" in answer.json()["detail"]
    assert service.client.get("/v1/stores/products/keys/p1").json() == {"name": "Pen"}


@pytest.mark.parametrize("method", ["GET", *OTHER_METHODS])
def test_unknown_routes_are_refused(make_service: Callable[..., Service], method: str) -> None:  # noqa: F811
    service = make_service()
    unknown = (
        "/v1/stores/products/keys",
        "/v1/stores/products/keys:batchPut",
        "/v1/admin",
        "/v2/stores",
    )
    for path in unknown:
        assert_problem(service.client.request(method, path), 404, "route-not-found")
    # The status page answers GET alone.
    if method != "GET":
        assert_problem(service.client.request(method, "/"), 405, "method-not-allowed")
    assert service.client.get("/v1/stores/products/keys/p1").json() == {"name": "Pen"}

"""The chart's ``helm test`` hook, rendered, and its check run for real against the real service app.

No cluster runs here: the test Pod's command runs with this interpreter and the environment the
kubelet would give it, its URL pointed from the client Service's DNS name to a local server.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from service.app import create_app
from service.local.broker import free_port
from service.settings import Settings
from store import StoreState
from store.lifecycle.memory import InMemoryStore
from tests.deploy.manifests import NAMESPACE, RELEASE, container_environment, render
from tests.support.server import serve_app

TOKEN = "helm-test-token"
SECRETS = {"statestore-test": {"token": TOKEN}}
TOKENS_AUTH = {
    "mode": "tokens",
    "tokens": [{"name": "smoke", "stores": ["*"], "sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}],
}


def hook_pod(values: dict[str, Any]) -> dict[str, Any]:
    return render(values).one("Pod", "-test")


def test_the_hook_is_a_test_pod_running_the_service_image() -> None:
    chart = render({})
    pod = chart.one("Pod", "-test")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["automountServiceAccountToken"] is False
    [container] = pod["spec"]["containers"]
    assert container["image"] == chart.container["image"]
    assert container["command"] == ["python", "-c"]
    environment = container_environment(container, SECRETS)
    assert environment["TEST_URL"] == f"http://{RELEASE}-statestore.{NAMESPACE}.svc:8080"
    assert environment["TEST_STORE"] == "products"
    assert "TEST_TOKEN" not in environment


def test_no_hook_when_disabled() -> None:
    assert render({"helmTest": {"enabled": False}}).of_kind("Pod") == []


def test_tls_hook_uses_https_and_the_listeners_ca() -> None:
    pod = hook_pod({"http": {"tls": {"enabled": True, "existingSecret": "statestore-tls"}}})
    [container] = pod["spec"]["containers"]
    assert container_environment(container, SECRETS)["TEST_URL"].startswith("https://")
    assert container["volumeMounts"] == [
        {"name": "http-tls", "mountPath": "/etc/statestore/http-tls", "readOnly": True}
    ]
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == "statestore-tls"


# --- the check, run ------------------------------------------------------------------------------


@pytest.fixture
def service() -> Iterator[Callable[..., tuple[str, InMemoryStore]]]:
    """Factory: the real service app serving one in-memory store ``products``, READY."""
    with contextlib.ExitStack() as servers:

        def start(auth: dict[str, Any] | None = None) -> tuple[str, InMemoryStore]:
            products = InMemoryStore("products", state=StoreState.READY)
            settings = Settings(
                stores=[{"name": "products", "topic": "products", "value_format": "json"}],
                auth=auth or {"mode": "open"},
            )
            url = servers.enter_context(serve_app(create_app(settings, stores={"products": products})))
            return url, products

        yield start


def run_hook(values: dict[str, Any], url: str) -> subprocess.CompletedProcess[str]:
    [container] = hook_pod(values)["spec"]["containers"]
    environment = container_environment(container, SECRETS)
    environment["TEST_URL"] = url  # the Service's DNS name, as this machine reaches the server
    return subprocess.run(
        [sys.executable, *container["command"][1:], *container["args"]],
        env={**environment, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_passes_when_ready_and_the_store_reads(service: Callable[..., tuple[str, InMemoryStore]]) -> None:
    url, _ = service()
    done = run_hook({}, url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: ready; store products is READY and answers reads" in done.stdout


def test_fails_while_not_ready(service: Callable[..., tuple[str, InMemoryStore]]) -> None:
    url, products = service()
    products.set_state(StoreState.RESTORING)
    done = run_hook({}, url)
    assert done.returncode != 0
    assert "FAIL: not ready" in done.stderr


def test_fails_for_a_store_the_service_lacks(service: Callable[..., tuple[str, InMemoryStore]]) -> None:
    url, _ = service()
    done = run_hook({"helmTest": {"store": "customers"}}, url)
    assert done.returncode != 0
    assert "GET /v1/stores/customers -> 404" in done.stdout


def test_fails_when_nothing_answers() -> None:
    done = run_hook({}, f"http://127.0.0.1:{free_port()}")
    assert done.returncode != 0
    assert "does not answer" in done.stderr


def test_reads_with_the_token_from_its_secret(service: Callable[..., tuple[str, InMemoryStore]]) -> None:
    url, _ = service(TOKENS_AUTH)
    values = {
        "auth": {"mode": "tokens", "tokens": [{"name": "smoke", "stores": ["*"], "sha256": "0" * 64}]},
        "helmTest": {"bearerTokenSecret": {"name": "statestore-test", "key": "token"}},
    }
    done = run_hook(values, url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "store products is READY" in done.stdout


def test_without_a_token_checks_that_anonymous_reads_are_refused(
    service: Callable[..., tuple[str, InMemoryStore]],
) -> None:
    values = {"auth": {"mode": "tokens", "tokens": [{"name": "smoke", "stores": ["*"], "sha256": "0" * 64}]}}
    url, _ = service(TOKENS_AUTH)
    done = run_hook(values, url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "anonymous reads are refused" in done.stdout
    # A service that lets anonymous readers in fails the same check.
    open_url, _ = service()
    done = run_hook(values, open_url)
    assert done.returncode != 0
    assert "was not refused" in done.stderr

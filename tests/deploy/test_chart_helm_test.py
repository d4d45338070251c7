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
from pathlib import Path
from typing import Any

import pytest

from service.app import create_app
from service.local.broker import free_port
from service.settings import Settings
from store import StoreState
from store.lifecycle.memory import InMemoryStore
from tests.deploy.manifests import (
    NAMESPACE,
    RELEASE,
    Rendered,
    container_environment,
    render,
    rendered_secrets,
)
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
    chart = render({"auth": {"mode": "open"}})
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


def test_by_default_the_hook_reads_with_the_generated_token() -> None:
    chart = render({})
    [container] = chart.one("Pod", "-test")["spec"]["containers"]
    generated = f"{RELEASE}-statestore-token"
    environment = container_environment(container, rendered_secrets(chart))
    assert environment["TEST_TOKEN"] == rendered_secrets(chart)[generated]["token"]
    assert environment["AUTH_MODE"] == "tokens"


def test_no_hook_when_disabled() -> None:
    assert render({"helmTest": {"enabled": False}}).of_kind("Pod") == []


def test_tls_hook_uses_https_and_the_listeners_ca() -> None:
    chart = render({"http": {"tls": {"enabled": True, "existingSecret": "statestore-tls"}}})
    pod = chart.one("Pod", "-test")
    [container] = pod["spec"]["containers"]
    assert container_environment(container, rendered_secrets(chart))["TEST_URL"].startswith("https://")
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


def run_hook(values: dict[str, Any] | Rendered, url: str) -> subprocess.CompletedProcess[str]:
    chart = values if isinstance(values, Rendered) else render(values)
    [container] = chart.one("Pod", "-test")["spec"]["containers"]
    environment = container_environment(container, {**SECRETS, **rendered_secrets(chart)})
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


def test_the_generated_token_reads_from_the_service_given_only_its_hash(
    service: Callable[..., tuple[str, InMemoryStore]], tmp_path: Path
) -> None:
    chart = render({})  # auth on by default, a token generated
    secret = rendered_secrets(chart)[f"{RELEASE}-statestore-token"]
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(secret["tokens.yaml"], encoding="utf-8")  # what the pod mounts
    assert secret["token"] not in secret["tokens.yaml"]
    assert hashlib.sha256(secret["token"].encode()).hexdigest() in secret["tokens.yaml"]
    url, _ = service({"mode": "tokens", "tokens_file": str(tokens)})
    done = run_hook(chart, url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "store products is READY and answers reads" in done.stdout


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

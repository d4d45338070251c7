"""GET /: the status page over HTTP (what it shows, escaping, auth), and Swagger UI served from the package.

The page in a real browser (refreshing, phone width, the token form) is tested in
``test_status_page_browser.py``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest

from service.status_html import advice, format_bytes, format_duration
from store import Position, StoreState
from tests.service.conftest import Service, assert_problem
from tests.support.scenes import (
    CUSTOMERS_END,
    DISK_FULL,
    STORE_SETTINGS,
    ShownStore,
    broken,
    ready,
    scene_stores,
)

HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


BLOCKS = {"section", "div", "p", "dt", "dd", "li", "h1", "h2", "header", "footer", "nav", "main", "a"}


class Page(HTMLParser):
    """The parts of a page the tests look at: elements by attribute, URLs referred to, visible text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.scripts = 0
        self.text_parts: list[str] = []
        self._hidden = 0  # inside <style> or <script>
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        self.scripts += tag == "script"
        self._hidden += tag in {"style", "script"}
        if tag in BLOCKS:
            self.text_parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in {"style", "script"}
        if tag in BLOCKS:
            self.text_parts.append(" ")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.text_parts.append(data)

    @property
    def text(self) -> str:
        return " ".join("".join(self.text_parts).split())

    def find(self, tag: str, **attributes: str) -> list[dict[str, str | None]]:
        return [
            attrs
            for name, attrs in self.elements
            if name == tag and all(attrs.get(k.replace("_", "-")) == v for k, v in attributes.items())
        ]

    def urls(self) -> list[str]:
        linked = [attrs.get("href") or attrs.get("src") for _, attrs in self.elements]
        return [url for url in linked if url]


@pytest.fixture
def scene(make_service: Callable[..., Service]) -> Service:
    stores = scene_stores()
    return make_service(stores, configs=[c for c in STORE_SETTINGS if c["name"] != "products"])


def page_of(service: Service, **headers: str) -> tuple[httpx.Response, Page]:
    response = service.client.get("/", headers={**HTML, **headers})
    return response, Page(response.text)


def test_the_page_shows_every_store_with_its_state_and_progress(scene: Service) -> None:
    response, page = page_of(scene)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    shown = {attrs["data-store"]: attrs["data-state"] for attrs in page.find("section")}
    assert shown == {"products": "READY", "customers": "RESTORING", "positions": "READY"}
    [bar] = page.find("progress")
    assert bar["aria-label"] == "restore of customers"
    assert float(bar["value"] or 0) == pytest.approx(0.3)
    assert "30.0 %" in page.text
    assert "1,350,000 of 4,500,000 records" in page.text
    assert "about 15 s left" in page.text
    assert "Keys 1,950" in page.text, "a counted store shows its exact count"
    assert "~1,975" not in page.text
    assert "~12,040" in page.text, "estimates are labelled approximate"
    assert "178.0 KiB" in page.text
    assert "0:661,1:652,2:662" in page.text
    assert "by_ticker on ticker: ready" in page.text
    assert "keeps 1 d" in page.text
    assert "2 of 3 READY" in page.text


def test_the_page_links_to_each_stores_json_and_the_api_docs(scene: Service) -> None:
    _, page = page_of(scene)
    links = page.urls()
    for name in ("products", "customers", "positions"):
        assert f"/v1/stores/{name}" in links
        assert scene.client.get(f"/v1/stores/{name}").status_code == 200
    assert "/docs" in links
    assert "/metrics" in links


def test_the_page_needs_nothing_from_elsewhere(scene: Service) -> None:
    response, page = page_of(scene)
    assert all(url.startswith("/") or url.startswith("data:") for url in page.urls()), page.urls()
    assert all(tag != "script" or "src" not in attrs for tag, attrs in page.elements)
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy
    assert response.headers["cache-control"] == "no-store"


def test_the_page_refreshes_itself(scene: Service) -> None:
    _, page = page_of(scene)
    [body] = page.find("body")
    assert int(body["data-refresh"] or 0) > 0
    assert page.find("meta", http_equiv="refresh"), "a meta refresh when scripts are off"
    assert page.scripts == 1


def test_errors_show_with_what_to_do(scene: Service) -> None:
    broken(scene.stores["positions"])  # type: ignore[arg-type]
    _, page = page_of(scene)
    assert "Last error: " + DISK_FULL in page.text
    assert "What to do: Do what the error says" in page.text
    assert "1 with an error" in page.text
    [card] = page.find("section", data_store="positions")
    assert "has-error" in (card["class"] or "")


def test_a_failed_store_is_shown_failed_with_what_to_do(make_service: Callable[..., Service]) -> None:
    locked = 'StoreLockedError: store "products" at /data/products is locked by another process or store'
    service = make_service({"products": ShownStore("products", StoreState.FAILED, last_error=locked)})
    _, page = page_of(service)
    assert page.find("section", data_store="products", data_state="FAILED")
    assert "Last error: " + locked in page.text
    assert "fix what the error names, then restart the service" in page.text
    assert "0 of 1 READY, 1 with an error" in page.text


def test_everything_from_a_store_is_escaped(make_service: Callable[..., Service]) -> None:
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    store = ShownStore("products", last_error=hostile, position=Position({0: 1}))
    service = make_service({"products": store}, configs=[])
    response, page = page_of(service)
    assert page.scripts == 1, "only the page's own script"
    assert not page.find("img")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text
    assert hostile in page.text


def test_with_tokens_a_browser_without_one_is_asked_for_it(make_service: Callable[..., Service]) -> None:
    service = guarded(make_service)
    response, page = page_of(service)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.headers["content-type"].startswith("text/html")
    assert "A token is needed" in page.text
    assert page.find("form", id="token-form")
    assert not page.find("section"), "no store is shown without a token"
    assert "not accepted" not in page.text
    _, refused = page_of(service, Authorization="Bearer wrong")
    assert "The token sent was not accepted" in refused.text


def test_with_tokens_other_clients_get_the_unauthorized_problem(make_service: Callable[..., Service]) -> None:
    service = guarded(make_service)
    assert_problem(service.client.get("/"), 401, "unauthorized")
    assert_problem(service.client.get("/", headers={"Accept": "application/json"}), 401, "unauthorized")


def test_a_token_sees_only_its_stores(make_service: Callable[..., Service]) -> None:
    service = guarded(make_service)
    _, page = page_of(service, Authorization="Bearer s3cret-a")
    assert [attrs["data-store"] for attrs in page.find("section")] == ["products"]
    assert page.find("button", id="forget-token")
    _, every = page_of(service, Authorization="Bearer s3cret-o")
    assert len(every.find("section")) == 3


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def guarded(make_service: Callable[..., Service]) -> Service:
    return make_service(
        auth={
            "mode": "tokens",
            "tokens": [
                {
                    "name": "analytics",
                    "sha256": hashlib.sha256(b"s3cret-a").hexdigest(),
                    "stores": ["products"],
                },
                {"name": "ops", "sha256": hashlib.sha256(b"s3cret-o").hexdigest(), "stores": ["*"]},
            ],
        }
    )


# --- Swagger UI ---------------------------------------------------------------------------------


def test_swagger_ui_loads_its_assets_from_the_service(service: Service) -> None:
    response = service.client.get("/docs")
    assert response.status_code == 200
    page = Page(response.text)
    assert sorted(page.urls()) == ["/docs/favicon.png", "/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css"]
    assert "cdn" not in response.text.lower()
    bundle = service.client.get("/docs/swagger-ui-bundle.js")
    assert bundle.status_code == 200
    assert bundle.headers["content-type"].startswith("text/javascript")
    assert b"SwaggerUIBundle" in bundle.content
    assert len(bundle.content) > 500_000, "the whole bundle"
    assert service.client.get("/docs/swagger-ui.css").headers["content-type"].startswith("text/css")
    assert service.client.get("/docs/favicon.png").content.startswith(b"\x89PNG")
    assert_problem(service.client.get("/docs/other.js"), 404, "route-not-found")


# --- the page's wording, as pure functions -----------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.42, "0.4 s"),
        (12, "12 s"),
        (185, "3 min 5 s"),
        (7_800, "2 h 10 min"),
        (86_400, "1 d"),
        (90_061, "1 d 1 h"),
    ],
)
def test_durations_read_naturally(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(("size", "text"), [(512, "512 B"), (182_311, "178.0 KiB"), (3 * 1024**3, "3.0 GiB")])
def test_sizes_read_naturally(size: int, text: str) -> None:
    assert format_bytes(size) == text


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"state": "READY"}, []),
        ({"state": "RESTORING", "restore": {"mode": "bulk"}}, ["catching up"]),
        ({"state": "RESTORING", "restore": {"mode": "waiting"}}, ["another store's bulk restore"]),
        ({"state": "RESTORING", "restore": {"mode": "compacting"}}, ["restored files are being merged"]),
        ({"state": "RESTORING", "restore": {"mode": "warming"}}, ["read into the block cache"]),
        ({"state": "REBUILDING", "stale": True}, ["last good copy"]),
        ({"state": "READY", "seconds_since_last_contact": 300.0}, ["No answer from the broker for 5 min"]),
        (
            {"state": "READY", "last_error": "x", "seconds_since_last_contact": 300.0},
            ["Do what the error says"],
        ),
        ({"state": "FAILED", "last_error": "x"}, ["could not start"]),
    ],
)
def test_advice_fits_the_condition(info: dict[str, Any], expected: list[str]) -> None:
    said = advice(info)
    assert len(said) == len(expected), said
    for text, phrase in zip(said, expected, strict=True):
        assert phrase in text


def test_a_store_moving_to_ready_loses_its_progress_bar(scene: Service) -> None:
    customers = scene.stores["customers"]
    assert isinstance(customers, ShownStore)
    ready(customers, CUSTOMERS_END, 4_493_200)
    _, page = page_of(scene)
    assert not page.find("progress")
    assert page.find("section", data_store="customers", data_state="READY")
    assert customers.state is StoreState.READY


class NotStarted(ShownStore):
    """A store still being constructed: it has no status to give yet."""

    def status(self) -> Any:
        raise RuntimeError("not started")


def test_a_store_without_a_status_yet_is_shown_as_it_is(make_service: Callable[..., Service]) -> None:
    service = make_service({"products": NotStarted("products", StoreState.CREATED)})
    response, page = page_of(service)
    assert response.status_code == 200
    assert page.find("section", data_store="products", data_state="CREATED")
    assert "catching up with its topic" in page.text

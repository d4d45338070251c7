"""The status page and /docs in a real browser: headless Chromium, driven through its WebDriver.

Screenshots land in ``test-artifacts/status-page/`` (git-ignored) for a person to look at.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import Position
from tests.deploy.manifests import ROOT
from tests.support.browser import Browser
from tests.support.scenes import (
    CUSTOMERS_END,
    DISK_FULL,
    ShownStore,
    broken,
    ready,
    restoring,
    scene_stores,
    serve_scene,
)

ARTIFACTS = ROOT / "test-artifacts" / "status-page"
TOKEN = "browser-s3cret"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser(width=1100, height=800) as opened:
        yield opened


def same_origin(browser: Browser, url: str) -> list[str]:
    """The URLs the page loaded from anywhere but ``url`` (the service)."""
    return [loaded for loaded in browser.requested_urls() if not loaded.startswith(url + "/")]


def test_a_restoring_store_moves_to_ready_in_place_and_an_error_shows(browser: Browser) -> None:
    stores = scene_stores()
    customers = stores["customers"]
    with serve_scene(stores) as url:
        browser.open(url + "/")
        assert browser.store_state("customers") == "RESTORING"
        assert float(browser.attribute('[data-store="customers"] progress', "value") or 0) == 0.3
        assert browser.text('[data-store="customers"] .percent') == "30.0 %"
        assert browser.text('[data-store="customers"] .eta') == "about 15 s left"
        assert "1,950" in browser.text('[data-store="products"]'), "a counted store shows its exact count"
        assert "~1,975" not in browser.text('[data-store="products"]')
        browser.screenshot(ARTIFACTS / "restoring.png")
        # The page refreshes itself in place: a mark left on the window survives every refresh.
        browser.script("window.notReloaded = true")

        customers.show(restore=restoring(3_600_000, 900_000, 225_000.0, CUSTOMERS_END))
        browser.wait_for_text('[data-store="customers"] .percent', "80.0 %")
        assert browser.text('[data-store="customers"] .eta') == "about 4.0 s left"

        ready(customers, CUSTOMERS_END, 4_493_200)
        browser.wait_for_state("customers", "READY")
        assert not browser.texts('[data-store="customers"] progress')
        assert "all 3 READY" in browser.text(".summary")
        browser.screenshot(ARTIFACTS / "ready.png")

        broken(stores["positions"])
        browser.wait_for_text('[data-store="positions"] .problem', "No space left on device")
        problem = browser.text('[data-store="positions"] .problem')
        assert DISK_FULL in problem
        assert "What to do:" in problem
        assert "1 with an error" in browser.text(".summary")
        browser.screenshot(ARTIFACTS / "error.png")

        assert browser.script("return window.notReloaded") is True
        assert same_origin(browser, url) == []


def test_the_page_fits_a_phone(browser: Browser) -> None:
    with serve_scene(scene_stores()) as url, Browser(width=390, height=844, mobile=True) as phone:
        phone.open(url + "/")
        assert phone.store_state("customers") == "RESTORING"
        # Nothing wider than the screen: no sideways scrolling.
        assert phone.script("return document.documentElement.scrollWidth") <= phone.script(
            "return window.innerWidth"
        )
        cards = phone.script(
            "return [...document.querySelectorAll('section.store')].map(c => c.getBoundingClientRect().width)"
        )
        assert cards
        assert all(width <= 390 for width in cards)
        phone.screenshot(ARTIFACTS / "phone.png", full_page=True)


def test_with_tokens_the_browser_asks_for_one_and_keeps_it_in_the_tab(browser: Browser) -> None:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    tokens = {"mode": "tokens", "tokens": [{"name": "ops", "sha256": digest, "stores": ["products"]}]}
    with serve_scene(scene_stores(), auth=tokens) as url:
        browser.open(url + "/")
        assert "A token is needed" in browser.text("main")
        browser.page.find_element("name", "token").send_keys("wrong")
        browser.click("#token-form button")
        browser.wait_for_text("main", "The token sent was not accepted")

        browser.page.find_element("name", "token").send_keys(TOKEN)
        browser.click("#token-form button")
        browser.wait_for_state("products", "READY")
        # The token reads products only: the other stores are not shown.
        assert browser.store_state("customers") is None
        # A reload arrives without the header; the page asks again with the token kept in the tab.
        browser.page.refresh()
        browser.wait_for_state("products", "READY")

        browser.click("#forget-token")
        browser.wait_for_text("main", "A token is needed")
        assert same_origin(browser, url) == []


def test_swagger_ui_renders_from_the_service_alone(browser: Browser) -> None:
    stores = {"products": ShownStore("products", position=Position({0: 1}))}
    with serve_scene(stores) as url:
        browser.open(url + "/docs")
        browser.wait_for(
            lambda: len(browser.texts(".opblock-summary-path")) >= 5, "Swagger UI to list the operations"
        )
        paths = browser.texts(".opblock-summary-path")
        # The document is written out per configured store (service.openapi_stores).
        assert "/v1/stores/products/keys/{key}" in paths, paths
        browser.screenshot(ARTIFACTS / "docs.png")
        assert same_origin(browser, url) == []


def test_the_readme_shows_the_screenshots() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for scene in ("restoring", "ready", "error"):
        image = Path("docs") / f"status-page-{scene}.png"
        assert f"({image})" in readme, image
        assert (ROOT / image).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")

"""Headless Chromium driven through its WebDriver (the distribution's ``chromium`` and ``chromedriver``).

``make test`` installs both when they are missing. The flags keep the browser from reaching out
on its own (updates, sync, field trials), which a closed network refuses.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # the tests may run as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
WAIT_SECONDS = 20.0


def _executable(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} is not installed: `make test` installs it (Debian: chromium, chromium-driver)"
    return found


class Browser:
    """One headless Chromium window of ``width`` x ``height`` CSS pixels, with its own profile."""

    def __init__(self, width: int = 1200, height: int = 800, *, mobile: bool = False) -> None:
        self.width, self.height, self.mobile = width, height, mobile
        self._stack = contextlib.ExitStack()
        self.driver: webdriver.Chrome | None = None

    def __enter__(self) -> Browser:
        profile = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="chromium-"))
        options = webdriver.ChromeOptions()
        options.binary_location = _executable("chromium")
        size = f"--window-size={self.width},{self.height}"
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}", size):
            options.add_argument(flag)
        if self.mobile:
            metrics = {"width": self.width, "height": self.height, "pixelRatio": 2.0, "mobile": True}
            options.add_experimental_option("mobileEmulation", {"deviceMetrics": metrics})
        self.driver = webdriver.Chrome(service=Service(_executable("chromedriver")), options=options)
        self._stack.callback(self.driver.quit)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stack.close()

    @property
    def page(self) -> webdriver.Chrome:
        assert self.driver is not None, "use Browser as a context manager"
        return self.driver

    def open(self, url: str) -> None:
        self.page.get(url)
        self.wait_for(lambda: self.script("return document.readyState") == "complete", "the page to load")

    def script(self, source: str, *args: Any) -> Any:
        return self.page.execute_script(source, *args)

    def wait_for(self, condition: Any, what: str, timeout: float = WAIT_SECONDS) -> None:
        try:
            WebDriverWait(self.page, timeout, poll_frequency=0.1).until(lambda _: condition())
        except TimeoutException:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}") from None

    # Each read is one script run: the page replaces its body as it refreshes, so an element found
    # by one WebDriver call may be gone by the next.

    def texts(self, selector: str) -> list[str]:
        found = self.script(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText)", selector
        )
        return [str(text) for text in found]

    def text(self, selector: str) -> str:
        found = self.texts(selector)
        assert found, f"nothing on the page matches {selector!r}"
        return found[0]

    def attribute(self, selector: str, name: str) -> str | None:
        found = self.script(
            "const e = document.querySelector(arguments[0]); return e ? [e.getAttribute(arguments[1])] : []",
            selector,
            name,
        )
        assert found, f"nothing on the page matches {selector!r}"
        return None if found[0] is None else str(found[0])

    def store_state(self, store: str) -> str | None:
        state = self.script(
            'const e = document.querySelector(`[data-store="${arguments[0]}"]`);'
            " return e ? e.dataset.state : null",
            store,
        )
        return None if state is None else str(state)

    def click(self, selector: str) -> None:
        """Click the element ``selector`` finds (found and clicked in one script run)."""
        assert self.script(
            "const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e", selector
        ), f"nothing on the page matches {selector!r}"

    def wait_for_state(self, store: str, state: str) -> None:
        self.wait_for(lambda: self.store_state(store) == state, f"store {store} to show {state}")

    def wait_for_text(self, selector: str, text: str) -> None:
        self.wait_for(lambda: any(text in t for t in self.texts(selector)), f"{text!r} in {selector}")

    def requested_urls(self) -> list[str]:
        """Every URL the page has loaded or fetched (the document and its resources)."""
        entries = self.script(
            "return performance.getEntriesByType('navigation').concat("
            "performance.getEntriesByType('resource')).map(e => e.name)"
        )
        return [str(entry) for entry in entries]

    def screenshot(self, path: Path, *, full_page: bool = False) -> Path:
        """Save the window as a PNG at ``path`` (its folder created); ``full_page`` first makes the
        window as tall as the page."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if full_page:
            frame = self.script("return window.outerHeight - window.innerHeight")
            height = self.script("return document.documentElement.scrollHeight")
            self.page.set_window_size(self.width, int(frame) + int(height))
        assert self.page.save_screenshot(str(path)), f"Chromium saved no screenshot to {path}"
        return path

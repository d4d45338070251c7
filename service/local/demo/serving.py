"""The demo's service: run it in this process (uvicorn on a thread), and watch it restore."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from service.auth_settings import AuthSettings
from service.local.broker import free_port
from service.local.demo.console import Console, seconds
from service.local.demo.dataset import CUSTOMERS_TOPIC, PRODUCTS_TOPIC
from service.local.demo.errors import DemoError
from service.settings import HttpSettings, Settings
from service.store_settings import StoreSettings

HOST = "127.0.0.1"
STORES = (PRODUCTS_TOPIC, CUSTOMERS_TOPIC)


def demo_settings(bootstrap_servers: str, state_dir: Path, port: int) -> Settings:
    """The service configuration of the demo: both dimension tables as JSON stores, open on loopback."""
    return Settings(
        kafka={"bootstrap_servers": bootstrap_servers},
        state_dir=state_dir,
        http=HttpSettings(host=HOST, port=port),
        stores=[StoreSettings(name=name, topic=name, value_format="json") for name in STORES],
        auth=AuthSettings(mode="open"),
    )


def demo_config(bootstrap_servers: str) -> dict[str, Any]:
    """The demo's stores as ``statestore.yaml`` holds them (for shard processes of their own)."""
    return {
        "kafka": {"bootstrap_servers": bootstrap_servers},
        "stores": [{"name": name, "topic": name, "value_format": "json"} for name in STORES],
        "auth": {"mode": "open"},
    }


def import_service() -> None:
    """Import what serving and reading the demo's stores needs, now.

    Called before anything else runs beside the main thread: a Ctrl-C that lands while the main
    thread is importing (Python raises it wherever that thread is) can leave a module's import
    lock held, and the service's and Spark's threads would wait on it for good.
    """
    import uvicorn  # noqa: F401, PLC0415

    import clients  # noqa: F401, PLC0415
    import service.app  # noqa: PLC0415
    import service.connections  # noqa: F401, PLC0415


@contextlib.contextmanager
def running_service(bootstrap_servers: str, state_dir: Path) -> Iterator[str]:
    """Serve the demo stores on a free loopback port until the block ends; yields the base URL."""
    # Imported here: uvicorn and the app are only needed when the demo runs its own service.
    import uvicorn  # noqa: PLC0415

    from service.app import create_app  # noqa: PLC0415
    from service.connections import server_options  # noqa: PLC0415

    port = free_port(HOST)
    settings = demo_settings(bootstrap_servers, state_dir, port)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host=HOST,
            port=port,
            loop="uvloop",
            **server_options(settings),
            log_config=None,
            access_log=False,
            log_level="warning",
        )
    )
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            server.run()
        except BaseException as exc:  # reported by the main thread, which owns the output
            failure.append(exc)

    thread = threading.Thread(target=serve, name="statestore-demo-service", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                reason = f": {failure[0]}" if failure else ""
                raise DemoError(f"the service did not start on {HOST}:{port}{reason}")
            time.sleep(0.01)
        yield f"http://{HOST}:{port}"
    finally:
        # Stops the stores too (the app's lifespan owns them).
        server.should_exit = True
        thread.join(timeout=30)


def _restore_line(store: dict[str, Any]) -> str:
    name, state = store.get("name", "?"), store.get("state", "?")
    restore = store.get("restore")
    if restore:
        applied, remaining = restore.get("records_applied", 0), restore.get("records_remaining", 0)
        total = applied + remaining
        bar = "#" * int(restore.get("progress", 0.0) * 20)
        rate = restore.get("records_per_second") or 0
        return f"{name} {state} [{bar:<20}] {applied:,}/{total:,} records ({rate:,.0f}/s)"
    if state == "READY":
        # RocksDB's estimate: tombstones and overwrites not yet compacted make it drift.
        return f"{name} READY ~{store.get('approximate_num_keys', 0):,} keys (approx.)"
    error = store.get("last_error")
    return f"{name} {state}" + (f" ({error})" if error else "")


def wait_until_ready(console: Console, url: str, timeout: float = 300.0) -> dict[str, dict[str, Any]]:
    """Show restore progress from ``GET /v1/stores`` until ``/readyz`` is green; returns the stores."""
    started = time.monotonic()
    last_line, last_printed = "", 0.0
    with httpx.Client(base_url=url, timeout=5.0) as http:
        while True:
            elapsed = time.monotonic() - started
            try:
                ready = http.get("/readyz").status_code == 200
                stores = {s["name"]: s for s in http.get("/v1/stores").raise_for_status().json()["stores"]}
            except httpx.HTTPError as exc:
                if elapsed > timeout:
                    raise DemoError(f"the service at {url} does not answer: {exc}; is it running?") from exc
                time.sleep(0.5)
                continue
            line = "  |  ".join(_restore_line(stores[name]) for name in sorted(stores))
            if ready:
                console.progress(f"{line}  (ready after {seconds(elapsed)})", final=True)
                return stores
            failed = [s["name"] for s in stores.values() if s.get("state") == "FAILED"]
            if failed or elapsed > timeout:
                console.progress(line, final=True)
                why = f"store(s) {', '.join(failed)} FAILED" if failed else f"not ready after {timeout:g} s"
                raise DemoError(f"the service at {url} is not serving: {why}; see its log")
            if console.interactive:
                console.progress(line)
            elif line != last_line and time.monotonic() - last_printed > 2:
                console.progress(line, final=True)
                last_line, last_printed = line, time.monotonic()
            time.sleep(0.1)

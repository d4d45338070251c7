"""Stores whose status a test sets, and the scenes the status page is shown with (tests and screenshots).

``python -m tests.support.scenes DIR`` writes the screenshots linked from the README
(restoring, ready, error) into ``DIR`` with headless Chromium.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from service.app import create_app
from service.settings import Settings
from store import (
    IndexSpec,
    InMemoryStore,
    MemoryUsage,
    Position,
    RestoreMode,
    RestoreProgress,
    ShardingStatus,
    StoreState,
    StoreStatus,
)
from store.freshness import FreshnessHistogram, FreshnessSnapshot
from tests.support.server import serve_app


class ShownStore(InMemoryStore):
    """An in-memory store (real reads) whose status shows whatever the test sets in ``shown``."""

    def __init__(
        self,
        name: str,
        state: StoreState = StoreState.READY,
        indexes: Sequence[IndexSpec] = (),
        **shown: Any,
    ) -> None:
        super().__init__(name, state=state, indexes=indexes, keeps_history=bool(indexes))
        self.shown: dict[str, Any] = shown

    def show(self, state: StoreState | None = None, **shown: Any) -> None:
        """Change the state and the status fields shown from now on."""
        self.shown.update(shown)
        if state is not None:
            self.set_state(state)

    def status(self) -> StoreStatus:
        return dataclasses.replace(super().status(), **self.shown)


def _freshness(*delays: float) -> FreshnessSnapshot:
    histogram = FreshnessHistogram()
    for delay in delays:
        histogram.observe(int((1_000.0 - delay) * 1000), 1_000.0)
    return histogram.snapshot


def restoring(applied: int, remaining: int, rate: float, target: Position) -> RestoreProgress:
    return RestoreProgress(
        records_applied=applied,
        records_remaining=remaining,
        records_per_second=rate,
        target=target,
        mode=RestoreMode.BULK,
    )


PRODUCTS_END = Position({0: 661, 1: 652, 2: 662})
CUSTOMERS_END = Position({0: 1_500_000, 1: 1_500_000, 2: 1_500_000})
DISK_FULL = (
    'store "positions": cannot write the store at /var/lib/statestore/positions/db (IO error: No space'
    " left on device); free space on its volume (or grow it): the store resumes by itself once it can"
    " write again. Materializing is paused; reads go on at position 0:8120,1:8004"
)

STORE_SETTINGS = [
    {"name": "products", "topic": "products", "value_format": "json"},
    {"name": "customers", "topic": "crm.customers.v1", "value_format": "json"},
    {
        "name": "positions",
        "topic": "positions",
        "value_format": "json",
        "indexes": [{"name": "by_ticker", "field": "ticker"}],
        "history": {"retention_ms": 86_400_000},
    },
]


def memory(block_cache_used: int, memtables: int, cached_keys: int) -> MemoryUsage:
    return MemoryUsage(256 * 1024 * 1024, block_cache_used, memtables, cached_keys)


def scene_stores() -> dict[str, ShownStore]:
    """products READY, customers restoring (bulk, 30 %), positions READY with an index and history."""
    products = ShownStore(
        "products",
        position=PRODUCTS_END,
        end_offsets=PRODUCTS_END,
        approximate_num_keys=1_975,
        counted_keys=1_950,
        counted_keys_position=PRODUCTS_END,
        size_on_disk_bytes=182_311,
        seconds_since_last_contact=0.4,
        records_applied_total=1_975,
        memory=memory(2_100_000, 310_000, 1_200),
        sharding=ShardingStatus(1, 0, "murmur2", 3, records_checked=1_975),
        freshness=_freshness(0.08, 0.12, 0.3),
    )
    products.apply([(0, 0, b"p-0001", b'{"name":"Pen","price":1.5}')])
    customers = ShownStore(
        "customers",
        StoreState.RESTORING,
        position=Position({0: 450_000, 1: 451_000, 2: 449_000}),
        end_offsets=CUSTOMERS_END,
        lag={0: 1_050_000, 1: 1_049_000, 2: 1_051_000},
        restore=restoring(1_350_000, 3_150_000, 212_500.0, CUSTOMERS_END),
        approximate_num_keys=1_338_000,
        counted_keys=None,
        counted_keys_position=None,
        size_on_disk_bytes=141_300_000,
        seconds_since_last_contact=0.1,
        memory=memory(88_000_000, 64_000_000, 0),
    )
    positions_end = Position({0: 8_120, 1: 8_004})
    positions = ShownStore(
        "positions",
        indexes=[IndexSpec("by_ticker", "ticker")],
        position=positions_end,
        end_offsets=positions_end,
        approximate_num_keys=12_040,
        counted_keys=None,  # not counted yet
        counted_keys_position=None,
        size_on_disk_bytes=2_480_000,
        seconds_since_last_contact=0.3,
        memory=memory(9_600_000, 1_100_000, 5_400),
    )
    positions.apply([(0, 0, b"pos-1", b'{"ticker":"ACME","qty":10}')])
    return {"products": products, "customers": customers, "positions": positions}


def ready(store: ShownStore, end: Position, keys: int) -> None:
    """Show ``store`` READY at ``end``."""
    store.show(
        StoreState.READY,
        restore=None,
        position=end,
        end_offsets=end,
        lag=dict.fromkeys(end, 0),
        approximate_num_keys=keys,
    )


def broken(store: ShownStore) -> None:
    """Show ``store`` READY but unable to write: a full disk, the broker's records piling up."""
    store.show(last_error=DISK_FULL, seconds_since_last_contact=95.0, lag={0: 5_210, 1: 4_870})


@contextlib.contextmanager
def serve_scene(stores: dict[str, ShownStore], **settings: Any) -> Iterator[str]:
    """Serve ``stores`` with the scene's settings under a real uvicorn; yields the base URL."""
    configs = [config for config in STORE_SETTINGS if config["name"] in stores]
    app = create_app(Settings(stores=configs, **settings), stores)
    with serve_app(app) as url:
        yield url


def write_screenshots(directory: Path) -> list[Path]:
    """The README's screenshots: a store restoring, every store READY, a store in error."""
    from tests.support.browser import Browser  # noqa: PLC0415 (only the script needs it here)

    directory.mkdir(parents=True, exist_ok=True)
    stores = scene_stores()
    written = []
    with serve_scene(stores) as url, Browser(width=1100, height=720) as browser:
        browser.open(url + "/")
        written.append(browser.screenshot(directory / "status-page-restoring.png", full_page=True))
        ready(stores["customers"], CUSTOMERS_END, 4_493_200)
        browser.wait_for_state("customers", "READY")
        written.append(browser.screenshot(directory / "status-page-ready.png", full_page=True))
        broken(stores["positions"])
        browser.wait_for_text("#store-positions .problem", "No space left on device")
        written.append(browser.screenshot(directory / "status-page-error.png", full_page=True))
    return written


if __name__ == "__main__":
    for path in write_screenshots(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")):
        print(path)

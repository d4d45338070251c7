"""The demo's one-line store summaries: progress from the service, key counts labelled approximate."""

from __future__ import annotations

from service.local.demo.serving import _restore_line


def test_a_ready_store_shows_its_key_count_as_an_estimate() -> None:
    line = _restore_line({"name": "products", "state": "READY", "approximate_num_keys": 1950})
    assert line == "products READY ~1,950 keys (approx.)"


def test_a_restoring_store_shows_the_services_progress() -> None:
    restore = {"records_applied": 300, "records_remaining": 700, "records_per_second": 50.0, "progress": 0.5}
    line = _restore_line({"name": "customers", "state": "RESTORING", "restore": restore})
    assert line == f"customers RESTORING [{'#' * 10:<20}] 300/1,000 records (50/s)"

"""Metric names follow Prometheus' conventions, and every name the docs give is one the service exports."""

from __future__ import annotations

import re

import pytest

from tests.deploy.manifests import ROOT
from tests.support.metrics import exported_names, scrape_every_family

DOCUMENTS = [
    "docs/how-to/operations.md",
    "docs/reference/http-api.md",
    "docs/how-to/deployment.md",
    "README.md",
]
# A quoted name is a string of some other API (e.g. a Spark data source format), not a metric.
METRIC_NAME = re.compile(r"(?<![\"'])\bstatestore_[a-z0-9_]*[a-z0-9]\b(?![\"'])")


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return exported_names(scrape_every_family())


def documented_names() -> dict[str, set[str]]:
    """Every ``statestore_...`` name each document mentions."""
    return {
        document: set(METRIC_NAME.findall((ROOT / document).read_text(encoding="utf-8")))
        for document in DOCUMENTS
    }


def test_the_docs_name_metrics() -> None:
    assert len(documented_names()["docs/how-to/operations.md"]) >= 15


def test_every_documented_metric_name_is_exported(exported: set[str]) -> None:
    unknown = {document: sorted(names - exported) for document, names in documented_names().items()}
    assert {document: names for document, names in unknown.items() if names} == {}


def test_counters_end_in_total_and_timestamps_are_unix_seconds(exported: set[str]) -> None:
    assert "statestore_http_requests_total" in exported
    assert "statestore_records_applied_total" in exported
    assert "statestore_http_requests_refused_total" in exported
    assert "statestore_last_contact_timestamp_seconds" in exported
    assert not [name for name in exported if "seconds_since" in name]


# prometheus_client's standard families: the process (memory, CPU, file descriptors) and Python.
STANDARD_PREFIXES = ("process_", "python_")


def test_exported_names_follow_the_conventions(exported: set[str]) -> None:
    for name in exported:
        assert name.startswith(("statestore_", *STANDARD_PREFIXES)), name
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name

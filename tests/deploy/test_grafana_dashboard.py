"""The chart's Grafana dashboard: valid JSON in a ConfigMap the sidecar finds, every query PromQL
that parses, naming only metrics the service exports (read from a real scrape)."""

from __future__ import annotations

import json
import re
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.manifests import CHART, KUBERNETES_VERSION, NAMESPACE, lint, render
from tests.deploy.promql import selectors
from tests.support.metrics import exported_names, scrape_every_family

ENABLED: dict[str, Any] = {"grafanaDashboard": {"enabled": True}}
# What Grafana puts in place of its variables before a query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$namespace": NAMESPACE, "$pod": ".+"}


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return exported_names(scrape_every_family())


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "files" / "dashboard.json").read_text(encoding="utf-8"))
    return loaded


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """Every panel's queries and the variables' queries, as (where, PromQL) with variables filled in."""
    found = [(panel["title"], target["expr"]) for panel in board["panels"] for target in panel["targets"]]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            # label_values(SELECTOR, label) is Grafana's, not PromQL: its selector is the query.
            found.append((variable["name"], re.fullmatch(r"label_values\((.+), *\w+\)", query["query"])[1]))
    filled = []
    for where, expr in found:
        text = expr
        for variable, value in GRAFANA_VARIABLES.items():
            text = text.replace(variable, value)
        filled.append((where, text))
    return filled


def test_off_by_default() -> None:
    names = [config_map["metadata"]["name"] for config_map in render({}).of_kind("ConfigMap")]
    assert [name for name in names if name.endswith("-dashboard")] == []


def test_the_config_map_holds_the_dashboard_with_the_sidecar_label() -> None:
    chart = render(ENABLED)
    config_map = chart.one("ConfigMap", "-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == NAMESPACE
    assert json.loads(config_map["data"]["statestore.json"]) == dashboard()
    kubernetes_validate.validate(config_map, KUBERNETES_VERSION, strict=True)
    assert lint(ENABLED) == []


def test_label_namespace_and_annotations_follow_the_values() -> None:
    values = {
        "grafanaDashboard": {
            "enabled": True,
            "label": "dashboards",
            "labelValue": "statestore",
            "namespace": "monitoring",
            "annotations": {"grafana_folder": "Data"},
        }
    }
    config_map = render(values).one("ConfigMap", "-dashboard")
    assert config_map["metadata"]["labels"]["dashboards"] == "statestore"
    assert "grafana_dashboard" not in config_map["metadata"]["labels"]
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Data"}
    assert lint({"grafanaDashboard": {"enabled": True, "label": ""}})


def test_the_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["uid"] == "statestore"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        # Panels sit inside Grafana's 24-column grid.
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]


def test_every_query_parses_and_names_exported_metrics(exported: set[str]) -> None:
    board = dashboard()
    named: set[str] = set()
    for where, expr in queries(board):
        names = {selector.name for selector in selectors(expr)}
        assert names, where
        assert names <= exported, (where, sorted(names - exported))
        named |= names
    # The dashboard covers the process's memory as well as the stores' own figures.
    assert {"process_resident_memory_bytes", "statestore_state", "statestore_lag_records"} <= named


def test_the_check_catches_a_broken_or_unknown_query(exported: set[str]) -> None:
    with pytest.raises(ValueError):
        selectors("sum(rate(statestore_http_requests_total[1m])")
    names = {selector.name for selector in selectors("rate(statestore_requests_total[1m])")}
    assert not names <= exported

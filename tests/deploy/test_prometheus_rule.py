"""The chart's PrometheusRule: the alerts of docs/how-to/operations.md, rendered, linted and checked.

The PrometheusRule kind comes from the Prometheus Operator's CRDs, not Kubernetes' own schemas: its
structure is checked against the part of the CRD's schema that rules use, every expression is parsed
as PromQL, and every metric it names is one the service exports (read from a real scrape).
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import promql_parser
import pytest

from tests.deploy.manifests import NAMESPACE, RELEASE, ROOT, Rendered, lint, render
from tests.deploy.promql import selectors
from tests.support.markdown import anchors
from tests.support.metrics import exported_names, scrape_every_family

ENABLED: dict[str, Any] = {"prometheusRule": {"enabled": True}}
HEADLESS_JOB = f"{RELEASE}-statestore-headless"
# Metrics from outside the service that an alert may use (the kubelet's volume statistics).
FOREIGN_METRICS = {"kubelet_volume_stats_used_bytes", "kubelet_volume_stats_capacity_bytes"}
DURATION = r"^([0-9]+(ms|s|m|h|d|w|y))+$"
LABELS = {"type": "object", "additionalProperties": {"type": "string"}}

# The part of the monitoring.coreos.com/v1 PrometheusRule CRD's schema that alerting rules use.
RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 253},
                "labels": LABELS,
            },
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": {"type": "string", "pattern": DURATION},
                            "rules": {
                                "type": "array",
                                "minItems": 1,
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["alert", "expr", "labels", "annotations"],
                                    "properties": {
                                        "alert": {"type": "string", "pattern": r"^Statestore[A-Z][A-Za-z]+$"},
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": {"type": "string", "pattern": DURATION},
                                        "keep_firing_for": {"type": "string", "pattern": DURATION},
                                        "labels": {
                                            **LABELS,
                                            "required": ["severity"],
                                            "properties": {"severity": {"enum": ["warning", "critical"]}},
                                        },
                                        "annotations": {**LABELS, "required": ["summary", "description"]},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


@pytest.fixture(scope="module")
def chart() -> Rendered:
    return render(ENABLED)


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return exported_names(scrape_every_family())


def rules_of(chart: Rendered) -> list[dict[str, Any]]:
    return [rule for group in chart.one("PrometheusRule")["spec"]["groups"] for rule in group["rules"]]


def matchers(selector: promql_parser.VectorSelector) -> dict[str, str]:
    return {m.name: m.value for m in selector.matchers.matchers}


def documented_alerts() -> set[str]:
    text = (ROOT / "docs" / "how-to" / "operations.md").read_text(encoding="utf-8")
    section = text.split("## Alerts", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(Statestore[A-Za-z]+)` \|", section, flags=re.MULTILINE))


def test_off_by_default() -> None:
    assert render({}).of_kind("PrometheusRule") == []


@pytest.mark.parametrize(
    "values",
    [ENABLED, {"prometheusRule": {"enabled": True}, "persistence": {"enabled": False}}],
    ids=["persistent", "ephemeral"],
)
def test_helm_lint_strict_is_clean(values: dict[str, Any]) -> None:
    assert lint(values) == []


def test_the_rule_has_the_structure_the_operator_accepts(chart: Rendered) -> None:
    rule = chart.one("PrometheusRule")
    jsonschema.validate(rule, RULE_SCHEMA)
    names = [r["alert"] for r in rules_of(chart)]
    assert len(names) == len(set(names)), names


def test_the_structure_check_catches_a_broken_rule(chart: Rendered) -> None:
    rule = chart.one("PrometheusRule")
    broken = {**rule, "spec": {"groups": [{"name": "g", "rules": [{"alert": "StatestoreX", "expr": "up"}]}]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, RULE_SCHEMA)


def test_the_alerts_are_the_documented_ones(chart: Rendered) -> None:
    assert {rule["alert"] for rule in rules_of(chart)} == documented_alerts()
    assert len(documented_alerts()) >= 6


def test_every_expression_parses_and_names_exported_metrics(chart: Rendered, exported: set[str]) -> None:
    for rule in rules_of(chart):
        names = {selector.name for selector in selectors(rule["expr"])}
        assert names, rule["alert"]
        ours = {name for name in names if name.startswith("statestore_")}
        assert ours <= exported, (rule["alert"], sorted(ours - exported))
        assert names - ours <= FOREIGN_METRICS, (rule["alert"], sorted(names - ours))


def test_the_name_check_catches_a_metric_the_service_does_not_export(exported: set[str]) -> None:
    names = {selector.name for selector in selectors("time() - statestore_seconds_since_last_contact > 60")}
    assert not names <= exported
    with pytest.raises(ValueError, match="parenthesis"):
        selectors("sum(rate(statestore_http_requests_total[5m])")


def test_every_selector_is_scoped_to_the_release(chart: Rendered) -> None:
    for rule in rules_of(chart):
        for selector in selectors(rule["expr"]):
            scope = matchers(selector)
            assert scope["namespace"] == NAMESPACE, rule["alert"]
            if selector.name.startswith("statestore_"):
                assert scope["job"] == HEADLESS_JOB, rule["alert"]
            else:
                assert scope["persistentvolumeclaim"] == f"state-{RELEASE}-statestore-[0-9]+", rule["alert"]


def test_the_headless_service_is_the_job_the_service_monitor_scrapes() -> None:
    chart = render({**ENABLED, "serviceMonitor": {"enabled": True}})
    monitor_selector = chart.one("ServiceMonitor")["spec"]["selector"]["matchLabels"]
    scraped = [
        service["metadata"]["name"]
        for service in chart.of_kind("Service")
        if monitor_selector.items() <= service["metadata"]["labels"].items()
    ]
    # The Prometheus Operator names the job after the Service it scrapes.
    assert scraped == [HEADLESS_JOB]
    claims = chart.statefulset["spec"]["volumeClaimTemplates"]
    assert [f"{claim['metadata']['name']}-{chart.statefulset['metadata']['name']}" for claim in claims] == [
        f"state-{RELEASE}-statestore"
    ]


def test_thresholds_and_labels_follow_the_values() -> None:
    chart = render(
        {
            "prometheusRule": {
                "enabled": True,
                "labels": {"release": "prometheus"},
                "alertLabels": {"team": "data"},
                "notReadyFor": "3h",
                "brokerSilentSeconds": 300,
                "lateSeconds": 15,
                "staleFor": "2h",
                "refusedRatio": 0.05,
                "volumeUsedRatio": 0.9,
            }
        }
    )
    assert chart.one("PrometheusRule")["metadata"]["labels"]["release"] == "prometheus"
    rules = {rule["alert"]: rule for rule in rules_of(chart)}
    assert all(rule["labels"]["team"] == "data" for rule in rules.values())
    assert rules["StatestoreStoreNotReady"]["for"] == "3h"
    assert "3h" in rules["StatestoreStoreNotReady"]["annotations"]["summary"]
    assert rules["StatestoreServingStaleCopy"]["for"] == "2h"
    assert rules["StatestoreBrokerContactLost"]["expr"].endswith("> 300")
    assert rules["StatestoreRecordsLate"]["expr"].endswith("> 15")
    assert rules["StatestoreRefusingRequests"]["expr"].endswith("> 0.05")
    assert rules["StatestoreVolumeFilling"]["expr"].endswith("> 0.9")


def test_no_volume_alert_without_volumes() -> None:
    chart = render({**ENABLED, "persistence": {"enabled": False}})
    assert "StatestoreVolumeFilling" not in {rule["alert"] for rule in rules_of(chart)}


def test_alert_texts_keep_prometheus_templates_for_prometheus(chart: Rendered) -> None:
    rules = {rule["alert"]: rule for rule in rules_of(chart)}
    assert "{{ $labels.store }}" in rules["StatestoreStoreFailed"]["annotations"]["summary"]


@pytest.mark.parametrize(
    "values",
    [
        {"prometheusRule": {"enabled": True, "notReadyFor": "an hour"}},
        {"prometheusRule": {"enabled": True, "refusedRatio": 2}},
        {"prometheusRule": {"enabled": True, "alertLabels": {"team": 7}}},
    ],
)
def test_values_schema_rejects_bad_rule_values(values: dict[str, Any]) -> None:
    assert lint(values)


def test_every_alert_has_a_runbook_section_in_the_operations_page(chart: Rendered) -> None:
    page = ROOT / "docs" / "how-to" / "operations.md"
    sections = anchors(page.read_text(encoding="utf-8"))
    base = "https://github.com/statestore/statestore/blob/main/docs/how-to/operations.md#"
    runbooks = {rule["alert"]: rule["annotations"]["runbook_url"] for rule in rules_of(chart)}
    assert len(runbooks) == len(documented_alerts())
    for alert, url in runbooks.items():
        assert url.startswith(base), (alert, url)
        assert url.removeprefix(base) in sections, (alert, url)


def test_the_runbook_check_knows_the_page_anchors() -> None:
    sections = anchors((ROOT / "docs" / "how-to" / "operations.md").read_text(encoding="utf-8"))
    assert "corruption-in-a-stores-files" in sections
    assert "the-disk-is-full" in sections
    assert "the-disks-are-full" not in sections


def test_the_runbook_page_follows_the_values() -> None:
    chart = render({"prometheusRule": {"enabled": True, "runbookUrl": "https://wiki.example/statestore"}})
    urls = [rule["annotations"]["runbook_url"] for rule in rules_of(chart)]
    assert len(urls) == len(documented_alerts())
    assert all(url.startswith("https://wiki.example/statestore#") for url in urls)
    assert lint({"prometheusRule": {"enabled": True, "runbookUrl": "https://wiki.example/ops#x"}})

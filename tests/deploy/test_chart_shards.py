"""The chart with ``shards``: one StatefulSet, Service, headless Service and PDB per shard, each pod told
its shard, and the client URL template in NOTES. Linted, rendered and validated against the Kubernetes
schemas like the unsharded chart (tests/deploy/test_chart.py, whose value sets all have one shard)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from service.settings import load_settings
from tests.deploy.manifests import (
    KUBERNETES_VERSION,
    NAMESPACE,
    RELEASE,
    Rendered,
    container_environment,
    lint,
    pod_config_text,
    render,
)

PROFILES = {"name": "profiles", "topic": "crm.profiles", "value_format": "json", "partitioner": "crc32"}

VALUE_SETS: dict[str, dict[str, Any]] = {
    "one-shard": {"shards": 1, "replicasPerShard": 3, "stores": [PROFILES]},
    "three-shards": {
        "shards": 3,
        "replicasPerShard": 2,
        "stores": [PROFILES, {"name": "products", "topic": "products", "value_format": "json"}],
        "podDisruptionBudget": {"minAvailable": 1},
        "serviceMonitor": {"enabled": True},
        "networkPolicy": {"enabled": True},
    },
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, Rendered]:
    return {name: render(values) for name, values in VALUE_SETS.items()}


def named(chart: Rendered, kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in chart.of_kind(kind)}


def pod_labels(statefulset: dict[str, Any]) -> dict[str, str]:
    return dict(statefulset["spec"]["template"]["metadata"]["labels"])


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_lint_and_kubernetes_schemas_accept_the_sharded_chart(
    rendered: dict[str, Rendered], value_set: str
) -> None:
    assert lint(VALUE_SETS[value_set]) == []
    for document in rendered[value_set].documents:
        if not document["apiVersion"].startswith("monitoring.coreos.com/"):
            kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_one_shard_is_the_unsharded_layout(rendered: dict[str, Rendered]) -> None:
    chart = rendered["one-shard"]
    assert list(named(chart, "StatefulSet")) == [f"{RELEASE}-statestore"]
    assert chart.statefulset["spec"]["replicas"] == 3
    assert "statestore.io/shard" not in pod_labels(chart.statefulset)
    assert not [e for e in chart.container.get("env", []) if "SHARDING" in e["name"]]
    assert sorted(named(chart, "Service")) == [f"{RELEASE}-statestore", f"{RELEASE}-statestore-headless"]


def test_each_shard_has_its_statefulset_services_and_pdb(rendered: dict[str, Rendered]) -> None:
    chart = rendered["three-shards"]
    statefulsets = named(chart, "StatefulSet")
    services = named(chart, "Service")
    budgets = named(chart, "PodDisruptionBudget")
    assert sorted(statefulsets) == [f"{RELEASE}-statestore-{shard}" for shard in range(3)]
    for shard in range(3):
        name = f"{RELEASE}-statestore-{shard}"
        statefulset = statefulsets[name]
        assert statefulset["spec"]["replicas"] == 2
        assert statefulset["spec"]["serviceName"] == f"{name}-headless"
        assert pod_labels(statefulset)["statestore.io/shard"] == str(shard)
        assert selects(statefulset["spec"]["selector"]["matchLabels"], pod_labels(statefulset))
        # A Service's endpoints are exactly the replicas of one shard: its selector picks this
        # shard's pods and no other StatefulSet's.
        for service in (services[name], services[f"{name}-headless"]):
            chosen = [
                n for n, s in statefulsets.items() if selects(service["spec"]["selector"], pod_labels(s))
            ]
            assert chosen == [name]
        chosen = [
            n
            for n, s in statefulsets.items()
            if selects(budgets[name]["spec"]["selector"]["matchLabels"], pod_labels(s))
        ]
        assert chosen == [name]
        assert budgets[name]["spec"]["minAvailable"] == 1
        # Replicas of one shard prefer different nodes.
        term = statefulset["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ][0]["podAffinityTerm"]
        assert term["labelSelector"]["matchLabels"]["statestore.io/shard"] == str(shard)
    # The ServiceMonitor scrapes every shard's pods through their headless Services, each once.
    monitor = chart.one("ServiceMonitor")["spec"]["selector"]["matchLabels"]
    scraped = sorted(
        name for name, service in services.items() if selects(monitor, service["metadata"]["labels"])
    )
    assert scraped == [f"{RELEASE}-statestore-{shard}-headless" for shard in range(3)]
    # The NetworkPolicy covers every shard's pods.
    policy = chart.one("NetworkPolicy")["spec"]["podSelector"]["matchLabels"]
    assert all(selects(policy, pod_labels(s)) for s in statefulsets.values())


def test_each_pod_is_told_its_shard_and_the_service_loads_it(
    rendered: dict[str, Rendered], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chart = rendered["three-shards"]
    config = tmp_path / "statestore.yaml"
    config.write_text(pod_config_text(chart, tmp_path / "mounts"), encoding="utf-8")
    for shard, statefulset in enumerate(named(chart, "StatefulSet").values()):
        container = statefulset["spec"]["template"]["spec"]["containers"][0]
        for name in [n for n in os.environ if n.upper().startswith("STATESTORE_")]:
            monkeypatch.delenv(name)
        for name, value in container_environment(container, {}).items():
            monkeypatch.setenv(name, value)
        settings = load_settings(config)
        assert (settings.sharding.shards, settings.sharding.shard) == (3, shard)
        assert [(s.name, s.partitioner) for s in settings.stores] == [
            ("profiles", "crc32"),
            ("products", "murmur2"),
        ]


def test_notes_give_the_client_url_template(rendered: dict[str, Rendered]) -> None:
    notes = rendered["three-shards"].notes
    assert f'StatestoreClient("http://{RELEASE}-statestore-{{shard}}.{NAMESPACE}.svc:8080")' in notes
    assert f"statefulset/{RELEASE}-statestore-0" in notes
    assert "p % 3 == s" in notes
    assert "profiles <- crm.profiles (crc32), products <- products (murmur2)" in notes
    # The helm test reads through shard 0's Service.
    test_pod = rendered["three-shards"].one("Pod")
    environment = {e["name"]: e.get("value") for e in test_pod["spec"]["containers"][0]["env"]}
    assert environment["TEST_URL"] == f"http://{RELEASE}-statestore-0.{NAMESPACE}.svc:8080"


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"shards": 0}, "shards"),
        ({"replicasPerShard": -1}, "replicasPerShard"),
        ({"stores": [{**PROFILES, "partitioner": "djb2"}]}, "partitioner"),
    ],
)
def test_values_schema_refuses_impossible_sharding(values: dict[str, Any], complaint: str) -> None:
    assert any(complaint in finding["error"] for finding in lint(values))

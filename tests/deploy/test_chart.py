"""The Helm chart: lint, render and validate it for realistic value sets, and check what it promises.

Rendering and linting go through Helm's own Go SDK; every manifest is validated against the strict
Kubernetes schemas of a recent release; the rendered ``statestore.yaml`` is loaded by the service's
own settings loader with the environment the kubelet would give the pod.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from service.auth_settings import load_tokens_file
from service.exceptions import ConfigError
from service.settings import load_settings, store_configs
from tests.deploy.manifests import (
    CHART,
    KUBERNETES_VERSION,
    RELEASE,
    Rendered,
    container_environment,
    lint,
    pod_config_text,
    render,
)

STATE_DIR = "/var/lib/statestore"
CONFIG_PATH = "/etc/statestore/statestore.yaml"

ANALYTICS_HASH = hashlib.sha256(b"analytics-token").hexdigest()
BILLING_HASH = hashlib.sha256(b"billing-token").hexdigest()
SCRAPE_HASH = hashlib.sha256(b"scrape-token").hexdigest()
INLINE_HASH = hashlib.sha256(b"dashboards-token").hexdigest()
KAFKA_PASSWORD = "s3cr3t-kafka-password"
DIGEST = "sha256:" + hashlib.sha256(b"an image").hexdigest()

# Contents of the Secrets the value sets refer to, as a cluster would hold them.
SECRETS: dict[str, dict[str, str]] = {
    "kafka-credentials": {"username": "statestore", "password": KAFKA_PASSWORD},
    "statestore-tokens": {"analytics": ANALYTICS_HASH, "billing": BILLING_HASH, "prometheus": SCRAPE_HASH},
}

TWO_STORES = [
    {"name": "products", "topic": "products", "value_format": "json"},
    {"name": "customers", "topic": "crm.customers.v1", "value_format": "json"},
]

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "sasl-ssl-kafka": {
        "kafka": {
            "bootstrapServers": "b-1.kafka.internal:9096,b-2.kafka.internal:9096",
            "config": {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "ssl.ca.location": "/etc/statestore/kafka-tls/ca.crt",
                "fetch.queue.backoff.ms": 10,
            },
            "credentials": {"existingSecret": "kafka-credentials"},
            "tls": {"existingSecret": "kafka-ca"},
        },
        "stores": TWO_STORES,
    },
    "tokens-auth": {
        "stores": TWO_STORES,
        "auth": {
            "mode": "tokens",
            "existingSecret": "statestore-tokens",
            "tokens": [
                {"name": "analytics", "stores": ["products", "customers"], "secretKey": "analytics"},
                {"name": "billing", "stores": ["customers"], "secretKey": "billing"},
                {"name": "dashboards", "stores": ["products"], "sha256": INLINE_HASH},
                {"name": "prometheus", "stores": ["*"], "secretKey": "prometheus"},
            ],
            "metrics": "token",
        },
        "serviceMonitor": {
            "enabled": True,
            "bearerTokenSecret": {"name": "statestore-scrape", "key": "token"},
        },
    },
    "inline-token-hashes": {
        "auth": {
            "mode": "tokens",
            "tokens": [{"name": "dashboards", "stores": ["products"], "sha256": INLINE_HASH}],
        },
    },
    "three-replicas-monitored": {
        "replicaCount": 3,
        "image": {
            "repository": "registry.example.com/data/statestore",
            "tag": "1.4.2",
            "pullPolicy": "Always",
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "stores": [
            *TWO_STORES,
            {
                "name": "positions",
                "topic": "positions",
                "value_format": "json",
                "indexes": [{"name": "by_ticker", "field": "ticker"}],
                "history": {"retention_ms": 86_400_000},
                "engine": {"block_cache_bytes": "2GiB"},
            },
        ],
        "limits": {"max_batch_keys": 20_000, "max_scan_limit": 5_000},
        "engine": {
            "block_cache_bytes": "512MiB",
            "read_cache_entries": 50_000,
            "max_concurrent_bulk_restores": 2,
        },
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "12Gi"}},
        "persistence": {"storageClass": "fast-ssd", "size": "200Gi"},
        "podDisruptionBudget": {"minAvailable": 2},
        "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prometheus"}},
        "startupProbe": {
            "enabled": True,
            "path": "/readyz",
            "periodSeconds": 30,
            "timeoutSeconds": 5,
            "failureThreshold": 480,
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "statestore"}},
            },
        ],
    },
    "tls-listener": {
        "http": {"tls": {"enabled": True, "existingSecret": "statestore-tls"}},
        "serviceMonitor": {
            "enabled": True,
            "tlsConfig": {
                "serverName": "statestore.data.svc",
                "ca": {"secret": {"name": "statestore-tls", "key": "ca.crt"}},
            },
        },
    },
    "registry-digest-labels-network-policy": {
        "image": {"registry": "registry.example.com", "repository": "data/statestore", "digest": DIGEST},
        "commonLabels": {"team": "data", "cost-center": "cc-42"},
        "stores": TWO_STORES,
        "networkPolicy": {
            "enabled": True,
            "allowExternal": False,
            "extraIngress": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "spark"}}}
            ],
            "extraEgress": [{"ports": [{"port": 9094, "protocol": "TCP"}]}],
        },
        "helmTest": {"store": "customers"},
    },
    "openshift-restricted": {
        "compatibility": {"openshift": {"adaptSecurityContext": "force"}},
        "auth": {
            "mode": "tokens",
            "tokens": [{"name": "dashboards", "stores": ["products"], "sha256": INLINE_HASH}],
        },
        "helmTest": {"bearerTokenSecret": {"name": "statestore-test", "key": "token"}},
    },
    "explicitly-open": {"auth": {"mode": "open"}},
    "mtls-cert-manager": {
        "stores": TWO_STORES,
        "http": {
            "tls": {
                "enabled": True,
                "certManager": {
                    "enabled": True,
                    "issuerRef": {"name": "internal-ca", "kind": "ClusterIssuer"},
                    "dnsNames": ["statestore.example.com"],
                },
                "clientCA": {"enabled": True},
            }
        },
        "auth": {
            "mode": "tokens",
            "tokens": [{"name": "dashboards", "stores": ["products"], "sha256": INLINE_HASH}],
            "certificates": [
                {
                    "name": "etl",
                    "commonName": "spark-etl",
                    "stores": ["customers"],
                    "secretName": "etl-client",
                },
                {"name": "ops", "commonName": "ops.example.com", "stores": ["*"]},
            ],
        },
    },
    "ephemeral-minimal": {
        "persistence": {"enabled": False},
        "serviceAccount": {"create": False},
        "podAntiAffinity": "none",
        "startupProbe": {
            "enabled": False,
            "path": "/readyz",
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 1,
        },
        "podDisruptionBudget": {"enabled": False},
        "extraEnv": [{"name": "STATESTORE_LIMITS__MAX_KEY_BYTES", "value": "1024"}],
    },
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, Rendered]:
    return {name: render(values) for name, values in VALUE_SETS.items()}


@pytest.fixture
def load_pod_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Factory: the service's Settings as a pod of ``chart`` would load them (file + environment)."""

    def load(chart: Rendered) -> Any:
        config = tmp_path / "statestore.yaml"
        config.write_text(pod_config_text(chart, tmp_path / "mounts"), encoding="utf-8")
        for name in [n for n in os.environ if n.upper().startswith("STATESTORE_")]:
            monkeypatch.delenv(name)
        for name, value in container_environment(chart.container, SECRETS).items():
            monkeypatch.setenv(name, value)
        return load_settings(config)

    return load


# --- lint and schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_helm_lint_strict_is_clean(value_set: str) -> None:
    assert lint(VALUE_SETS[value_set]) == []


def test_lint_reports_values_that_break_the_schema() -> None:
    findings = lint({"replicaCount": "three"})
    assert findings
    assert any("/replicaCount" in finding["error"] for finding in findings)


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_manifest_is_valid_kubernetes(rendered: dict[str, Rendered], value_set: str) -> None:
    chart = rendered[value_set]
    kinds = sorted(doc["kind"] for doc in chart.documents)
    assert {"ConfigMap", "Service", "StatefulSet"} <= set(kinds)
    for document in chart.documents:
        if document["apiVersion"].startswith(("monitoring.coreos.com/", "cert-manager.io/")):
            continue  # a CRD kind: no Kubernetes schema; its shape is checked below
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_kubernetes_validation_catches_a_broken_manifest(rendered: dict[str, Rendered]) -> None:
    broken = json.loads(json.dumps(rendered["defaults"].statefulset))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pathh"] = "/readyz"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"replicaCount": "three"}, "replicaCount"),
        ({"stroes": []}, "stroes"),
        ({"auth": {"mode": "everyone"}}, "mode"),
        ({"kafka": {"bootstrapServers": "k:9092", "config": {"sasl.password": "oops"}}}, "sasl.password"),
        ({"stores": [{"name": "../etc", "topic": "t"}]}, "name"),
        ({"auth": {"tokens": [{"name": "a", "sha256": INLINE_HASH}]}}, "stores"),
        ({"engine": {"block_cache_bytes": "lots"}}, "block_cache_bytes"),
        ({"engine": {"read_cache_bytes": 1}}, "read_cache_bytes"),
        ({"engine": {"max_concurrent_bulk_restores": 0}}, "max_concurrent_bulk_restores"),
        (
            {"stores": [{"name": "p", "topic": "p", "engine": {"max_concurrent_bulk_restores": 2}}]},
            "max_concurrent_bulk_restores",
        ),
        ({"auth": {"tokens": [{"name": "a", "sha256": INLINE_HASH, "stores": []}]}}, "stores"),
    ],
)
def test_values_schema_rejects_bad_values(values: dict[str, Any], complaint: str) -> None:
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmError, match=complaint):
        chart.validate_schema(values)


# --- the StatefulSet ----------------------------------------------------------------------------


def test_defaults_statefulset_has_probes_claim_and_hardening(rendered: dict[str, Rendered]) -> None:
    chart = rendered["defaults"]
    sts = chart.statefulset
    container = chart.container
    assert container["args"] == ["serve", "--config", CONFIG_PATH]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTP"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTP"}
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/readyz"
    # Sized for long restores: liveness waits up to an hour for the first bootstrap.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 3600

    claims = sts["spec"]["volumeClaimTemplates"]
    assert [c["metadata"]["name"] for c in claims] == ["state"]
    assert claims[0]["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert claims[0]["spec"]["accessModes"] == ["ReadWriteOnce"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[STATE_DIR]["name"] == "state"
    assert mounts[CONFIG_PATH]["readOnly"] is True
    assert "/tmp" in mounts
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["tmp"]
    assert "state" not in volumes, "the state dir must come from the claim template, not a pod volume"

    pod_security = sts["spec"]["template"]["spec"]["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["runAsUser"] == 10001
    assert pod_security["fsGroup"] == 10001
    assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == 10001
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}

    pod = sts["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert sts["spec"]["serviceName"] == chart.one("Service", "-headless")["metadata"]["name"]


def test_headless_and_client_services_select_the_pods(rendered: dict[str, Rendered]) -> None:
    chart = rendered["defaults"]
    pod_labels = chart.statefulset["spec"]["template"]["metadata"]["labels"]
    headless = chart.one("Service", "-headless")
    client = chart.one("Service", f"{RELEASE}-statestore")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert "publishNotReadyAddresses" not in client["spec"], "only READY pods may serve clients"
    test_pod_labels = chart.one("Pod", "-test")["metadata"]["labels"]
    for service in (headless, client):
        assert service["spec"]["selector"].items() <= pod_labels.items()
        assert not service["spec"]["selector"].items() <= test_pod_labels.items(), (
            "a Service selects the test Pod"
        )
        assert service["spec"]["ports"][0]["targetPort"] == "http"
    pdb = chart.one("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_config_change_rolls_the_pods() -> None:
    before = render({})
    after = render({"limits": {"max_batch_keys": 500}})
    annotation = "checksum/config"
    assert (
        before.statefulset["spec"]["template"]["metadata"]["annotations"][annotation]
        != after.statefulset["spec"]["template"]["metadata"]["annotations"][annotation]
    )


def test_three_replicas_with_monitoring_and_resources(rendered: dict[str, Rendered]) -> None:
    chart = rendered["three-replicas-monitored"]
    sts = chart.statefulset
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert chart.container["image"] == "registry.example.com/data/statestore:1.4.2"
    assert chart.container["imagePullPolicy"] == "Always"
    assert chart.container["resources"]["limits"] == {"cpu": "4", "memory": "12Gi"}
    claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["storageClassName"] == "fast-ssd"
    assert claim["resources"]["requests"]["storage"] == "200Gi"
    assert chart.container["startupProbe"]["failureThreshold"] == 480
    assert chart.one("PodDisruptionBudget")["spec"] == {
        "minAvailable": 2,
        "selector": chart.one("PodDisruptionBudget")["spec"]["selector"],
    }

    monitor = chart.one("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint == {
        "port": "http",
        "path": "/metrics",
        "scheme": "http",
        "interval": "15s",
        "scrapeTimeout": "10s",
    }
    # It selects exactly one Service (the headless one), so each pod is scraped once, ready or not.
    selected = [
        s
        for s in chart.of_kind("Service")
        if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in selected] == [f"{RELEASE}-statestore-headless"]


def test_a_protected_metrics_endpoint_is_scraped_with_a_token(
    rendered: dict[str, Rendered], load_pod_settings: Any
) -> None:
    chart = rendered["tokens-auth"]
    assert load_pod_settings(chart).auth.metrics == "token"
    [endpoint] = chart.one("ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "statestore-scrape", "key": "token"},
    }


def test_service_monitor_is_off_by_default(rendered: dict[str, Rendered]) -> None:
    assert rendered["defaults"].of_kind("ServiceMonitor") == []


def test_tls_listener_switches_probes_and_scrapes_to_https(rendered: dict[str, Rendered]) -> None:
    chart = rendered["tls-listener"]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert chart.container[probe]["httpGet"]["scheme"] == "HTTPS"
    mounts = {m["name"]: m for m in chart.container["volumeMounts"]}
    assert mounts["http-tls"] == {
        "name": "http-tls",
        "mountPath": "/etc/statestore/http-tls",
        "readOnly": True,
    }
    volumes = {v["name"]: v for v in chart.statefulset["spec"]["template"]["spec"]["volumes"]}
    assert volumes["http-tls"]["secret"]["secretName"] == "statestore-tls"
    endpoint = chart.one("ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["serverName"] == "statestore.data.svc"


def test_ephemeral_minimal_uses_an_empty_dir_and_warns(rendered: dict[str, Rendered]) -> None:
    chart = rendered["ephemeral-minimal"]
    sts = chart.statefulset
    assert "volumeClaimTemplates" not in sts["spec"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["state"] == {"name": "state", "emptyDir": {}}
    assert "startupProbe" not in chart.container
    assert "affinity" not in sts["spec"]["template"]["spec"]
    assert sts["spec"]["template"]["spec"]["serviceAccountName"] == "default"
    assert chart.of_kind("ServiceAccount") == []
    assert chart.of_kind("PodDisruptionBudget") == []
    assert "persistence is disabled" in chart.notes


# --- configuration and secrets ------------------------------------------------------------------


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_rendered_config_loads_with_the_service_settings(
    rendered: dict[str, Rendered], value_set: str, load_pod_settings: Any
) -> None:
    chart = rendered[value_set]
    settings = load_pod_settings(chart)
    values = VALUE_SETS[value_set]
    expected_stores = [s["name"] for s in values.get("stores", [{"name": "products"}])]
    assert [s.name for s in settings.stores] == expected_stores
    assert str(settings.state_dir) == STATE_DIR
    assert settings.http.host == "0.0.0.0"
    assert settings.http.port == chart.container["ports"][0]["containerPort"]
    assert settings.auth.mode == values.get("auth", {}).get("mode", "tokens")


def test_kafka_credentials_come_from_the_secret_not_the_configmap(
    rendered: dict[str, Rendered], load_pod_settings: Any
) -> None:
    chart = rendered["sasl-ssl-kafka"]
    settings = load_pod_settings(chart)
    kafka = settings.librdkafka_config()
    assert kafka["bootstrap.servers"] == "b-1.kafka.internal:9096,b-2.kafka.internal:9096"
    assert kafka["security.protocol"] == "SASL_SSL"
    assert kafka["sasl.mechanism"] == "SCRAM-SHA-512"
    assert kafka["fetch.queue.backoff.ms"] == "10"
    assert kafka["sasl.username"] == "statestore"
    assert kafka["sasl.password"] == KAFKA_PASSWORD

    config = yaml.safe_load(chart.config_text)
    assert not any("password" in key or "username" in key for key in config["kafka"])
    for document in chart.documents:
        assert KAFKA_PASSWORD not in json.dumps(document)
    env = {e["name"]: e for e in chart.container["env"]}
    assert env["STATESTORE_KAFKA__SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "kafka-credentials",
        "key": "password",
    }
    mounts = {m["name"]: m for m in chart.container["volumeMounts"]}
    assert mounts["kafka-tls"]["mountPath"] == "/etc/statestore/kafka-tls"
    assert kafka["ssl.ca.location"].startswith(mounts["kafka-tls"]["mountPath"] + "/")


def test_token_hashes_come_from_the_secret(rendered: dict[str, Rendered], load_pod_settings: Any) -> None:
    chart = rendered["tokens-auth"]
    settings = load_pod_settings(chart)
    tokens = {t.name: t for t in settings.auth.tokens}
    assert tokens["analytics"].sha256 == ANALYTICS_HASH
    assert tokens["analytics"].stores == ["products", "customers"]
    assert tokens["billing"].sha256 == BILLING_HASH
    assert tokens["dashboards"].sha256 == INLINE_HASH
    for document in chart.documents:
        assert ANALYTICS_HASH not in json.dumps(document)
        assert BILLING_HASH not in json.dumps(document)
    assert "sha256" not in chart.config_text


def test_inline_token_hashes_are_written_into_the_config(
    rendered: dict[str, Rendered], load_pod_settings: Any
) -> None:
    chart = rendered["inline-token-hashes"]
    assert "env" not in chart.container
    settings = load_pod_settings(chart)
    assert [(t.name, t.sha256, t.stores) for t in settings.auth.tokens] == [
        ("dashboards", INLINE_HASH, ["products"])
    ]


def test_extra_env_overrides_the_config(rendered: dict[str, Rendered], load_pod_settings: Any) -> None:
    settings = load_pod_settings(rendered["ephemeral-minimal"])
    assert settings.limits.max_key_bytes == 1024


def test_limits_pass_through(rendered: dict[str, Rendered], load_pod_settings: Any) -> None:
    settings = load_pod_settings(rendered["three-replicas-monitored"])
    assert settings.limits.max_batch_keys == 20_000
    assert settings.limits.max_scan_limit == 5_000
    positions = settings.store("positions")
    assert positions is not None
    assert [i.field for i in positions.indexes] == ["ticker"]


def test_engine_sizing_passes_through(rendered: dict[str, Rendered], load_pod_settings: Any) -> None:
    settings = load_pod_settings(rendered["three-replicas-monitored"])
    tunings = {config.name: config.tuning for config in store_configs(settings)}
    assert tunings["positions"].rocksdb.block_cache_bytes == 2 * 2**30
    assert tunings["products"].rocksdb.block_cache_bytes == 512 * 2**20
    assert {t.read_cache_entries for t in tunings.values()} == {50_000}
    assert settings.engine.max_concurrent_bulk_restores == 2


def test_an_auto_block_cache_is_shared_by_the_stores(load_pod_settings: Any) -> None:
    chart = render({"stores": TWO_STORES, "engine": {"block_cache_bytes": "auto"}})
    tunings = [config.tuning.rocksdb for config in store_configs(load_pod_settings(chart))]
    assert len(tunings) == 2
    assert all(tuning.share_block_cache for tuning in tunings)
    assert len({tuning.block_cache_bytes for tuning in tunings}) == 1


def test_a_config_the_service_refuses_is_refused(tmp_path: Path) -> None:
    # The loader the tests rely on really validates: an unknown store setting fails.
    chart = render({"stores": [{"name": "products", "topic": "products", "value_format": "json"}]})
    config = tmp_path / "statestore.yaml"
    config.write_text(chart.config_text.replace("value_format: json", "value_format: avro"), encoding="utf-8")
    with pytest.raises(ConfigError, match="value_format"):
        load_settings(config)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"kafka": {"config": {"SASL.Password": "hunter2"}}}, "looks secret"),
        ({"kafka": {"config": {"ssl.key.password": "hunter2"}}}, "looks secret"),
        ({"kafka": {"config": {"bootstrap.servers": "k:9092"}}}, "kafka.bootstrapServers"),
        ({"http": {"tls": {"enabled": True}}}, "http.tls.existingSecret"),
        ({"http": {"tls": {"enabled": True, "certManager": {"enabled": True}}}}, "issuerRef.name"),
        ({"http": {"tls": {"clientCA": {"enabled": True}}}}, "clientCA.enabled needs http.tls.enabled"),
        (
            {"auth": {"certificates": [{"name": "a", "commonName": "a", "stores": ["*"]}]}},
            "auth.certificates needs http.tls.clientCA.enabled",
        ),
        (
            {
                "http": {"tls": {"enabled": True, "existingSecret": "t", "clientCA": {"enabled": True}}},
                "auth": {
                    "certificates": [{"name": "a", "commonName": "a", "stores": ["*"], "secretName": "s"}]
                },
            },
            "set http.tls.certManager.enabled",
        ),
        (
            {"auth": {"mode": "tokens", "tokens": [{"name": "a", "secretKey": "a"}]}},
            "auth.existingSecret is empty",
        ),
        ({"auth": {"mode": "tokens", "tokens": [{"name": "a"}]}}, "needs secretKey"),
        ({"auth": {"mode": "tokens", "tokens": [{"name": "a", "sha256": INLINE_HASH}]}}, "names no stores"),
        ({"auth": {"mode": "open", "metrics": "token"}}, "auth.mode is open"),
        (
            {
                "auth": {
                    "mode": "tokens",
                    "metrics": "token",
                    "tokens": [{"name": "a", "sha256": INLINE_HASH, "stores": ["*"]}],
                },
                "serviceMonitor": {"enabled": True},
            },
            "serviceMonitor.bearerTokenSecret",
        ),
    ],
)
def test_values_that_would_leak_or_cannot_work_fail_to_render(
    values: dict[str, Any], message: str, tmp_path: Path
) -> None:
    # The template guards hold even when the values schema is skipped (helm --skip-schema-validation):
    # render a copy of the chart without its schema.
    unchecked = tmp_path / "statestore"
    shutil.copytree(CHART, unchecked)
    (unchecked / "values.schema.json").unlink()
    with helm.Chart.load(unchecked) as chart, pytest.raises(helm.HelmRenderError, match=message):
        chart.render(values, name=RELEASE, namespace="data")


def test_notes_tell_how_to_reach_the_service(rendered: dict[str, Rendered]) -> None:
    notes = rendered["defaults"].notes
    assert f"statefulset/{RELEASE}-statestore" in notes
    assert f"http://{RELEASE}-statestore.data.svc:8080/v1/stores/products/keys/KEY" in notes
    # Auth is on by default, and the notes say how to read the generated token.
    assert "Auth is on" in notes
    secret = f"{RELEASE}-statestore-token"
    assert f"get secret {secret} -o jsonpath='{{.data.token}}' | base64 -d" in notes
    assert 'auth.mode is "open"' not in notes
    assert 'WARNING: auth.mode is "open"' in rendered["explicitly-open"].notes
    for value_set in ("tokens-auth", "mtls-cert-manager"):
        assert "generated" not in rendered[value_set].notes
        assert 'auth.mode is "open"' not in rendered[value_set].notes
    assert "Client certificates (mTLS) are asked for" in rendered["mtls-cert-manager"].notes


# --- secure by default: the generated token, mTLS and cert-manager ------------------------------


def test_defaults_turn_auth_on_with_a_generated_token_the_service_knows_by_its_hash(
    rendered: dict[str, Rendered], load_pod_settings: Any
) -> None:
    chart = rendered["defaults"]
    secret = chart.one("Secret", "-token")
    assert secret["metadata"]["name"] == f"{RELEASE}-statestore-token"
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) == 48
    assert token.isalnum()
    settings = load_pod_settings(chart)
    assert settings.auth.mode == "tokens"
    assert settings.auth.tokens == []
    listed = load_tokens_file(settings.auth.tokens_file, ["products"])
    assert [(t.name, t.sha256, t.stores) for t in listed] == [
        ("generated", hashlib.sha256(token.encode()).hexdigest(), ["*"])
    ]
    # The pod gets the hash only, in a directory the kubelet updates (no subPath).
    pod = chart.statefulset["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "auth-tokens")
    assert volume["secret"]["items"] == [{"key": "tokens.yaml", "path": "tokens.yaml"}]
    mount = next(m for m in chart.container["volumeMounts"] if m["name"] == "auth-tokens")
    assert mount == {"name": "auth-tokens", "mountPath": "/etc/statestore/auth", "readOnly": True}
    assert token not in json.dumps(chart.statefulset)
    assert token not in chart.config_text
    # Tokens given (or certificates only): nothing is generated.
    for value_set in ("tokens-auth", "inline-token-hashes", "explicitly-open", "mtls-cert-manager"):
        assert rendered[value_set].of_kind("Secret") == []


def test_an_upgrade_keeps_the_token_already_in_the_cluster(tmp_path: Path) -> None:
    # helm template has no cluster to look the Secret up in; a copy of the chart whose lookup finds
    # one shows what an upgrade renders.
    upgraded = tmp_path / "statestore"
    shutil.copytree(CHART, upgraded)
    template = upgraded / "templates" / "secret-token.yaml"
    text = template.read_text(encoding="utf-8")
    lookup = 'lookup "v1" "Secret" .Release.Namespace $name'
    assert lookup in text
    kept = base64.b64encode(b"kept-token-0123456789").decode()
    template.write_text(text.replace(lookup, f'dict "data" (dict "token" "{kept}")'), encoding="utf-8")
    with helm.Chart.load(upgraded) as chart:
        manifests = chart.render({}, name=RELEASE, namespace="data")
    secret = yaml.safe_load(
        next(text for path, text in manifests.items() if path.endswith("secret-token.yaml"))
    )
    assert secret["data"]["token"] == kept
    listed = yaml.safe_load(base64.b64decode(secret["data"]["tokens.yaml"]))
    assert listed[0]["sha256"] == hashlib.sha256(b"kept-token-0123456789").hexdigest()


def test_mtls_with_cert_manager_issues_the_certificates_and_asks_clients_for_theirs(
    rendered: dict[str, Rendered], load_pod_settings: Any
) -> None:
    chart = rendered["mtls-cert-manager"]
    certificates = {c["metadata"]["name"]: c["spec"] for c in chart.of_kind("Certificate")}
    server = certificates[f"{RELEASE}-statestore-tls"]
    assert server["secretName"] == f"{RELEASE}-statestore-tls"
    assert server["issuerRef"] == {"name": "internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert f"{RELEASE}-statestore.data.svc" in server["dnsNames"]
    assert "statestore.example.com" in server["dnsNames"]
    assert server["usages"] == ["server auth", "digital signature"]
    client = certificates["etl-client"]
    assert (client["commonName"], client["usages"]) == ("spark-etl", ["client auth", "digital signature"])
    assert set(certificates) == {f"{RELEASE}-statestore-tls", "etl-client"}
    volumes = {v["name"]: v for v in chart.statefulset["spec"]["template"]["spec"]["volumes"]}
    assert volumes["http-tls"]["secret"]["secretName"] == f"{RELEASE}-statestore-tls"
    settings = load_pod_settings(chart)
    assert settings.http.tls is not None
    assert str(settings.http.tls.client_ca) == "/etc/statestore/http-tls/ca.crt"
    assert [(c.name, c.common_name, c.stores) for c in settings.auth.certificates] == [
        ("etl", "spark-etl", ["customers"]),
        ("ops", "ops.example.com", ["*"]),
    ]
    # A CA bundle of its own is mounted from its Secret.
    own = render({**VALUE_SETS["mtls-cert-manager"], "http": {"tls": {
        **VALUE_SETS["mtls-cert-manager"]["http"]["tls"],
        "clientCA": {"enabled": True, "existingSecret": "partner-ca", "key": "bundle.pem"},
    }}})  # fmt: skip
    assert "client_ca: /etc/statestore/client-ca/bundle.pem" in own.config_text
    volume = next(
        v for v in own.statefulset["spec"]["template"]["spec"]["volumes"] if v["name"] == "client-ca"
    )
    assert volume["secret"]["secretName"] == "partner-ca"


def _leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    # Mappings that are passed through whole are documented as one value.
    whole = {
        "resources",
        "podSecurityContext",
        "securityContext",
        "kafka.credentials.keys",
        "helmTest.resources",
    }
    paths: list[str] = []
    for key, value in values.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value and path not in whole:
            paths.extend(_leaves(value, path))
        else:
            paths.append(path)
    return paths


def test_every_value_is_documented_in_the_chart_readme() -> None:
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([^`]+)` \|", readme, flags=re.MULTILINE))
    with helm.Chart.load(CHART) as chart:
        leaves = _leaves(chart.values)
    assert len(leaves) > 50
    assert sorted(set(leaves) - documented) == []
    assert sorted(documented - set(leaves)) == [], "the README documents values the chart does not have"

"""The chart as platforms expect it: images by registry and digest, common labels, security contexts
that fit Kubernetes' restricted profile and OpenShift's restricted SCC, a NetworkPolicy, and the
chart's metadata."""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml

from tests.deploy.manifests import CHART, KUBERNETES_VERSION, ROOT, Rendered, render

OPENSHIFT = ("security.openshift.io/v1",)
DIGEST = "sha256:" + hashlib.sha256(b"an image").hexdigest()
PLATFORM_IDS = ("runAsUser", "runAsGroup", "fsGroup")


def pods(chart: Rendered) -> dict[str, dict[str, Any]]:
    """Every pod spec the chart renders: the StatefulSet's template and the test Pod."""
    found = {"statefulset": chart.statefulset["spec"]["template"]["spec"]}
    found.update({doc["metadata"]["name"]: doc["spec"] for doc in chart.of_kind("Pod")})
    return found


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What in a pod spec breaks the Kubernetes "restricted" Pod Security Standard."""
    found: list[str] = []
    pod_context = pod.get("securityContext") or {}
    for container in pod["containers"] + pod.get("initContainers", []):
        context = container.get("securityContext") or {}
        name = container["name"]

        def effective(key: str, context: dict[str, Any] = context) -> Any:
            return context.get(key, pod_context.get(key))

        if effective("runAsNonRoot") is not True:
            found.append(f"{name}: runAsNonRoot is not true")
        if effective("runAsUser") == 0:
            found.append(f"{name}: runs as root")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if (context.get("capabilities") or {}).get("drop") != ["ALL"]:
            found.append(f"{name}: does not drop ALL capabilities")
        if set((context.get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: adds capabilities")
        if (effective("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: no RuntimeDefault seccomp profile")
        if context.get("readOnlyRootFilesystem") is not True:
            found.append(f"{name}: the root filesystem is writable")
    for volume in pod.get("volumes", []):
        if "hostPath" in volume:
            found.append(f"volume {volume['name']} is a hostPath")
    return found


def platform_ids(pod: dict[str, Any]) -> list[str]:
    """The ids a pod spec fixes that OpenShift's restricted-v2 SCC wants to assign itself."""
    contexts = [("pod", pod.get("securityContext") or {})]
    contexts += [(c["name"], c.get("securityContext") or {}) for c in pod["containers"]]
    return [f"{where}.{key}" for where, context in contexts for key in PLATFORM_IDS if key in context]


# --- security contexts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "api_versions"),
    [
        ({}, ()),
        ({}, OPENSHIFT),
        ({"compatibility": {"openshift": {"adaptSecurityContext": "force"}}}, ()),
        ({"compatibility": {"openshift": {"adaptSecurityContext": "disabled"}}}, OPENSHIFT),
    ],
    ids=["kubernetes", "openshift-auto", "force", "openshift-disabled"],
)
def test_every_pod_fits_the_restricted_profile(values: dict[str, Any], api_versions: tuple[str, ...]) -> None:
    chart = render(values, api_versions)
    for name, pod in pods(chart).items():
        assert restricted_violations(pod) == [], name


def test_kubernetes_gets_the_images_fixed_user() -> None:
    for name, pod in pods(render({})).items():
        assert pod["securityContext"]["runAsUser"] == 10001, name
        assert pod["containers"][0]["securityContext"]["runAsUser"] == 10001, name
    assert render({}).statefulset["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 10001


@pytest.mark.parametrize(
    ("values", "api_versions"),
    [({}, OPENSHIFT), ({"compatibility": {"openshift": {"adaptSecurityContext": "force"}}}, ())],
    ids=["openshift-auto", "force"],
)
def test_a_platform_that_assigns_ids_gets_none_fixed(
    values: dict[str, Any], api_versions: tuple[str, ...]
) -> None:
    chart = render(values, api_versions)
    for name, pod in pods(chart).items():
        assert platform_ids(pod) == [], name
        assert "fsGroupChangePolicy" not in pod["securityContext"], name
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod},
            KUBERNETES_VERSION,
            True,
        )


def test_openshift_detection_can_be_turned_off() -> None:
    chart = render({"compatibility": {"openshift": {"adaptSecurityContext": "disabled"}}}, OPENSHIFT)
    assert platform_ids(pods(chart)["statefulset"]) == [
        "pod.runAsUser",
        "pod.runAsGroup",
        "pod.fsGroup",
        "statestore.runAsUser",
        "statestore.runAsGroup",
    ]


def test_a_security_context_key_set_to_null_is_left_out() -> None:
    chart = render(
        {
            "podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
            "securityContext": {"runAsUser": None, "runAsGroup": None},
        }
    )
    for name, pod in pods(chart).items():
        assert platform_ids(pod) == [], name
        assert restricted_violations(pod) == [], name


# --- image, labels, metadata ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ({}, "statestore:0.1.0"),
        (
            {"registry": "registry.example.com", "repository": "data/statestore"},
            "registry.example.com/data/statestore:0.1.0",
        ),
        (
            {"registry": "registry.example.com:5000/", "tag": "1.4.2"},
            "registry.example.com:5000/statestore:1.4.2",
        ),
        (
            {"registry": "registry.example.com", "tag": "1.4.2", "digest": DIGEST},
            f"registry.example.com/statestore@{DIGEST}",
        ),
    ],
)
def test_the_image_from_registry_repository_tag_or_digest(image: dict[str, str], expected: str) -> None:
    chart = render({"image": image})
    assert chart.container["image"] == expected
    for name, pod in pods(chart).items():
        assert pod["containers"][0]["image"] == expected, name


def test_common_labels_are_on_every_object_but_never_in_a_selector() -> None:
    common = {"team": "data", "cost-center": "cc-42"}
    everything = {
        "commonLabels": common,
        "serviceMonitor": {"enabled": True},
        "networkPolicy": {"enabled": True},
    }
    plain, labelled = render({k: v for k, v in everything.items() if k != "commonLabels"}), render(everything)
    assert sorted(d["kind"] for d in labelled.documents) == sorted(d["kind"] for d in plain.documents)
    for document in labelled.documents:
        assert common.items() <= document["metadata"]["labels"].items(), document["kind"]
    template = labelled.statefulset["spec"]["template"]["metadata"]["labels"]
    assert common.items() <= template.items()
    # What cannot change after install stays as it was.
    for before, after in zip(plain.documents, labelled.documents, strict=True):
        spec_before, spec_after = before.get("spec", {}), after.get("spec", {})
        assert spec_before.get("selector") == spec_after.get("selector"), after["kind"]
        assert spec_before.get("podSelector") == spec_after.get("podSelector"), after["kind"]
        assert spec_before.get("volumeClaimTemplates") == spec_after.get("volumeClaimTemplates")


def test_chart_metadata_points_home_to_the_sources_and_an_icon_that_exists() -> None:
    metadata = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    for key in ("home", "icon"):
        assert urlparse(metadata[key]).scheme == "https", key
    assert metadata["sources"]
    assert all(urlparse(source).scheme == "https" for source in metadata["sources"])
    # The icon is served from the repository's main branch: the file must exist in it.
    path = urlparse(metadata["icon"]).path.split("/main/", 1)[1]
    assert (ROOT / path).is_file()
    assert (ROOT / path).read_text(encoding="utf-8").lstrip().startswith("<svg")


# --- the NetworkPolicy ---------------------------------------------------------------------------


def policy(values: dict[str, Any]) -> tuple[dict[str, Any], Rendered]:
    chart = render({"networkPolicy": {"enabled": True, **values.pop("networkPolicy", {})}, **values})
    return chart.one("NetworkPolicy")["spec"], chart


def test_no_network_policy_by_default() -> None:
    assert render({}).of_kind("NetworkPolicy") == []


def test_the_policy_selects_the_service_pods_and_only_them() -> None:
    spec, chart = policy({})
    selector = spec["podSelector"]["matchLabels"]
    assert selector.items() <= chart.statefulset["spec"]["template"]["metadata"]["labels"].items()
    assert not selector.items() <= chart.one("Pod", "-test")["metadata"]["labels"].items()
    assert spec["policyTypes"] == ["Ingress", "Egress"]


def test_open_ingress_reaches_only_the_http_port() -> None:
    spec, _ = policy({})
    assert spec["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]


def test_closed_ingress_admits_labelled_clients_the_test_pod_and_extra_peers() -> None:
    spark = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "spark"}}}
    spec, chart = policy({"networkPolicy": {"allowExternal": False, "extraIngress": [spark]}})
    [rule] = spec["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    client, extra = rule["from"]
    assert extra == spark
    assert (
        client["podSelector"]["matchLabels"].items()
        <= chart.one("Pod", "-test")["metadata"]["labels"].items()
    )


@pytest.mark.parametrize(
    ("bootstrap_servers", "ports"),
    [
        ("kafka:9092", [9092]),
        ("b-1.kafka.internal:9096, b-2.kafka.internal:9096,b-3.kafka.internal:9098", [9096, 9098]),
        ("kafka", [9092]),
    ],
)
def test_egress_is_dns_and_the_kafka_ports(bootstrap_servers: str, ports: list[int]) -> None:
    spec, _ = policy({"kafka": {"bootstrapServers": bootstrap_servers}})
    dns, kafka = spec["egress"]
    assert dns == {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
    assert kafka == {"ports": [{"port": port, "protocol": "TCP"} for port in ports]}


def test_egress_can_be_opened_or_extended() -> None:
    extra = {"ports": [{"port": 9094, "protocol": "TCP"}]}
    spec, _ = policy({"networkPolicy": {"allowExternalEgress": True, "extraEgress": [extra]}})
    assert spec["egress"] == [{}, extra]
    spec, _ = policy({"networkPolicy": {"extraEgress": [extra]}})
    assert spec["egress"][-1] == extra
    assert len(spec["egress"]) == 3

"""Helpers for the deployment tests: render the Helm chart, read a Dockerfile, play the kubelet's part.

No Helm binary and no Docker engine exist here: the chart is rendered and linted with Helm's own Go
SDK (``helm-python-sdk``), and the Dockerfile is read as text.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml
from helm_python import _native as helm_native

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "statestore"
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

# Kubernetes version the rendered manifests are validated against (strict schemas).
KUBERNETES_VERSION = "1.33"
RELEASE = "orders"
NAMESPACE = "data"


@dataclasses.dataclass(frozen=True)
class Rendered:
    """The chart rendered with one set of values: manifests by kind, and NOTES.txt."""

    documents: list[dict[str, Any]]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [doc for doc in self.documents if doc["kind"] == kind]

    def one(self, kind: str, name_suffix: str = "") -> dict[str, Any]:
        found = [doc for doc in self.of_kind(kind) if doc["metadata"]["name"].endswith(name_suffix)]
        assert len(found) == 1, (
            f"expected one {kind} named *{name_suffix}, got {[d['metadata'] for d in found]}"
        )
        return found[0]

    @property
    def statefulset(self) -> dict[str, Any]:
        return self.one("StatefulSet")

    @property
    def container(self) -> dict[str, Any]:
        containers = self.statefulset["spec"]["template"]["spec"]["containers"]
        assert len(containers) == 1
        return dict(containers[0])

    @property
    def config_text(self) -> str:
        return str(self.one("ConfigMap")["data"]["statestore.yaml"])


def render(values: Mapping[str, Any] | None = None, api_versions: Sequence[str] = ()) -> Rendered:
    """Render the chart as ``helm template`` would, and parse every manifest.

    ``api_versions`` are the extra API versions the cluster serves (``helm template --api-versions``).
    """
    with helm.Chart.load(CHART) as chart:
        if api_versions:
            # The SDK's render() has no parameter for them; its native call takes them.
            options = {
                "name": RELEASE,
                "namespace": NAMESPACE,
                "is_install": True,
                "api_versions": [*api_versions],
            }
            manifests = json.loads(
                helm_native.call_string(
                    "helm_render", chart._raw(), json.dumps(dict(values or {})), json.dumps(options)
                )
            )
        else:
            manifests = chart.render(dict(values or {}), name=RELEASE, namespace=NAMESPACE, is_install=True)
    documents: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        documents.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return Rendered(documents=documents, notes=notes)


def lint(values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """``helm lint --strict``: the findings of severity warning (2) or error (3)."""
    report = helm.lint(CHART, dict(values or {}), strict=True, kube_version=f"v{KUBERNETES_VERSION}.0")
    findings = [m for m in report["messages"] if m["severity"] >= 2]
    findings.extend({"severity": 3, "path": "", "error": e} for e in report["errors"])
    return findings


_VARIABLE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def container_environment(
    container: Mapping[str, Any], secrets: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """The environment the kubelet would give ``container``.

    ``secretKeyRef`` is resolved from ``secrets`` (Secret name → key → value) and ``$(VAR)``
    references to variables defined earlier in the list are expanded (``$$`` is a literal ``$``),
    as Kubernetes does. An unknown secret or key fails, as a pod would fail to start.
    """
    environment: dict[str, str] = {}
    for entry in container.get("env") or []:
        if "valueFrom" in entry:
            ref = entry["valueFrom"]["secretKeyRef"]
            assert ref["name"] in secrets, f"env {entry['name']} refers to missing Secret {ref['name']}"
            assert ref["key"] in secrets[ref["name"]], f"Secret {ref['name']} has no key {ref['key']}"
            environment[entry["name"]] = secrets[ref["name"]][ref["key"]]
        else:

            def expand(match: re.Match[str]) -> str:
                if match.group(0) == "$$":
                    return "$"
                name = match.group(1)
                return environment.get(name, match.group(0))

            environment[entry["name"]] = _VARIABLE.sub(expand, str(entry.get("value", "")))
    return environment


def mount_rendered_secrets(rendered: Rendered, root: Path) -> dict[str, Path]:
    """Write the volumes of the pod that hold Secrets the chart itself renders under ``root``, as
    the kubelet would mount them (the keys listed in ``items``, or every key); returns each mount
    path and the directory standing in for it."""
    secrets = {doc["metadata"]["name"]: doc for doc in rendered.of_kind("Secret")}
    pod = rendered.of_kind("StatefulSet")[0]["spec"]["template"]["spec"]  # every shard's mounts alike
    volumes = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    mounted: dict[str, Path] = {}
    for mount in pod["containers"][0]["volumeMounts"]:
        volume = volumes.get(mount["name"])
        if volume is None or volume["secretName"] not in secrets:
            continue
        data = secrets[volume["secretName"]]["data"]
        items = volume.get("items") or [{"key": key, "path": key} for key in data]
        directory = root / mount["name"]
        directory.mkdir(parents=True, exist_ok=True)
        for item in items:
            (directory / item["path"]).write_bytes(base64.b64decode(data[item["key"]]))
        mounted[mount["mountPath"]] = directory
    return mounted


def rendered_secrets(rendered: Rendered) -> dict[str, dict[str, str]]:
    """The Secrets the chart renders, as ``container_environment`` takes them (name → key → value)."""
    return {
        doc["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in doc.get("data", {}).items()}
        for doc in rendered.of_kind("Secret")
    }


def pod_config_text(rendered: Rendered, root: Path) -> str:
    """The pod's ``statestore.yaml`` with the paths of the Secrets the chart renders pointing into
    ``root``, where they are written as the kubelet would mount them."""
    text = rendered.config_text
    for mount_path, directory in mount_rendered_secrets(rendered, root).items():
        text = text.replace(f"{mount_path}/", f"{directory}/")
    return text


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction, continuation lines joined."""

    keyword: str
    arguments: str
    stage: str


def dockerfile_instructions(text: str) -> list[Instruction]:
    """Parse a Dockerfile into instructions, each tagged with the name of its build stage."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    assert not current, "the Dockerfile ends inside a line continuation"
    instructions: list[Instruction] = []
    stage = ""
    for line in logical:
        keyword, _, arguments = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = shlex.split(arguments)
            stage = words[2] if len(words) >= 3 and words[1].upper() == "AS" else str(len(instructions))
        instructions.append(Instruction(keyword=keyword, arguments=arguments.strip(), stage=stage))
    return instructions

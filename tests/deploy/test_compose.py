"""docker-compose.yml: valid against the Compose specification, and wired the way the product needs.

No Docker engine runs here, so nothing is started: the file is validated against the Compose
specification's JSON schema (the copy shipped in the ``check-jsonschema`` package), and the wiring
between services is checked against the service's own configuration loader and CLI.
"""

from __future__ import annotations

import copy
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from service.settings import load_settings
from tests.deploy.manifests import COMPOSE_FILE, DOCKERFILE, ROOT, dockerfile_instructions

STATE_DIR = "/var/lib/statestore"
CONFIG_PATH = "/etc/statestore/statestore.yaml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def compose_validator() -> jsonschema.protocols.Validator:
    schema_file = resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    assert schema["title"] == "Compose Specification"
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)


def kafka_env(compose: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in compose["services"]["kafka"]["environment"].items()}


def listeners(spec: str) -> dict[str, str]:
    """``NAME://host:port,...`` → {NAME: "host:port"}."""
    return dict(item.split("://", 1) for item in spec.split(","))


def service_settings(compose: dict[str, Any]) -> Any:
    mounts = compose["services"]["statestore"]["volumes"]
    [config_mount] = [m for m in mounts if m.split(":")[1] == CONFIG_PATH]
    source = ROOT / config_mount.split(":")[0]
    assert source.is_file(), f"{source} is mounted as the service config but does not exist"
    return load_settings(source)


# --- the specification --------------------------------------------------------------------------


def test_compose_file_is_valid_against_the_compose_specification(
    compose: dict[str, Any], compose_validator: jsonschema.protocols.Validator
) -> None:
    errors = sorted(compose_validator.iter_errors(compose), key=lambda e: list(e.path))
    assert [f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors] == []


@pytest.mark.parametrize(
    "breakage",
    [
        lambda c: c["services"]["join"]["depends_on"]["statestore"].update(condition="service_ready"),
        lambda c: c["services"]["statestore"]["healthcheck"].update(intervals="5s"),
        lambda c: c["services"]["kafka"].update(port=["29092:29092"]),
        lambda c: c.update(volume={}),
    ],
)
def test_the_specification_check_catches_mistakes(
    compose: dict[str, Any], compose_validator: jsonschema.protocols.Validator, breakage: Any
) -> None:
    broken = copy.deepcopy(compose)
    breakage(broken)
    assert not compose_validator.is_valid(broken)


# --- Kafka --------------------------------------------------------------------------------------


def test_kafka_is_one_kraft_node_acting_as_broker_and_controller(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka_env(compose)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node_id = env["KAFKA_NODE_ID"]
    [voter] = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    voter_id, voter_address = voter.split("@")
    assert voter_id == node_id
    bound = listeners(env["KAFKA_LISTENERS"])
    advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert set(bound) <= set(protocols), "every listener needs a security protocol"
    assert controller in bound
    assert controller not in advertised, "the controller listener is never advertised to clients"
    assert voter_address.split(":")[1] == bound[controller].rsplit(":", 1)[1]
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised
    # Single node: internal topics must not ask for replicas that cannot exist.
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    # The host-facing listener is published on the same port.
    external = [name for name in advertised if advertised[name].startswith("localhost:")]
    assert len(external) == 1
    port = advertised[external[0]].split(":")[1]
    assert f"{port}:{port}" in kafka["ports"]


def internal_bootstrap(compose: dict[str, Any]) -> str:
    env = kafka_env(compose)
    return listeners(env["KAFKA_ADVERTISED_LISTENERS"])[env["KAFKA_INTER_BROKER_LISTENER_NAME"]]


def test_served_topics_are_created_compacted_before_anything_uses_them(compose: dict[str, Any]) -> None:
    topics_job = compose["services"]["topics"]
    assert topics_job["depends_on"]["kafka"]["condition"] == "service_healthy"
    script = "\n".join(topics_job["command"])
    created = dict(re.findall(r"^\s*create (\S+)(.*)$", script, flags=re.MULTILINE))
    settings = service_settings(compose)
    for store in settings.stores:
        assert "cleanup.policy=compact" in created[store.topic], f"topic {store.topic} must be compacted"
    assert "purchases" in created
    assert "--if-not-exists" in script
    assert internal_bootstrap(compose) in script
    # $ is doubled so Compose does not interpolate the shell's variables.
    assert re.search(r"(?<!\$)\$(?!\$)", script) is None
    assert (
        compose["services"]["seed"]["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    )


# --- the service --------------------------------------------------------------------------------


def test_the_service_config_points_at_the_compose_broker_and_volume(compose: dict[str, Any]) -> None:
    service = compose["services"]["statestore"]
    settings = service_settings(compose)
    assert settings.librdkafka_config()["bootstrap.servers"] == internal_bootstrap(compose)
    assert str(settings.state_dir) == STATE_DIR
    assert settings.http.host == "0.0.0.0"
    assert f"{settings.http.port}:{settings.http.port}" in service["ports"]
    state_mounts = [m for m in service["volumes"] if m.endswith(f":{STATE_DIR}")]
    assert len(state_mounts) == 1
    volume = state_mounts[0].split(":")[0]
    assert volume in compose["volumes"], "the state dir lives on a named volume"
    assert all(m.endswith(":ro") for m in service["volumes"] if m.split(":")[1] == CONFIG_PATH)
    assert service["depends_on"]["seed"]["condition"] == "service_completed_successfully"


def test_service_healthcheck_is_readiness(compose: dict[str, Any]) -> None:
    check = compose["services"]["statestore"]["healthcheck"]
    assert check["test"][0] == "CMD"
    assert "/readyz" in " ".join(check["test"])
    # Restores can be long: the check keeps trying for minutes before the container is unhealthy.
    interval = int(check["interval"].rstrip("s"))
    assert interval * check["retries"] >= 300


def test_images_are_built_from_the_repository_dockerfile(compose: dict[str, Any]) -> None:
    stages = {
        i.stage
        for i in dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))
        if i.keyword == "FROM"
    }
    built = {name: svc["build"] for name, svc in compose["services"].items() if "build" in svc}
    assert set(built) == {"statestore", "seed", "join"}
    for name, build in built.items():
        assert Path(ROOT / build["context"]).resolve() == ROOT, name
        assert build["target"] in stages, f"{name} builds target {build['target']!r}, not in the Dockerfile"
    assert built["statestore"]["target"] == "runtime"
    assert built["join"]["target"] == "spark"


def test_the_spark_join_waits_for_a_ready_service_and_seeded_topics(compose: dict[str, Any]) -> None:
    join = compose["services"]["join"]
    assert join["depends_on"]["statestore"]["condition"] == "service_healthy"
    assert join["depends_on"]["seed"]["condition"] == "service_completed_successfully"
    command = join["command"]
    settings = service_settings(compose)
    assert command[command.index("--service-url") + 1] == f"http://statestore:{settings.http.port}"
    for job in ("seed", "join"):
        argv = compose["services"][job]["command"]
        assert argv[argv.index("--bootstrap-servers") + 1] == internal_bootstrap(compose)
        assert compose["services"][job]["restart"] == "no"

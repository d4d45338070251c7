"""The Dockerfile, read as text (no Docker engine runs here), and its HEALTHCHECK run for real.

The image build itself is not exercised; what it would run is: the health check command runs
against the real service app, and the commands it starts parse with the CLI (test_commands.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
import yaml

from service.app import create_app
from service.local.broker import free_port
from service.settings import Settings
from store import StoreState
from store.lifecycle.memory import InMemoryStore
from tests.deploy.manifests import COMPOSE_FILE, DOCKERFILE, Instruction, dockerfile_instructions
from tests.support.server import serve_app

APP_UID = "10001"


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))


def in_stage(instructions: list[Instruction], stage: str, keyword: str) -> list[str]:
    return [i.arguments for i in instructions if i.stage == stage and i.keyword == keyword]


def final_stage(instructions: list[Instruction]) -> str:
    return [i.stage for i in instructions if i.keyword == "FROM"][-1]


def test_multi_stage_build_with_a_slim_runtime(instructions: list[Instruction]) -> None:
    stages = [i.stage for i in instructions if i.keyword == "FROM"]
    assert {"builder", "spark", "runtime"} <= set(stages)
    assert final_stage(instructions) == "runtime", "a plain `docker build` must give the service image"
    # The runtime gets the built virtualenv from the builder, not the sources or the toolchain.
    copies = in_stage(instructions, "runtime", "COPY")
    assert copies == ["--from=builder /opt/statestore /opt/statestore"]
    builder_runs = " ".join(in_stage(instructions, "builder", "RUN"))
    assert "[server]" in builder_runs
    assert all("pip install" not in run for run in in_stage(instructions, "runtime", "RUN"))


@pytest.mark.parametrize("stage", ["runtime", "spark"])
def test_images_run_as_a_fixed_non_root_user_with_the_cli_as_entrypoint(
    instructions: list[Instruction], stage: str
) -> None:
    users = in_stage(instructions, stage, "USER")
    assert users, f"stage {stage} must set USER"
    user = users[-1].split(":")[0]
    assert user == APP_UID
    assert user not in {"0", "root"}
    assert json.loads(in_stage(instructions, stage, "ENTRYPOINT")[-1]) == ["statestore"]
    runs = " ".join(in_stage(instructions, stage, "RUN"))
    assert f"--uid {APP_UID}" in runs


def test_runtime_serves_the_mounted_config_on_8080_with_state_on_a_volume(
    instructions: list[Instruction],
) -> None:
    assert json.loads(in_stage(instructions, "runtime", "CMD")[-1]) == [
        "serve",
        "--config",
        "/etc/statestore/statestore.yaml",
    ]
    assert in_stage(instructions, "runtime", "EXPOSE") == ["8080"]
    assert json.loads(in_stage(instructions, "runtime", "VOLUME")[-1]) == ["/var/lib/statestore"]
    assert len(in_stage(instructions, "runtime", "HEALTHCHECK")) == 1


def test_spark_image_has_a_java_runtime(instructions: list[Instruction]) -> None:
    runs = " ".join(in_stage(instructions, "spark", "RUN"))
    assert "openjdk-17-jre-headless" in runs
    assert "rm -rf /var/lib/apt/lists/*" in runs
    copies = in_stage(instructions, "spark", "COPY")
    assert copies
    assert all(c.startswith("--from=spark-builder ") for c in copies)


def test_dockerignore_keeps_the_context_to_the_package() -> None:
    lines = [
        line.strip()
        for line in (DOCKERFILE.parent / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    included = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert included == {
        "pyproject.toml",
        "README.md",
        "deploy/constraints.txt",
        "store",
        "service",
        "clients",
        "wire",
    }


# --- the health checks, run for real -----------------------------------------------------------


def healthcheck_argv(instructions: list[Instruction]) -> list[str]:
    [check] = in_stage(instructions, "runtime", "HEALTHCHECK")
    argv = json.loads(check[check.index("CMD") + len("CMD") :].strip())
    assert isinstance(argv, list)
    return [str(a) for a in argv]


def compose_healthcheck_argv() -> list[str]:
    test = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["services"]["statestore"]["healthcheck"][
        "test"
    ]
    assert test[0] == "CMD"
    return [str(a) for a in test[1:]]


@pytest.fixture
def service_with_one_store() -> Iterator[tuple[int, InMemoryStore]]:
    """The real service app serving one in-memory store whose state the test controls."""
    products = InMemoryStore("products", state=StoreState.RESTORING)
    settings = Settings(stores=[{"name": "products", "topic": "products", "value_format": "json"}])
    with serve_app(create_app(settings, stores={"products": products})) as url:
        yield int(url.rsplit(":", 1)[1]), products


def run_check(argv: list[str], port: int) -> int:
    assert argv[0] == "python"
    completed = subprocess.run(
        [sys.executable, *argv[1:]],
        env={"STATESTORE_HTTP__PORT": str(port), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=30,
        check=False,
    )
    return completed.returncode


def test_image_healthcheck_is_liveness(
    instructions: list[Instruction], service_with_one_store: tuple[int, InMemoryStore]
) -> None:
    port, _ = service_with_one_store
    argv = healthcheck_argv(instructions)
    assert "/healthz" in argv[-1]
    # Alive while the store restores: a long restore must not get the container restarted.
    assert run_check(argv, port) == 0


def test_compose_healthcheck_turns_healthy_only_when_ready(
    service_with_one_store: tuple[int, InMemoryStore],
) -> None:
    port, products = service_with_one_store
    argv = compose_healthcheck_argv()
    assert run_check(argv, port) != 0
    products.set_state(StoreState.READY)
    assert run_check(argv, port) == 0


def test_healthchecks_fail_when_nothing_listens(instructions: list[Instruction]) -> None:
    port = free_port()
    assert run_check(healthcheck_argv(instructions), port) != 0
    assert run_check(compose_healthcheck_argv(), port) != 0

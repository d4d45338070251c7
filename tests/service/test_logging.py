"""Logs as JSON lines (``--log-format json`` / ``logging.format``) and the opt-in access log."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from service.local.broker import LocalBroker, free_port
from service.logs import JsonFormatter
from tests.support.kafka import produce

REPO = Path(__file__).resolve().parents[2]


def record(message: str, *args: object, **extra: Any) -> logging.LogRecord:
    made = logging.LogRecord(
        "store.lifecycle.materializer", logging.WARNING, __file__, 1, message, args, None
    )
    made.__dict__.update(extra)
    return made


def formatted(made: logging.LogRecord) -> dict[str, Any]:
    line = JsonFormatter().format(made)
    assert "\n" not in line, "one line per record"
    parsed: dict[str, Any] = json.loads(line)
    return parsed


def test_a_json_line_has_time_level_logger_and_message() -> None:
    line = formatted(record("restoring %d records", 5))
    assert line["message"] == "restoring 5 records"
    assert line["level"] == "WARNING"
    assert line["logger"] == "store.lifecycle.materializer"
    assert line["time"].endswith("+00:00")
    assert "store" not in line


def test_the_store_comes_from_extra_or_from_the_line_naming_it() -> None:
    assert formatted(record('store "products": cannot describe topic'))["store"] == "products"
    explicit = formatted(record("store %s failed to start", "orders", store="orders", position="0:5"))
    assert (explicit["store"], explicit["position"]) == ("orders", "0:5")


def test_the_position_comes_from_extra_or_from_the_line_naming_it() -> None:
    line = formatted(record('store "products" READY at position 0:48,1:52: 100 records applied'))
    assert line["position"] == "0:48,1:52"
    assert "position" not in formatted(record('store "products" opened (stored position none)'))


def test_empty_and_terminal_only_fields_are_left_out() -> None:
    line = formatted(record("Started server process", color_message="\x1b[36m", token=None))
    assert "color_message" not in line
    assert "token" not in line


def test_an_exception_gives_the_error_and_its_traceback() -> None:
    try:
        raise OSError("No space left on device")
    except OSError:
        made = record('store "positions": cannot write', exc_info=None)
        made.exc_info = sys.exc_info()
    line = formatted(made)
    assert line["error"] == "OSError: No space left on device"
    assert "Traceback" in line["traceback"]
    assert line["store"] == "positions"


class Serve:
    """``statestore serve`` in a child process, its stderr collected."""

    def __init__(self, config: Path, port: int, flags: list[str], env: dict[str, str]) -> None:
        self.url = f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "service.cli", "serve", "--config", str(config), "--port", str(port)]
        self.process = subprocess.Popen(
            [*argv, *flags],
            cwd=REPO,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.client = httpx.Client(base_url=self.url, timeout=10)

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(httpx.TransportError):
                if condition():
                    return
            assert self.process.poll() is None, f"the service exited: {self.stop()}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    def stop(self) -> list[str]:
        """SIGTERM, then every line the service wrote to stderr."""
        self.client.close()
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        _, errors = self.process.communicate(timeout=60)
        return [line for line in errors.splitlines() if line.strip()]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Serve]]:
    started: list[Serve] = []

    def start(
        settings: dict[str, Any], flags: list[str] | None = None, env: dict[str, str] | None = None
    ) -> Serve:
        config = tmp_path / f"statestore-{len(started)}.yaml"
        config.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), **settings}))
        service = Serve(config, free_port(), flags or [], env or {})
        started.append(service)
        return service

    yield start
    for service in started:
        if service.process.poll() is None:
            service.stop()


def test_serve_logs_json_lines_with_the_store_and_an_access_log(
    broker: LocalBroker, make_topic: Callable[..., str], serve: Callable[..., Serve]
) -> None:
    topic = make_topic(partitions=1)
    produce(broker.bootstrap_servers, topic, [(b"k1", b"one"), (b"k2", b"two")])
    service = serve(
        {
            "kafka": {"bootstrap_servers": broker.bootstrap_servers},
            "stores": [{"name": "letters", "topic": topic, "value_format": "string"}],
        },
        ["--log-format", "json", "--access-log"],
    )
    service.wait_until(lambda: service.client.get("/readyz").status_code == 200, "the store to be READY")
    assert service.client.get("/v1/stores/letters/keys/k1").text == "one"
    assert service.client.get("/v1/stores/letters/keys/nope").status_code == 404
    lines = [json.loads(line) for line in service.stop()]  # every line is one JSON object

    assert {"time", "level", "logger", "message"} <= set(lines[0])
    assert any(line.get("store") == "letters" and line["logger"].startswith("store.") for line in lines)
    access = [line for line in lines if line["logger"] == "statestore.access"]
    read = next(line for line in access if line["path"] == "/v1/stores/letters/keys/k1")
    assert (read["method"], read["code"], read["bytes"]) == ("GET", 200, 3)
    assert read["position"] == "0:2"
    assert read["duration_ms"] >= 0
    assert read["client"].startswith("127.0.0.1:")
    missing = next(line for line in access if line["path"] == "/v1/stores/letters/keys/nope")
    assert missing["code"] == 404


@pytest.mark.parametrize("configured_by", ["file", "environment"])
def test_the_log_format_and_access_log_are_settings(serve: Callable[..., Serve], configured_by: str) -> None:
    chosen = {"format": "json", "access_log": True}
    if configured_by == "file":
        service = serve({"logging": chosen})
    else:
        service = serve(
            {}, env={"STATESTORE_LOGGING__FORMAT": "json", "STATESTORE_LOGGING__ACCESS_LOG": "true"}
        )
    service.wait_until(lambda: service.client.get("/healthz").status_code == 200, "the service to answer")
    lines = [json.loads(line) for line in service.stop()]
    assert any(line.get("path") == "/healthz" and line.get("code") == 200 for line in lines)


def test_text_lines_and_no_access_log_by_default(serve: Callable[..., Serve]) -> None:
    service = serve({})
    service.wait_until(lambda: service.client.get("/healthz").status_code == 200, "the service to answer")
    lines = service.stop()
    assert lines
    assert not lines[0].startswith("{")
    assert " INFO " in lines[0]
    assert not [line for line in lines if "statestore.access" in line or "/healthz" in line]

"""Fault tests: the real service (``statestore serve``) in a child process, on a broker of its own.

Every test here owns its broker, so it may stop or restart it; the service runs as a child
process, so it may be killed with SIGKILL as a crashed container would be.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from service.local.broker import LocalBroker, free_port
from tests.support.kafka import close_producers
from tests.support.stores import REPO


class ServiceProcess:
    """``statestore serve`` (through ``tests.faults.service_child``) in its own process group.

    Its log (stdout and stderr) is collected on a thread; ``log`` is everything seen so far.
    """

    def __init__(
        self, config: Path, port: int, env: dict[str, str], cap: tuple[int, Path] | None, log_level: str
    ) -> None:
        argv = [sys.executable, "-m", "tests.faults.service_child", str(config), log_level]
        if cap is not None:
            argv += [str(cap[0]), str(cap[1])]
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            argv,
            cwd=REPO,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.client = httpx.Client(base_url=self.url, timeout=30)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self._lines)

    def info(self, store: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.client.get(f"/v1/stores/{store}").json()
        return answer

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``condition`` (connection errors count as false) until it holds; fail naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(httpx.TransportError):
                if condition():
                    return
            if self.process.poll() is not None:
                raise AssertionError(f"the service exited ({self.process.returncode}):\n{self.log[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{self.log[-3000:]}")
            time.sleep(0.05)

    def wait_ready(self, timeout: float = 60) -> None:
        self.wait_for(lambda: self.client.get("/readyz").status_code == 200, timeout, "/readyz to be 200")

    def kill(self) -> None:
        """SIGKILL the whole process group (a crashed container)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self._reader.join(timeout=10)

    def terminate(self) -> int:
        """SIGTERM (a clean shutdown); the exit code."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        finally:
            self.kill()
            self.client.close()


ServiceFactory = Callable[..., ServiceProcess]


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A broker this test alone uses, so it may stop or restart it."""
    with LocalBroker(log_path=tmp_path / "tansu.log") as running:
        yield running
        close_producers(running.bootstrap_servers)


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator[ServiceFactory]:
    """Factory: write a configuration and start ``statestore serve`` on it; killed at teardown.

    ``stores`` are store settings; ``kafka``, ``auth``, ``limits`` go into the file as they are;
    ``env`` is added to the child's environment; ``cap`` = (bytes, path) caps every file the
    child writes until ``path`` exists; ``port`` defaults to a free one. The state dir is the test's
    unless ``state_dir`` names another, so a restart reuses it.
    """
    started: list[ServiceProcess] = []

    def start(
        bootstrap_servers: str,
        stores: list[dict[str, Any]],
        *,
        kafka: dict[str, str] | None = None,
        auth: dict[str, Any] | None = None,
        limits: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        cap: tuple[int, Path] | None = None,
        log_level: str = "INFO",
        port: int | None = None,
        state_dir: Path | None = None,
    ) -> ServiceProcess:
        port = port or free_port()
        config: dict[str, Any] = {
            "kafka": {"bootstrap_servers": bootstrap_servers, **(kafka or {})},
            "state_dir": str(state_dir or tmp_path / "state"),
            "http": {"host": "127.0.0.1", "port": port},
            "stores": stores,
        }
        if auth is not None:
            config["auth"] = auth
        if limits is not None:
            config["limits"] = limits
        path = tmp_path / f"statestore-{len(started)}.yaml"
        path.write_text(yaml.safe_dump(config))
        service = ServiceProcess(path, port, env or {}, cap, log_level)
        started.append(service)
        return service

    yield start
    for service in started:
        service.kill()
        service.client.close()

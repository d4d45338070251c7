"""What ``python -m bench scale`` measures with: the service under test, memory, table state.

Not a benchmark itself (no ``_bench`` suffix): ``bench/scale_bench.py`` runs the parts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pyarrow as pa
import rocksdict
import yaml

from bench.http_bench import _arrow_body, _get, _post, _wait_http
from bench.restores_bench import _children, _pss_bytes
from bench.scale_data import BATCH, STORE, TOPIC, key
from service.local.broker import free_port

MIB = 1024 * 1024
BATCH_PATH = f"/v1/stores/{STORE}/keys:batchGet"
ARROW = "application/vnd.apache.arrow.stream"


# -- requests and answers ----------------------------------------------------------------------


def json_post(keys: list[bytes]) -> bytes:
    return _post(BATCH_PATH, "application/json", orjson.dumps({"keys": [k.decode() for k in keys]}))


def arrow_post(keys: list[bytes]) -> bytes:
    return _post(BATCH_PATH, ARROW, _arrow_body(keys))


def check_json(body: bytes) -> object:
    values = orjson.loads(body)["values"]
    if len(values) != BATCH or None in values:
        raise RuntimeError("a batch answer lacks values: the keys asked are not the table's")
    return values


def check_arrow(body: bytes) -> object:
    table = pa.ipc.open_stream(body).read_all()
    if table.num_rows != BATCH or table.column("value").null_count:
        raise RuntimeError("a batch answer lacks values: the keys asked are not the table's")
    return table


@contextlib.contextmanager
def pinned(cpu: int) -> Iterator[None]:
    """This thread (and what it starts meanwhile) on ``cpu`` only; the earlier affinity after."""
    if not hasattr(os, "sched_setaffinity") or cpu >= (os.cpu_count() or 1):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# -- memory ---------------------------------------------------------------------------------------


def tree_pss(pid: int) -> int:
    """Proportional set size of ``pid`` and every process below it."""
    return sum(_pss_bytes(p) for p in _children(pid))


class PeakMemory:
    """The peak of ``measure()`` (bytes), sampled every ``interval`` s on a thread while in a
    ``with`` block; ``PeakMemory.of(pid)`` samples a process tree's PSS."""

    def __init__(self, measure: Callable[[], int], interval: float = 0.05) -> None:
        self.peak = 0
        self._measure = measure
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @classmethod
    def of(cls, pid: int) -> PeakMemory:
        return cls(lambda: tree_pss(pid))

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._measure())
            self._stop.wait(self._interval)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def spark_workers_pss() -> int:
    """PSS of this process's Spark Python workers (and their daemon)."""
    total = 0
    for pid in _children(os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"pyspark" in cmdline and b"python" in cmdline:
            total += _pss_bytes(pid)
    return total


# -- the service under test -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TableState:
    """The store's table as RocksDB has it on disk."""

    level0_files: int
    files: int
    compacting: bool


def table_state(db_path: Path) -> TableState:
    """Read from a read-only instance opened beside the writer, and from its info log.

    Compacting: RocksDB wants a compaction, or has logged more compactions started than finished.
    """
    options = rocksdict.Options(raw_mode=True)
    for attempt in range(50):
        try:
            db = rocksdict.Rdict(str(db_path), options, access_type=rocksdict.AccessType.read_only())
            break
        except Exception:  # a compaction removed files while it opened: look again
            if attempt == 49:
                raise
            time.sleep(0.1)
    try:
        level0 = int(db.property_value("rocksdb.num-files-at-level0") or 0)
        files = sum(int(db.property_value(f"rocksdb.num-files-at-level{n}") or 0) for n in range(7))
        pending = int(db.property_value("rocksdb.compaction-pending") or 0) > 0
    finally:
        db.close()
    log = (db_path / "LOG").read_text(errors="replace") if (db_path / "LOG").exists() else ""
    running = log.count('"event": "compaction_started"') > log.count('"event": "compaction_finished"')
    return TableState(level0, files, pending or running)


def background_done(url: str, store: str = STORE) -> bool:
    """Whether ``store`` of the service at ``url`` has counted its keys and verified its table
    once: the two background reads of the whole table after a restore (at 10M records the
    verification, paced at 16 MiB/s, runs for over a minute on the CPU that serves the reads)."""
    with urllib.request.urlopen(f"{url}/v1/stores/{store}", timeout=10) as answer:
        status = orjson.loads(answer.read())
    return status.get("counted_keys") is not None and status.get("verification_passes", 0) >= 1


def pin_process(pid: int, cpu: int) -> None:
    """Pin every thread of ``pid`` to ``cpu`` (threads it starts later inherit it)."""
    if not hasattr(os, "sched_setaffinity") or cpu >= (os.cpu_count() or 1):
        return
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task), {cpu})


class Service:
    """``statestore serve`` with one store (``STORE``) of ``topic``, in its own process and state
    dir (``name`` tells services of one run apart); ``kafka`` are further librdkafka settings of
    the store."""

    def __init__(
        self, tmp: Path, bootstrap: str, kafka: dict[str, str], topic: str = TOPIC, name: str = "service"
    ) -> None:
        self.port = free_port()
        self.state_dir = tmp / f"{name}-state"
        self.db_path = self.state_dir / STORE / "db"
        self._config = tmp / f"{name}.yaml"
        self._config.write_text(
            yaml.safe_dump(
                {
                    "kafka": {"bootstrap_servers": bootstrap, **kafka},
                    "state_dir": str(self.state_dir),
                    "http": {"host": "127.0.0.1", "port": self.port},
                    "stores": [{"name": STORE, "topic": topic, "value_format": "json"}],
                }
            )
        )
        self._log_path = tmp / f"{name}.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def start(self) -> tuple[float, int]:
        """Start it and wait until READY: the seconds from process start, and the peak PSS meanwhile."""
        with open(self._log_path, "ab") as log:
            started = time.perf_counter()
            self._process = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "serve", "--config", str(self._config)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        with PeakMemory.of(self._process.pid) as memory:
            while True:
                if self._process.poll() is not None:
                    raise SystemExit(f"the service exited; see {self._log_path}")
                try:
                    _wait_http(self.port, "/readyz", timeout=0.5)
                    break
                except RuntimeError:
                    continue
            seconds = time.perf_counter() - started
        return seconds, memory.peak

    def settle_seconds(self) -> tuple[float | None, float | None]:
        """Seconds the store spent before READY merging the bulk restore's files, and reading the
        table into the block cache, from its log (``None``: it logged none)."""
        log = self._log_path.read_text(errors="replace")
        merged = re.findall(r"restored files merged in ([0-9.]+)s", log)
        warmed = re.findall(r"read into the block cache in ([0-9.]+)s before READY", log)
        return (float(merged[-1]) if merged else None, float(warmed[-1]) if warmed else None)

    def wait_settled(self, timeout: float = 3600) -> float:
        """Wait until the table's compactions are done; the seconds waited."""
        started = time.perf_counter()
        while table_state(self.db_path).compacting:
            if time.perf_counter() - started > timeout:
                raise SystemExit(f"compactions still running after {timeout:.0f} s")
            time.sleep(1.0)
        return time.perf_counter() - started

    def describe(self, lines: int = 15) -> str:
        """Whether it still runs, and the last ``lines`` of its log: for a bench that failed."""
        state = "running" if self._process is not None and self._process.poll() is None else "exited"
        log = self._log_path.read_text(errors="replace").splitlines() if self._log_path.exists() else []
        return f"{self.url} ({state}), log {self._log_path}:\n" + "\n".join(log[-lines:])

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None


@contextlib.contextmanager
def running(service: Service) -> Iterator[Service]:
    try:
        yield service
    finally:
        service.stop()


def probe_request() -> bytes:
    """A single-key GET whose answer carries the store's position."""
    return _get(f"/v1/stores/{STORE}/keys/{key(0).decode()}")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")

"""What clients streaming huge request heads cost everyone else: probe latency and server memory.

``statestore serve`` runs in a child process (no stores: the probe is ``/healthz``, which needs
none). One client probes it on a keep-alive connection, one request after the other, first alone
and then while ``--flooders`` other connections each stream a request whose one header would be
``--header-mib`` MiB, reconnecting whenever the server closes them. Reported: the probe's p50,
p99 and max in both phases, the heads the flooders got refused, and the server's resident memory
(VmRSS, and its peak VmHWM) before and after::

    python -m bench header_flood --flooders 8 --header-mib 100 --seconds 10
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from service.local.broker import free_port

HOST = "127.0.0.1"
PROBE = b"GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n"
FLOOD_START = b"GET /v1/stores HTTP/1.1\r\nHost: bench\r\nX-Pad: "
CHUNK = b"a" * 65536


def _memory(pid: int) -> tuple[int, int]:
    """The process's resident memory and its peak so far, in MiB."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    rss, peak = (
        int(re.search(rf"^{name}:\s+(\d+) kB$", status, re.M).group(1)) for name in ("VmRSS", "VmHWM")
    )  # type: ignore[union-attr]
    return rss // 1024, peak // 1024


@contextlib.contextmanager
def _service() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port(HOST)
    with tempfile.TemporaryDirectory() as state:
        config = Path(state) / "statestore.yaml"
        config.write_text(f"state_dir: {state}\nhttp: {{host: {HOST}, port: {port}}}\n", encoding="utf-8")
        argv = [sys.executable, "-m", "service.cli", "--log-level", "ERROR", "serve", "--config", str(config)]
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
                    break
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("statestore serve did not start")
                time.sleep(0.05)
            yield port, process
        finally:
            process.terminate()
            process.wait(timeout=30)


def _probe(port: int, seconds: float) -> list[float]:
    """Latencies (ms) of sequential probes on one keep-alive connection for ``seconds``."""
    latencies: list[float] = []
    with socket.create_connection((HOST, port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.perf_counter()
            sock.sendall(PROBE)
            answer = b""
            while not answer.endswith(b"}"):
                answer += sock.recv(65536)
            latencies.append((time.perf_counter() - started) * 1000)
            time.sleep(0.001)
    return latencies


def _flood(port: int, header_bytes: int, stop: threading.Event, refused: list[int]) -> None:
    """Stream huge heads until ``stop``, reconnecting when the server closes; counts refusals."""
    while not stop.is_set():
        time.sleep(0.01)  # a client, not a connection flood: the head is what is measured
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=10) as sock:
            sock.sendall(FLOOD_START)
            sent = 0
            with contextlib.suppress(OSError):
                while sent < header_bytes and not stop.is_set():
                    sent += sock.send(CHUNK)
            with contextlib.suppress(OSError):
                if sock.recv(64).startswith(b"HTTP/1.1 431"):
                    refused.append(sent)


def _flooders(
    port: int, count: int, header_bytes: int, seconds: float, result: multiprocessing.Queue[list[int]]
) -> None:
    """``count`` flooding connections for ``seconds`` (in a process of their own, so that their
    threads do not slow the probe's); puts the bytes sent before each refusal on ``result``."""
    stop = threading.Event()
    refused: list[int] = []
    threads = [
        threading.Thread(target=_flood, args=(port, header_bytes, stop, refused), daemon=True)
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    result.put(refused)


def _figures(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    median = statistics.median(ordered)
    return f"p50 {median:.2f} ms, p99 {p99:.2f} ms, max {ordered[-1]:.1f} ms ({len(ordered)} probes)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--flooders", type=int, default=1, help="connections streaming huge heads")
    parser.add_argument("--header-mib", type=int, default=100, help="MiB each flooding head would be")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of probing per phase")
    args = parser.parse_args(argv)
    with _service() as (port, process):
        _probe(port, 1.0)  # warm up
        alone = _probe(port, args.seconds)
        before = _memory(process.pid)
        result: multiprocessing.Queue[list[int]] = multiprocessing.Queue()
        flood = multiprocessing.Process(
            target=_flooders, args=(port, args.flooders, args.header_mib << 20, args.seconds + 1, result)
        )
        flood.start()
        time.sleep(0.5)  # the flood under way
        flooded = _probe(port, args.seconds)
        refused = result.get(timeout=120)
        flood.join(timeout=60)
        after = _memory(process.pid)
    print(f"probe alone:   {_figures(alone)}")
    print(f"probe flooded: {_figures(flooded)}")
    print(
        f"flood: {args.flooders} connection(s) streaming {args.header_mib} MiB heads; {len(refused)} heads"
        f" refused (431), each after at most {max(refused, default=0) // 1024} KiB had been sent"
    )
    print(f"server memory: RSS {before[0]} -> {after[0]} MiB, peak {before[1]} -> {after[1]} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A bounded soak of a running service: concurrent point gets, batch gets and scans over HTTP while
a producer writes at a steady rate; shared by ``tests/faults/test_soak.py`` and ``bench/soak_bench.py``.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
from confluent_kafka import Producer

from store import Position

KEY_SPACE = 5_000


def key(i: int) -> str:
    return f"key-{i:05}"


@dataclasses.dataclass
class SoakResult:
    """What the soak saw: answers by kind and status, position regressions, and the RSS curve."""

    answers: Counter[tuple[str, int]] = dataclasses.field(default_factory=Counter)
    regressions: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    rss: list[tuple[float, int]] = dataclasses.field(default_factory=list)  # (seconds, bytes)
    records_written: int = 0
    seconds: float = 0.0

    @property
    def server_errors(self) -> int:
        return sum(n for (_kind, status), n in self.answers.items() if status >= 500)

    @property
    def requests(self) -> int:
        return sum(self.answers.values())


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def seed(producer: Producer, topic: str) -> None:
    for i in range(KEY_SPACE):
        producer.produce(topic, key=key(i).encode(), value=b'{"v":0,"k":%d}' % i)
        producer.poll(0)
    assert producer.flush(30) == 0


def _reader(url: str, store: str, stop: threading.Event, result: SoakResult, seed_: int) -> None:
    rng = random.Random(seed_)
    last = Position()  # the newest position this connection was answered at
    with httpx.Client(base_url=url, timeout=30) as client:
        while not stop.is_set():
            kind = rng.choice(("get", "get", "batch", "scan"))
            try:
                if kind == "get":
                    answer = client.get(f"/v1/stores/{store}/keys/{key(rng.randrange(KEY_SPACE + 100))}")
                elif kind == "batch":
                    keys = [key(rng.randrange(KEY_SPACE)) for _ in range(200)]
                    answer = client.post(f"/v1/stores/{store}/keys:batchGet", json={"keys": keys})
                else:
                    prefix = key(rng.randrange(KEY_SPACE))[:-2]
                    answer = client.get(f"/v1/stores/{store}/scan", params={"prefix": prefix, "limit": 100})
            except httpx.HTTPError as exc:
                result.errors.append(f"{kind}: {exc!r}")
                continue
            result.answers[(kind, answer.status_code)] += 1
            header = answer.headers.get("Statestore-Position")
            if header:
                position = Position.parse(header)
                if not position.reaches(last):
                    result.regressions.append(f"{kind}: {last} then {position}")
                last = position


def _writer(producer: Producer, topic: str, rate: int, stop: threading.Event, result: SoakResult) -> None:
    rng = random.Random(1)
    started = time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while result.records_written < due:
            i = rng.randrange(KEY_SPACE)
            # A few tombstones keep deletes in the mix.
            value = None if rng.randrange(20) == 0 else b'{"v":%d,"k":%d}' % (result.records_written, i)
            producer.produce(topic, key=key(i).encode(), value=value)
            result.records_written += 1
        producer.poll(0)
        stop.wait(0.01)
    producer.flush(30)


def soak(
    url: str,
    store: str,
    producer: Producer,
    topic: str,
    *,
    pid: int,
    seconds: float,
    readers: int = 3,
    write_rate: int = 1_000,
    sample_every: float = 1.0,
) -> SoakResult:
    """Run readers and a writer for ``seconds`` against the service at ``url`` (process ``pid``)."""
    result = SoakResult()
    stop = threading.Event()
    threads = [
        threading.Thread(target=_reader, args=(url, store, stop, result, n), daemon=True)
        for n in range(readers)
    ]
    threads.append(
        threading.Thread(target=_writer, args=(producer, topic, write_rate, stop, result), daemon=True)
    )
    started = time.monotonic()
    for thread in threads:
        thread.start()
    while (elapsed := time.monotonic() - started) < seconds:
        result.rss.append((elapsed, rss_bytes(pid)))
        time.sleep(min(sample_every, max(0.0, seconds - elapsed)))
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    result.seconds = time.monotonic() - started
    result.rss.append((result.seconds, rss_bytes(pid)))
    return result

"""The service the Spark client tests of every PySpark version run against, in a process of its own.

The Spark tests also run on PySpark 3.5, in an environment holding only ``statestore[spark]`` and the
test runner: they start this module with the main environment's interpreter (``python -m
tests.support.spark_service``, from the repository root). It runs the real broker and the real
service (``auth.mode: tokens``) with the invoice and portfolio stores, keeps every record it
produced (the model the tests compare with), and on request a Spark Connect server of the installed
(newest) Spark. It speaks JSON lines: one command a line on stdin, one answer a line on stdout;
everything else it or its children print goes to stderr. It stops when stdin closes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from clients import StatestoreClient
from service.app import create_app
from service.local.broker import LocalBroker
from service.settings import Settings
from tests.clients.portfolio import INDEX, TICKERS, position_round, ticker
from tests.clients.shop import (
    BAD_PRODUCTS,
    CUSTOMERS,
    PRODUCTS,
    RICH_RECORDS,
    TOMBSTONED_CUSTOMERS,
    TOMBSTONED_PRODUCTS,
    dimension_records,
)
from tests.support.kafka import Record, create_topic, make_producer, unique_topic
from tests.support.server import serve_app
from tests.support.spark_session import start_connect_server
from tests.support.stores import Delivered, end_of, model_as_of, produce_logged, wait_until

TOKEN = "spark-tests-token"
PARTITIONS = {"products": 3, "customers": 3, "positions": 2, "tickers": 2, "rich": 2}
HISTORY = {"history": {"retention_offsets": 1_000_000}}
EXTRA = {
    "products": HISTORY,
    "customers": {},
    "positions": {**INDEX, **HISTORY},
    "tickers": HISTORY,
    "rich": {},
}


class Feed:
    """The stores' topics, and every record delivered to them (the model)."""

    def __init__(self, broker: LocalBroker) -> None:
        self.topics = {name: unique_topic(name) for name in PARTITIONS}
        for name, topic in self.topics.items():
            create_topic(broker.bootstrap_servers, topic, partitions=PARTITIONS[name])
        self.producer = make_producer(broker.bootstrap_servers)
        self.delivered: dict[str, list[Delivered]] = {name: [] for name in PARTITIONS}
        self.lock = threading.Lock()
        self.url = ""

    def produce(self, store: str, records: list[Record], wait: bool = True) -> None:
        count = PARTITIONS[store]
        delivered = produce_logged(
            self.producer, self.topics[store], records, partitions=lambda key: sum(key) % count
        )
        with self.lock:
            self.delivered[store] += delivered
            end = end_of(self.delivered[store])
        if wait and self.url:
            with StatestoreClient(self.url, token=TOKEN) as client:
                wait_until(lambda: client.position(store).reaches(end), 30, f"{store} at {end}")

    def table(self, store: str, as_of: str | None) -> dict[str, Any]:
        """The store's rows per the topic, as of a position (default: everything delivered)."""
        with self.lock:
            records = list(self.delivered[store])
        position = end_of(records) if as_of is None else _parse(as_of)
        return {k.decode(): json.loads(v) for k, v in model_as_of(records, position).items()}


def _parse(text: str) -> dict[int, int]:
    pairs = (part.split(":") for part in text.split(",") if part)
    return {int(partition): int(offset) for partition, offset in pairs}


class Changer:
    """Keeps positions and the AAPL ticker changing, from a thread, until stopped."""

    def __init__(self, feed: Feed) -> None:
        self.feed = feed
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        seed = 100
        while not self.stop.is_set():
            seed += 1
            self.feed.produce("positions", position_round(seed=seed, count=40, ids=150), wait=False)
            self.feed.produce("tickers", [(b"AAPL", ticker("AAPL", float(seed)))], wait=False)
            self.stop.wait(0.05)  # changes keep coming, without starving the machine

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def seed(feed: Feed) -> None:
    """The stores' first records: one per partition first (history starts when a store is READY)."""
    for name, count in PARTITIONS.items():
        # Key sums one apart: one record on each partition.
        feed.produce(name, [(f"seed-{i}".encode(), b'{"seed": 1}') for i in range(count)])


def populate(feed: Feed) -> None:
    feed.produce("products", dimension_records({**PRODUCTS, **BAD_PRODUCTS}, TOMBSTONED_PRODUCTS))
    feed.produce("customers", dimension_records(CUSTOMERS, TOMBSTONED_CUSTOMERS))
    feed.produce("tickers", [(s.encode(), ticker(s, 10.0 + i)) for i, s in enumerate(TICKERS)])
    feed.produce("positions", position_round(seed=1, count=400, ids=150))
    # Positions moved between tickers and deleted, a ticker deleted.
    feed.produce("positions", position_round(seed=2, count=150, ids=150))
    feed.produce("tickers", [(b"IBM", None)])
    feed.produce("rich", RICH_RECORDS)


def handlers(feed: Feed, stack: contextlib.ExitStack) -> dict[str, Callable[..., Any]]:
    changers: list[Changer] = []
    connect: list[str] = []

    def change(on: bool) -> None:
        if on and not changers:
            changers.append(Changer(feed))
        elif not on and changers:
            changers.pop().close()

    def connect_url() -> str:
        if not connect:
            connect.append(start_connect_server())
        return connect[0]

    def positions(seed: int, count: int, ids: int) -> None:
        feed.produce("positions", position_round(seed=seed, count=count, ids=ids))

    def products(rows: dict[str, Any]) -> None:
        feed.produce("products", [(k.encode(), json.dumps(v).encode()) for k, v in rows.items()])

    def requests() -> dict[str, int]:
        # The requests the service answered so far, by route (its /metrics, itself left out).
        answered = httpx.get(f"{feed.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        counts: dict[str, int] = {}
        for family in text_string_to_metric_families(answered.text):
            for sample in family.samples:
                route = sample.labels.get("route", "")
                if sample.name == "statestore_http_requests_total" and route != "/metrics":
                    counts[route] = counts.get(route, 0) + int(sample.value)
        return counts

    stack.callback(change, False)
    return {
        "requests": requests,
        "table": lambda store, as_of=None: feed.table(store, as_of),
        "change": change,
        "connect": connect_url,
        "positions": positions,
        "products": products,
    }


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def serve(out: IO[str]) -> None:
    def answer(document: dict[str, Any]) -> None:
        out.write(json.dumps(document) + "\n")
        out.flush()

    with contextlib.ExitStack() as stack:
        state = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="statestore-spark-")))
        broker = stack.enter_context(LocalBroker(log_path=state / "tansu.log"))
        feed = Feed(broker)
        seed(feed)
        settings = Settings(
            kafka={"bootstrap_servers": broker.bootstrap_servers},
            state_dir=state / "state",
            stores=[
                {"name": name, "topic": topic, "value_format": "json", **EXTRA[name]}
                for name, topic in feed.topics.items()
            ],
            auth={"mode": "tokens", "tokens": [{"name": "spark", "sha256": _sha256(TOKEN), "stores": ["*"]}]},
        )
        url = stack.enter_context(serve_app(create_app(settings)))
        feed.url = url
        populate(feed)
        ops = handlers(feed, stack)
        answer({"url": url, "token": TOKEN})
        for line in sys.stdin:
            command = json.loads(line)
            try:
                answer({"result": ops[command.pop("op")](**command)})
            except Exception as exc:  # the test sees the error; the service goes on
                answer({"error": "".join(traceback.format_exception(exc))})


def main() -> None:
    # Answers go to the original stdout; everything else (the JVM, the broker, logs) to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    os.environ["PYSPARK_PYTHON"] = sys.executable
    serve(out)


if __name__ == "__main__":
    main()

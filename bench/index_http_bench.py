"""Index lookups and history over HTTP, against baselines measured side by side in the same run.

One service process (FastAPI + uvicorn, uvloop + httptools, one worker, pinned to CPU 0) serves
three stores materialized from the same topic: ``plain`` (no history, no index), ``history``
(history kept; the topic is updated after it is READY, so it holds old versions) and ``indexed``
(an index on ``ticker``). The load generator runs in this process, pinned to CPU 1.

(a) index lookups: ``GET .../indexes/by_ticker/{ticker}`` (every row of one ticker in one page)
    and 100-value ``indexes/by_ticker:batchGet`` (JSON and Arrow), in lookups/s and rows/s;
(b) latest-value reads with history kept vs without: single GET req/s and 1,000-key JSON batch
    keys/s of ``history`` against ``plain``, interleaved in half-second slices. Target: history
    costs plain reads at most 10%::

    python -m bench.index_http_bench --keys 50000 --tickers 1000 --seconds 2 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import httpx
import orjson
import pyarrow as pa
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.http_bench import (
    CLIENT_CPU,
    Load,
    _child,
    _free_port,
    _get,
    _http,
    _interleaved,
    _pin,
    _post,
    _read_arrow,
    _wait_http,
)
from service.local.broker import LocalBroker

TOPIC = "index-http-bench-positions"
BATCH_KEYS = 1000
BATCH_VALUES = 100


def _key(i: int) -> bytes:
    return f"pos-{i:07d}".encode()


def _value(i: int, tickers: int, version: int = 0) -> bytes:
    return orjson.dumps({"id": i, "ticker": f"T{i % tickers:04d}", "qty": i % 500, "version": version})


def _produce(bootstrap: str, records: list[tuple[bytes, bytes]], create: bool) -> None:
    if create:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = NewTopic(TOPIC, 3, 1, config={"cleanup.policy": "compact"})
        for future in admin.create_topics([topic]).values():
            future.result(timeout=15)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000}
    )
    for key, value in records:
        while True:
            try:
                producer.produce(TOPIC, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def _wait_caught_up(port: int, store: str, records: int, timeout: float = 300) -> None:
    """Until ``store`` has applied ``records`` records in all, has no lag and has built its indexes."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        while time.monotonic() < deadline:
            info = client.get(f"/v1/stores/{store}").json()
            applied = sum(int(part.split(":")[1]) for part in info["position"].split(",") if part)
            indexes_ready = all(index["state"] == "ready" for index in info["indexes"].values())
            if info["state"] == "READY" and applied >= records and info["total_lag"] == 0 and indexes_ready:
                return
            time.sleep(0.2)
    raise RuntimeError(f"store {store} did not reach {records} records within {timeout} s")


def _arrow_values(values: list[str]) -> bytes:
    table = pa.table({"value": pa.array(values, pa.string())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _index_requests(rng: random.Random, tickers_count: int) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """Index lookups: single GETs of one ticker, and batches of tickers as JSON and as Arrow."""
    tickers = [f"T{rng.randrange(tickers_count):04d}" for _ in range(2000)]
    lookups = [_get(f"/v1/stores/indexed/indexes/by_ticker/{t}?limit=1000") for t in tickers]
    value_batches = [[f"T{rng.randrange(tickers_count):04d}" for _ in range(BATCH_VALUES)] for _ in range(20)]
    index_json = [
        _post(
            "/v1/stores/indexed/indexes/by_ticker:batchGet",
            "application/json",
            orjson.dumps({"values": values}),
        )
        for values in value_batches
    ]
    index_arrow = [
        _post(
            "/v1/stores/indexed/indexes/by_ticker:batchGet",
            "application/vnd.apache.arrow.stream",
            _arrow_values(values),
        )
        for values in value_batches
    ]
    return lookups, index_json, index_arrow


def _stores() -> list[dict[str, object]]:
    """The three stores of one topic: plain, keeping history, and indexed by ticker."""
    return [
        {"name": "plain", "topic": TOPIC, "value_format": "json"},
        {
            "name": "history",
            "topic": TOPIC,
            "value_format": "json",
            "history": {"retention_offsets": 10_000_000},
        },
        {
            "name": "indexed",
            "topic": TOPIC,
            "value_format": "json",
            "indexes": [{"name": "by_ticker", "field": "ticker"}],
        },
    ]


def _measure_round(
    round_number: int,
    loads: tuple[dict[str, Load], dict[str, Load], dict[str, Load]],
    seconds: float,
    rows_per_ticker: int,
    record: Callable[[str, float], None],
) -> None:
    """One round: the index lookups, then plain and history stores' GETs and batches, interleaved."""
    index_loads, single, batched = loads
    measured = _interleaved(index_loads, seconds)
    record("index GET lookups/s", measured["index GET"][0])
    record("index GET rows/s", measured["index GET"][0] * rows_per_ticker)
    for form in ("JSON", "Arrow"):
        rate = measured[f"index batch {form}"][0]
        record(f"index batch {form} values/s", rate * BATCH_VALUES)
        record(f"index batch {form} rows/s", rate * BATCH_VALUES * rows_per_ticker)
    singles = _interleaved(single, seconds)
    multis = _interleaved(batched, seconds)
    record("plain GET req/s", singles["plain GET"][0])
    record("history GET req/s", singles["history GET"][0])
    record("plain batch keys/s", multis["plain batch"][0] * BATCH_KEYS)
    record("history batch keys/s", multis["history batch"][0] * BATCH_KEYS)
    record("ratio GET history/plain", singles["history GET"][0] / singles["plain GET"][0])
    record("ratio batch history/plain", multis["history batch"][0] / multis["plain batch"][0])
    print(
        f"round {round_number}: index GET {measured['index GET'][0]:,.0f}/s,"
        f" batch JSON {measured['index batch JSON'][0] * BATCH_VALUES:,.0f} values/s;"
        f" GET plain {singles['plain GET'][0]:,.0f}"
        f" vs history {singles['history GET'][0]:,.0f} req/s;"
        f" batch plain {multis['plain batch'][0] * BATCH_KEYS:,.0f}"
        f" vs history {multis['history batch'][0] * BATCH_KEYS:,.0f} keys/s",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=50_000, help="rows in the table")
    parser.add_argument(
        "--tickers", type=int, default=1000, help="distinct indexed values (rows per value: keys/tickers)"
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="measured seconds per contender and round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported")
    parser.add_argument(
        "--connections", type=int, default=4, help="concurrent connections of the load generator"
    )
    args = parser.parse_args(argv)
    _pin(CLIENT_CPU)
    rows_per_ticker = args.keys // args.tickers
    rng = random.Random(42)
    results: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory(prefix="index-http-bench-") as tmp, LocalBroker() as broker:
        print(f"producing {args.keys:,} records to {TOPIC}...", flush=True)
        _produce(
            broker.bootstrap_servers, [(_key(i), _value(i, args.tickers)) for i in range(args.keys)], True
        )
        config = Path(tmp) / "statestore.yaml"
        stores = _stores()
        config.write_text(
            json.dumps(
                {
                    "kafka": {"bootstrap_servers": broker.bootstrap_servers},
                    "state_dir": f"{tmp}/state",
                    "stores": stores,
                }
            )
        )
        port = _free_port()
        me = [sys.executable, "-m", "bench.http_bench"]
        with _child([*me, "--serve", "store", "--port", str(port), "--config", str(config)]):
            _wait_http(port, "/readyz", timeout=300)
            # History starts when the store is READY: updates after that become old versions.
            updated = args.keys // 5
            print(f"ready; updating {updated:,} rows so the history store holds old versions...", flush=True)
            _produce(
                broker.bootstrap_servers,
                [(_key(i), _value(i, args.tickers, 1)) for i in rng.sample(range(args.keys), updated)],
                False,
            )
            for store in ("plain", "history", "indexed"):
                _wait_caught_up(port, store, args.keys + updated)

            lookups, index_json, index_arrow = _index_requests(rng, args.tickers)
            single_keys = [_key(rng.randrange(args.keys)).decode() for _ in range(5000)]
            key_batches = [
                orjson.dumps({"keys": [_key(rng.randrange(args.keys)).decode() for _ in range(BATCH_KEYS)]})
                for _ in range(50)
            ]

            def gets(store: str) -> list[bytes]:
                return [_get(f"/v1/stores/{store}/keys/{quote(k)}") for k in single_keys]

            def batches(store: str) -> list[bytes]:
                return [
                    _post(f"/v1/stores/{store}/keys:batchGet", "application/json", b) for b in key_batches
                ]

            n = args.connections
            index_loads = {
                "index GET": _http(port, lookups, n, orjson.loads),
                "index batch JSON": _http(port, index_json, n, orjson.loads),
                "index batch Arrow": _http(port, index_arrow, n, _read_arrow),
            }
            single = {
                "plain GET": _http(port, gets("plain"), n, orjson.loads),
                "history GET": _http(port, gets("history"), n, orjson.loads),
            }
            batched = {
                "plain batch": _http(port, batches("plain"), n, orjson.loads),
                "history batch": _http(port, batches("history"), n, orjson.loads),
            }
            for load in (*index_loads.values(), *single.values(), *batched.values()):
                load(0.5)  # warm-up
            print(f"measuring {args.rounds} rounds of {args.seconds:g} s per contender", flush=True)
            for round_number in range(1, args.rounds + 1):
                _measure_round(
                    round_number, (index_loads, single, batched), args.seconds, rows_per_ticker, record
                )

    median = {name: statistics.median(values) for name, values in results.items()}
    print(
        f"\nmedians over {args.rounds} rounds ({args.keys:,} rows, {args.tickers:,} tickers"
        f" = {rows_per_ticker} rows each, {args.connections} connections):"
    )
    for name, value in median.items():
        if not name.startswith("ratio"):
            print(f"  {name:30s} {value:>14,.0f}")
    print(f"  history vs plain, single GET   {median['ratio GET history/plain']:>13.0%}  (target >= 90%)")
    print(
        f"  history vs plain, 1,000-key batch {median['ratio batch history/plain']:>10.0%}  (target >= 90%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

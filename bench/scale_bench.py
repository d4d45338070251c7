"""Cost as the table grows (issue 19): one table of ``--records`` keys, every figure in one run.

Data: ``--records`` JSON values (~105 B) under 16-byte keys (the hex MD5 of the record number, so
keys arrive in random order and spread uniformly over the key space), 6 partitions, produced once
to the embedded broker; ``redis-server`` holds the same keys and values. Servers (the service,
``redis-server``) run pinned to CPU 0, the load generator (this process) to CPU 1, with
``--connections`` connections for every contender; contenders alternate in half-second slices
(``bench/http_bench.py``); medians over ``--rounds`` rounds of ``--seconds`` each.

Cold keys are keys nobody asked for before in the run: every batch takes the next 1,000 record
numbers (``FreshKeys``), so neither the service's hot-key cache nor Redis has seen them; RocksDB's
block cache holds what its size allows. The service and Redis draw from streams of their own, and
no key comes twice: once every key was asked, the round cut short is dropped
(``--cold-keys-repeat`` lets keys start over, for smoke runs of small tables). Hot keys are 50
prepared batches asked over and over.

Parts (``--parts``, comma-separated; default all):

- ``bootstrap``: a ``Store`` restoring the topic from empty to READY in a child process, against
  the tuned bare consumer of ``bench/bootstrap_bench.py`` on the same topic, alternating
  ``--bootstrap-rounds`` times; the peak PSS of the store's process plus its restore workers
  (sampled every 50 ms); its size on disk at READY.
- ``after-ready``: ``statestore serve`` restores the topic itself (the seconds it spent merging the
  bulk-loaded files and reading them into its block cache before READY shown); cold JSON batch
  gets (and Redis ``MGET`` beside them) right when it is READY, and again once compactions are
  done (level-0 files shown).
- ``cold``: 1,000-key batch gets, JSON and Arrow, cold and hot, against Redis ``MGET`` of the same
  keys; after the service stopped, the in-process ``Store.view().get_many`` on its state dir
  (measured apart, on CPU 1).
- ``freshness``: ``--write-rate`` updates/s of random keys from a producer process while the
  connections read cold batches: write-to-visible latency (from a record's CreateTime to the
  first answer whose ``Statestore-Position`` covers it, probed every ~2 ms on one more
  connection) and read throughput against the same reads without writes.
- ``spark``: ``lookup_join`` of ``--facts`` rows against the store (``bench/scale_spark.py``).
- ``cold-ratio``: the table against one of ``--small-records`` (default a tenth of it), each served
  by a service of its own with the same default settings, cold JSON and Arrow batches of both
  alternated in slices of ``--ratio-batches`` batches (a number of keys, not a time, so that a 1M
  table's keys suffice: each table's keys are asked once, at most ``--ratio-rounds`` rounds);
  prints ``cold reads 10M / 1M: N.NN`` (``bench/scale_cold_ratio.py``). Runs after the other
  parts, with services of its own.

``--save FILE`` writes the figures as JSON; ``--baseline FILE`` (such a file, e.g. of a 1M run)
adds a column with each figure as a share of the baseline's. A ratio of two sizes is best taken
in one run, interleaved (``cold-ratio``); across runs the load of each run is in it::

    python -m bench scale --records 10000000 --parts cold-ratio        # 10M against 1M, ~3 min
    python -m bench scale --records 1000000 --save scale-1m.json
    python -m bench scale --records 10000000 --baseline scale-1m.json   # several minutes
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from bench.http_bench import (
    CLIENT_CPU,
    SERVER_CPU,
    Load,
    _child,
    _free_port,
    _http,
    _interleaved,
    _redis,
)
from bench.scale_cold_ratio import FIGURES as RATIO_FIGURES
from bench.scale_cold_ratio import cold_ratio_part
from bench.scale_data import (
    BATCH,
    STORE,
    TOPIC,
    FreshKeys,
    FreshKeysExhaustedError,
    key,
    produce_table,
    settings,
    value,
)
from bench.scale_freshness import TAIL_SECONDS, freshness_part
from bench.scale_support import (
    MIB,
    PeakMemory,
    Service,
    arrow_post,
    check_arrow,
    check_json,
    json_post,
    median,
    pin_process,
    pinned,
    running,
    table_state,
    tree_pss,
)
from service.local.broker import LocalBroker
from store import Store, StoreConfig
from store.table import directory_size

PARTS = ("bootstrap", "after-ready", "cold", "freshness", "spark", "cold-ratio")
# Every figure each part reports ("service" comes with any part that reads from the service).
FIGURES: dict[str, tuple[str, ...]] = {
    "bootstrap": (
        "bare consumer records/s",
        "store records/s",
        "store / bare",
        "peak PSS, store + workers (MiB)",
        "disk at READY (MiB)",
    ),
    "service": (
        "READY from process start (s)",
        "of which merging the restored files (s)",
        "of which reading the table into the block cache (s)",
        "peak PSS while restoring (MiB)",
    ),
    "after-ready": (
        "level-0 files at READY / after the reads / settled",
        "JSON cold keys/s right after READY",
        "JSON cold keys/s settled",
        "right after READY / settled",
        "JSON / Redis MGET right after READY / settled",
        "seconds from READY to settled",
    ),
    "cold": (
        "JSON cold keys/s",
        "Arrow cold keys/s",
        "Redis MGET cold keys/s",
        "JSON hot keys/s",
        "Arrow hot keys/s",
        "Redis MGET hot keys/s",
        "JSON / Redis MGET, cold",
        "Arrow / Redis MGET, cold",
        "JSON / Redis MGET, hot",
        "Arrow / Redis MGET, hot",
        "service PSS after the reads (MiB)",
        "disk, settled (MiB)",
        "in-process view().get_many cold keys/s",
        "in-process view().get_many hot keys/s",
    ),
    "freshness": (
        "updates written per second",
        "write-to-visible p50 (ms)",
        "write-to-visible p99 (ms)",
        "bare consumer, write-to-received p50 (ms)",
        "bare consumer, write-to-received p99 (ms)",
        f"updates not visible {TAIL_SECONDS:g} s after the writes",
        "JSON cold keys/s without writes",
        "JSON cold keys/s with writes",
        "with / without writes",
    ),
    "spark": ("fact rows", "lookup_join rows/s", "Python workers' peak PSS (MiB)", "broadcast join rows/s"),
    "cold-ratio": RATIO_FIGURES,
}
_STARTED = time.perf_counter()


def _begin(what: str) -> None:
    """Say what runs now, and when (seconds since the start), so long runs show progress."""
    print(f"== {what} (at {time.perf_counter() - _STARTED:.0f} s)", flush=True)


class Report:
    """Figures in the order measured: (part, figure, number, text); ``number`` is saved and compared."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, float | None, str]] = []

    def add(self, part: str, figure: str, number: float | None, text: str | None = None) -> None:
        shown = text if text is not None else "-" if number is None else f"{number:,.0f}"
        self.rows.append((part, figure, number, shown))
        print(f"  {part}: {figure}: {shown}", flush=True)

    def missing(self, parts: list[str]) -> list[str]:
        """The figures of ``parts`` (see ``FIGURES``) not reported."""
        reported = {(part, figure) for part, figure, _, _ in self.rows}
        return [
            f"{part}: {figure}"
            for part in parts
            for figure in FIGURES[part]
            if (part, figure) not in reported
        ]

    def numbers(self) -> dict[str, float]:
        return {f"{part}: {figure}": n for part, figure, n, _ in self.rows if n is not None}

    def table(self, records: int, baseline: dict[str, object] | None) -> str:
        lines = []
        if baseline is None:
            lines += ["| part | figure | value |", "|---|---|---:|"]
        else:
            base_records = baseline.get("records")
            lines += [f"| part | figure | value | vs {base_records:,} records |", "|---|---|---:|---:|"]
        base_numbers = baseline.get("numbers", {}) if baseline else {}
        assert isinstance(base_numbers, dict)
        for part, figure, number, text in self.rows:
            row = f"| {part} | {figure} | {text} |"
            if baseline is not None:
                base = base_numbers.get(f"{part}: {figure}")
                share = f"{number / base:.0%}" if number is not None and base else "-"
                row += f" {share} |"
            lines.append(row)
        return f"{records:,} records\n\n" + "\n".join(lines)


# -- requests and answers -------------------------------------------------------------------------


def _rounds(contenders: dict[str, Load], rounds: int, seconds: float) -> dict[str, list[float]]:
    """keys/s of each contender per round, in interleaved slices; the rounds before a cold key
    stream ran out (the round it cut short is dropped: its slices were not all measured)."""
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for number in range(rounds):
        try:
            measured = _interleaved(contenders, seconds)
        except FreshKeysExhaustedError as exc:
            if number == 0:
                raise SystemExit(f"no round measured: {exc}") from exc
            print(f"note: {number} of {rounds} rounds measured: {exc}", flush=True)
            break
        for name, (rate, _latencies) in measured.items():
            rates[name].append(rate * BATCH)
    return rates


def _ratio(rates: dict[str, list[float]], name: str, base: str) -> float:
    return median([a / b for a, b in zip(rates[name], rates[base], strict=True) if b])


# -- children -------------------------------------------------------------------------------------


def _run_child(args: argparse.Namespace, name: str, *extra: str) -> tuple[dict[str, float], int]:
    """A child of this module; what it printed last (JSON), and the peak PSS of its process tree."""
    command = [sys.executable, "-m", "bench.scale_data", name, "--records", str(args.records)]
    process = subprocess.Popen(
        [*command, "--bootstrap", args.bootstrap, *extra], stdout=subprocess.PIPE, text=True
    )
    with PeakMemory.of(process.pid) as memory:
        output, _ = process.communicate()
    if process.returncode:
        raise SystemExit(f"child {name} failed with exit code {process.returncode}")
    lines = output.strip().splitlines()
    return (json.loads(lines[-1]) if lines else {}), memory.peak


# -- the parts ------------------------------------------------------------------------------------


def _load_data(args: argparse.Namespace, redis_port: int | None) -> None:
    """Produce the table and load Redis with it."""
    started = time.perf_counter()
    produce_table(args.bootstrap, args.records)
    if redis_port is not None:
        loader = redis.Redis(host="127.0.0.1", port=redis_port)
        for start in range(0, args.records, 10_000):
            loader.mset({key(i): value(i) for i in range(start, min(start + 10_000, args.records))})
        loader.close()
    print(f"table of {args.records:,} records ready in {time.perf_counter() - started:.1f} s", flush=True)


def _part_bootstrap(args: argparse.Namespace, tmp: Path, report: Report) -> None:
    bare, store, peaks, disks = [], [], [], []
    for round_number in range(args.bootstrap_rounds):
        result, _ = _run_child(args, "bare")
        bare.append(args.records / result["seconds"])
        state_dir = tmp / f"bootstrap-{round_number}"
        result, peak = _run_child(args, "store", "--state-dir", str(state_dir))
        shutil.rmtree(state_dir, ignore_errors=True)
        store.append(args.records / result["seconds"])
        peaks.append(peak)
        disks.append(result["disk"])
        print(f"round {round_number + 1}: bare {bare[-1]:,.0f}, store {store[-1]:,.0f} records/s", flush=True)
    report.add("bootstrap", "bare consumer records/s", median(bare))
    report.add("bootstrap", "store records/s", median(store))
    report.add(
        "bootstrap", "store / bare", None, f"{median([s / b for s, b in zip(store, bare, strict=True)]):.0%}"
    )
    report.add("bootstrap", "peak PSS, store + workers (MiB)", max(peaks) / MIB)
    report.add("bootstrap", "disk at READY (MiB)", median(disks) / MIB)


def _part_after_ready(
    service: Service, contenders: dict[str, Load], args: argparse.Namespace, report: Report
) -> None:
    """Called right after READY: reads now, then again once compactions are done."""
    ready_at = time.perf_counter()
    state = table_state(service.db_path)
    for load in contenders.values():
        load(0.2)  # connections open, the service's first requests served
    now = _rounds(contenders, 1, args.seconds)
    later_state = table_state(service.db_path)
    service.wait_settled()
    settled_at = time.perf_counter()
    settled_state = table_state(service.db_path)
    settled = _rounds(contenders, 1, args.seconds)
    part, redis = "after-ready", "Redis MGET cold"
    report.add(
        part,
        "level-0 files at READY / after the reads / settled",
        None,
        f"{state.level0_files} / {later_state.level0_files} / {settled_state.level0_files}",
    )
    report.add(part, "JSON cold keys/s right after READY", now["JSON cold"][0])
    report.add(part, "JSON cold keys/s settled", settled["JSON cold"][0])
    report.add(
        part, "right after READY / settled", None, f"{now['JSON cold'][0] / settled['JSON cold'][0]:.0%}"
    )
    report.add(
        part,
        "JSON / Redis MGET right after READY / settled",
        None,
        f"{_ratio(now, 'JSON cold', redis):.0%} / {_ratio(settled, 'JSON cold', redis):.0%}",
    )
    seconds = settled_at - ready_at
    report.add(part, "seconds from READY to settled", seconds, f"{seconds:.1f}")


def _part_cold(
    service: Service,
    streams: tuple[FreshKeys, FreshKeys],
    redis_port: int,
    args: argparse.Namespace,
    report: Report,
) -> list[list[bytes]]:
    """``streams``: the service's cold keys, and Redis's (apart, so Redis does not use up the
    service's)."""
    stream, redis_stream = streams
    rng = random.Random(42)
    hot = [[key(rng.randrange(args.records)) for _ in range(BATCH)] for _ in range(50)]
    n = args.connections
    contenders = {
        "JSON cold": _http(service.port, lambda _n: json_post(stream.batch()), n, check_json),
        "Arrow cold": _http(service.port, lambda _n: arrow_post(stream.batch()), n, check_arrow),
        "Redis MGET cold": _redis(redis_port, redis_stream.batch, n),
        "JSON hot": _http(service.port, [json_post(b) for b in hot], n, check_json),
        "Arrow hot": _http(service.port, [arrow_post(b) for b in hot], n, check_arrow),
        "Redis MGET hot": _redis(redis_port, hot, n),
    }
    for load in contenders.values():
        load(0.5)  # warm-up: connections, the hot keys' cache
    rates = _rounds(contenders, args.rounds, args.seconds)
    for name, values in rates.items():
        report.add("cold", f"{name} keys/s", median(values))
    for kind in ("cold", "hot"):
        for contender in ("JSON", "Arrow"):
            share = _ratio(rates, f"{contender} {kind}", f"Redis MGET {kind}")
            report.add("cold", f"{contender} / Redis MGET, {kind}", share * 100, f"{share:.0%}")
    report.add("cold", "service PSS after the reads (MiB)", tree_pss(service.pid) / MIB)
    report.add("cold", "disk, settled (MiB)", directory_size(service.state_dir) / MIB)
    return hot


def _in_process(
    args: argparse.Namespace, state_dir: Path, stream: FreshKeys, hot: list[list[bytes]], report: Report
) -> None:
    """``Store.view().get_many`` in this process, on the state the service left; read time only."""
    store = Store(StoreConfig(STORE, TOPIC, {"bootstrap.servers": args.bootstrap}, state_dir))
    store.start()
    try:
        if not store.wait_until_ready(timeout=600):
            raise SystemExit("the in-process store did not become READY")
        budget = args.seconds * args.rounds
        for kind, batch_at in (("cold", stream.batch), ("hot", lambda n: hot[n % len(hot)])):
            spent, asked = 0.0, 0
            while spent < budget:
                try:
                    keys = batch_at(asked)
                except FreshKeysExhaustedError:
                    break  # every key read once: the rate is over what was read
                started = time.perf_counter()
                with store.view() as view:
                    values = view.get_many(keys)
                spent += time.perf_counter() - started
                asked += 1
                if None in values:
                    raise SystemExit("the in-process store lacks keys of the table")
            report.add("cold", f"in-process view().get_many {kind} keys/s", asked * BATCH / spent)
    finally:
        store.stop()


# -- orchestration --------------------------------------------------------------------------------


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=200_000, help="keys in the table")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of: {', '.join(PARTS)}")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per contender and round")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of the read parts; medians are reported"
    )
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--bootstrap-rounds", type=int, default=1, help="alternating bare/store restores")
    parser.add_argument("--write-rate", type=int, default=50_000, help="updates/s of the freshness part")
    parser.add_argument("--facts", type=int, help="fact rows of the Spark part (default: --records)")
    parser.add_argument(
        "--broadcast-max-rows",
        type=int,
        default=2_000_000,
        help="largest products table the Spark part broadcasts",
    )
    parser.add_argument(
        "--kafka",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka setting of the store (and of the freshness part's bare consumer)",
    )
    parser.add_argument(
        "--cold-keys-repeat",
        action="store_true",
        help="let cold keys start over once every key was asked (smoke runs of small tables; the"
        " cold figures are then not cold)",
    )
    parser.add_argument(
        "--small-records", type=int, help="keys in the small table of cold-ratio (default: --records / 10)"
    )
    parser.add_argument(
        "--ratio-batches", type=int, default=20, help="1,000-key batches in each slice of cold-ratio"
    )
    parser.add_argument(
        "--ratio-rounds", type=int, default=20, help="most rounds of cold-ratio (fewer if keys run out)"
    )
    parser.add_argument("--save", type=Path, help="write the figures to this JSON file")
    parser.add_argument("--baseline", type=Path, help="a --save file to compare with")
    args = parser.parse_args(argv)
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = set(args.parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    args.small_records = args.small_records or max(BATCH, args.records // 10)
    return args


def _serve_parts(args: argparse.Namespace, tmp: Path, redis_port: int, report: Report) -> None:
    """Every part that reads from ``statestore serve``, in one service process."""
    # Every cold key the service is asked comes from ``stream``, once; Redis has its own.
    stream = FreshKeys(args.records, args.cold_keys_repeat)
    redis_stream = FreshKeys(args.records, args.cold_keys_repeat)
    service = Service(tmp, args.bootstrap, settings(args.kafka))
    hot: list[list[bytes]] = []
    with running(service):
        _begin("service: restoring the topic")
        seconds, peak = service.start()
        report.add("service", "READY from process start (s)", seconds, f"{seconds:.1f}")
        for figure, seconds_spent in zip(FIGURES["service"][1:3], service.settle_seconds(), strict=True):
            text = "none" if seconds_spent is None else f"{seconds_spent:.1f}"
            report.add("service", figure, seconds_spent, text)
        report.add("service", "peak PSS while restoring (MiB)", peak / MIB)
        pin_process(service.pid, SERVER_CPU)
        with pinned(CLIENT_CPU):
            n = args.connections
            if "after-ready" in args.parts:
                _begin("after-ready")
                reference = {
                    "JSON cold": _http(service.port, lambda _n: json_post(stream.batch()), n, check_json),
                    "Redis MGET cold": _redis(redis_port, redis_stream.batch, n),
                }
                _part_after_ready(service, reference, args, report)
            service.wait_settled()
            pin_process(service.pid, SERVER_CPU)
            if "cold" in args.parts:
                _begin("cold")
                hot = _part_cold(service, (stream, redis_stream), redis_port, args, report)
            if "freshness" in args.parts:
                _begin("freshness")
                for figure, number, text in freshness_part(service, stream, args, tmp):
                    report.add("freshness", figure, number, text)
        if "spark" in args.parts:
            from bench.scale_spark import spark_part  # noqa: PLC0415 (pyspark only when asked)

            _begin("spark")
            facts = args.facts or args.records
            figures = spark_part(service.url, args.records, facts, tmp, args.broadcast_max_rows)
            for figure, (number, text) in figures.items():
                report.add("spark", figure, number, text)
    twice = "some twice (--cold-keys-repeat): not cold" if stream.repeated else "none twice"
    print(f"cold keys asked of the service: {stream.asked:,} of {args.records:,}, {twice}", flush=True)
    if "cold" in args.parts:
        _begin("cold: in-process reads")
        with pinned(CLIENT_CPU):
            # A store opened anew in this process: none of the keys is in its caches yet.
            _in_process(args, service.state_dir, FreshKeys(args.records, args.cold_keys_repeat), hot, report)


def _run_parts(args: argparse.Namespace, tmp: Path, redis_port: int | None, report: Report) -> None:
    """Produce the table, then run the parts asked (``redis_port``: Redis, for the parts that
    read from the service)."""
    _begin(f"producing {args.records:,} records" + (", loading Redis" if redis_port else ""))
    _load_data(args, redis_port)
    if "bootstrap" in args.parts:
        _begin("bootstrap")
        _part_bootstrap(args, tmp, report)
    if redis_port is not None:
        _serve_parts(args, tmp, redis_port, report)
    if "cold-ratio" in args.parts:
        _begin(f"cold-ratio: {args.small_records:,} records against {args.records:,}")
        cold_ratio_part(args, tmp, lambda figure, n, text: report.add("cold-ratio", figure, n, text))


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    # Stopped from outside: leave through the with-blocks, which stop the broker, Redis and the service.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    serving = {"after-ready", "cold", "freshness", "spark"} & set(args.parts)
    redis_binary = shutil.which("redis-server")
    if serving and redis_binary is None:
        print("redis-server is missing: apt-get install -y redis-server (or `make bench`)", file=sys.stderr)
        return 1
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    report = Report()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp_name, LocalBroker() as broker:
        tmp = Path(tmp_name)
        args.bootstrap = broker.bootstrap_servers
        redis_port = _free_port()
        redis_args = [
            redis_binary or "redis-server",
            "--port",
            str(redis_port),
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        if shutil.which("taskset"):
            redis_args = ["taskset", "-c", str(SERVER_CPU), *redis_args]
        with _child(redis_args, quiet=True) if serving else contextlib.nullcontext():
            if serving:
                time.sleep(0.2)
            _run_parts(args, tmp, redis_port if serving else None, report)
    load = f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    print(f"\n{report.table(args.records, baseline)}\n\n({load}; {os.cpu_count()} CPUs)")
    missing = report.missing([*args.parts, *(["service"] if serving else [])])
    if missing:
        print(f"figures missing: {', '.join(missing)}", file=sys.stderr)
        return 1
    if args.save:
        args.save.write_text(json.dumps({"records": args.records, "numbers": report.numbers()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The freshness part of ``python -m bench scale``: updates at a steady rate while cold batch gets
run, and how long each update takes to be visible to a reader, beside a bare consumer's view.

A writer process produces ``--write-rate`` updates/s of random keys; a probe connection reads the
store's position (``Statestore-Position``) every ~2 ms while ``--connections`` connections ask
cold 1,000-key batches. An update is visible from the first probe answer whose position covers its
offset; its latency runs from its CreateTime (set by the producer when it was produced). A bare
consumer with the store's consumer settings (``bench.scale_data watcher``) reads the same updates:
its write-to-received latency is what the broker and the client library alone cost.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import uvloop

from bench.http_bench import _http_load
from bench.scale_data import BATCH, FreshKeys
from bench.scale_support import Service, check_json, json_post, median, probe_request
from store import Position

# How long the freshness part keeps probing after the writes end.
TAIL_SECONDS = 2.0
# (figure, number, text) in the order measured.
Figures = list[tuple[str, float | None, str | None]]


async def _reads_and_probes(
    port: int, request_at: Callable[[int], bytes], seconds: float, connections: int, tail: float
) -> tuple[int, list[tuple[float, Position]]]:
    """Batches on ``connections`` for ``seconds``; meanwhile, for ``tail`` s longer, the position
    every ~2 ms on one more connection: (batches answered, [(time answered, position)])."""
    probes: list[tuple[float, Position]] = []

    async def probe() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = probe_request()
        deadline = time.perf_counter() + seconds + tail
        while time.perf_counter() < deadline:
            writer.write(request)
            head = (await reader.readuntil(b"\r\n\r\n")).lower()
            start = head.index(b"content-length:") + 15
            await reader.readexactly(int(head[start : head.index(b"\r\n", start)]))
            answered = time.time()
            start = head.index(b"statestore-position:") + 20
            probes.append(
                (answered, Position.parse(head[start : head.index(b"\r\n", start)].decode().strip()))
            )
            await asyncio.sleep(0.002)
        writer.close()

    (answers, _), _ = await asyncio.gather(
        _http_load(port, request_at, seconds, connections, check_json), probe()
    )
    return answers, probes


def _visible_after(
    deliveries: list[tuple[int, int, int]], probes: list[tuple[float, Position]]
) -> tuple[list[float], int]:
    """Seconds from each record's CreateTime to the first probe whose position covers it; and how
    many records no probe saw."""
    times = [t for t, _ in probes]
    covered: dict[int, list[int]] = {}
    for partition in {p for p, _, _ in deliveries}:
        highest, offsets = 0, []
        for _, position in probes:
            highest = max(highest, position.get(partition, 0))
            offsets.append(highest)
        covered[partition] = offsets
    latencies, unseen = [], 0
    for partition, offset, created_ms in deliveries:
        index = bisect.bisect_right(covered[partition], offset)
        if index == len(times):
            unseen += 1
        else:
            latencies.append(times[index] - created_ms / 1000)
    return sorted(latencies), unseen


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * fraction))]


def _updating(
    args: argparse.Namespace, tmp: Path, round_number: int
) -> tuple[Path, Path, list[subprocess.Popen[str]]]:
    """Start the writer and the bare watcher (both wait for a go on stdin): their output files."""
    deliveries, arrivals = tmp / f"deliveries-{round_number}.txt", tmp / f"arrivals-{round_number}.txt"
    common = [sys.executable, "-m", "bench.scale_data", "--bootstrap", args.bootstrap,
              "--records", str(args.records), *(f"--kafka={setting}" for setting in args.kafka)]  # fmt: skip
    children = [
        subprocess.Popen(
            [*common, name, "--seconds", str(seconds), "--rate", str(args.write_rate), "--out", str(out)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, seconds, out in (
            ("writer", args.seconds, deliveries),
            ("watcher", args.seconds + TAIL_SECONDS, arrivals),
        )
    ]
    for child in children:
        assert child.stdout is not None
        child.stdout.readline()  # "ready"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    return deliveries, arrivals, children


def freshness_part(service: Service, stream: FreshKeys, args: argparse.Namespace, tmp: Path) -> Figures:
    """Rounds of reads without writes, then with them: the figures in the order measured."""
    request_at = lambda _n: json_post(stream.batch())  # noqa: E731
    quiet, loaded, visible, received, unseen, written = [], [], [], [], 0, 0
    for round_number in range(args.rounds):
        answers, _ = uvloop.run(
            _reads_and_probes(service.port, request_at, args.seconds, args.connections, 0)
        )
        quiet.append(answers * BATCH / args.seconds)
        deliveries_path, arrivals_path, children = _updating(args, tmp, round_number)
        answers, probes = uvloop.run(
            _reads_and_probes(service.port, request_at, args.seconds, args.connections, TAIL_SECONDS)
        )
        if any(child.wait(timeout=120) for child in children):
            raise SystemExit("the writer or the watcher failed")
        loaded.append(answers * BATCH / args.seconds)
        deliveries = [
            (int(p), int(o), int(t))
            for p, o, t in (line.split() for line in deliveries_path.read_text().splitlines())
        ]
        written += len(deliveries)
        seen, missed = _visible_after(deliveries, probes)
        visible += seen
        unseen += missed
        received += [float(line) / 1e3 for line in arrivals_path.read_text().splitlines()]
    visible.sort()
    received.sort()
    figures: Figures = [("updates written per second", written / (args.seconds * args.rounds), None)]
    for name, latencies in (("write-to-visible", visible), ("bare consumer, write-to-received", received)):
        for label, fraction in (("p50", 0.5), ("p99", 0.99)):
            at = _percentile(latencies, fraction) * 1e3
            figures.append((f"{name} {label} (ms)", at, f"{at:,.1f}"))
    share = median(loaded) / median(quiet) if median(quiet) else float("nan")
    figures += [
        (f"updates not visible {TAIL_SECONDS:g} s after the writes", unseen, None),
        ("JSON cold keys/s without writes", median(quiet), None),
        ("JSON cold keys/s with writes", median(loaded), None),
        ("with / without writes", share * 100, f"{share:.0%}"),
    ]
    return figures

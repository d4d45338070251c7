"""The ``cold-ratio`` part of ``python -m bench scale``: cold reads of a large table against a small
one, interleaved in one run.

Two tables of the same records (``bench/scale_data.py``): the bench's table of ``--records`` and
one of ``--small-records`` (default a tenth) produced to a topic of its own. Each is served by a
``statestore serve`` of its own with the same settings (the defaults: the engine's default tuning,
its shared block cache, which holds either table), restored from empty, then left until its
compactions are done, its keys counted and its first background verification pass over: nothing
of the restore, nor the background reads of the whole table that follow it, runs while measured.
Both services are pinned to CPU 0, the load generator to CPU 1, ``--connections`` connections for
every contender.

Contenders: cold JSON and cold Arrow 1,000-key batch gets of each table. A slice asks
``--ratio-batches`` batches (a number of keys, not a time: so the small table's keys suffice);
a round is one slice of each contender, the two tables' slices of a format back to back, the
larger table first in every other round. Each table has its own ``FreshKeys`` stream, shared by
its JSON and Arrow contenders: no key is asked of a table twice in the run. Rounds: as many as the
small table's keys allow, at most ``--ratio-rounds`` (20 by default: 800,000 of a 1M table's keys
at 20 batches a slice). Reported: each contender's keys/s (median over the rounds) and the
large-to-small ratio of each format (median of the per-round ratios), printed as::

    cold reads 10M / 1M: 0.71
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import uvloop

from bench.http_bench import CLIENT_CPU, SERVER_CPU
from bench.http_load import Check, _http_slice
from bench.scale_data import BATCH, TOPIC, FreshKeys, produce_table, settings
from bench.scale_support import (
    MIB,
    Service,
    arrow_post,
    background_done,
    check_arrow,
    check_json,
    json_post,
    median,
    pin_process,
    pinned,
    running,
    tree_pss,
)

SMALL_TOPIC = "scale-bench-small"
FORMATS: dict[str, tuple[Callable[[list[bytes]], bytes], Check]] = {
    "JSON": (json_post, check_json),
    "Arrow": (arrow_post, check_arrow),
}
WARM_ATTEMPTS = 3
# A slice ends once its batches are answered; this only bounds a stalled one.
SLICE_LIMIT_SECONDS = 60.0
FIGURES = (
    "records, small / large table",
    "READY from process start, small / large (s)",
    "rounds measured (cold keys asked of the small / large table)",
    "JSON cold keys/s, small table",
    "JSON cold keys/s, large table",
    "Arrow cold keys/s, small table",
    "Arrow cold keys/s, large table",
    "JSON cold, large / small",
    "Arrow cold, large / small",
    "service PSS after the reads, small / large (MiB)",
)
Add = Callable[[str, float | None, str | None], None]


def size_name(records: int) -> str:
    """``10M``, ``200k``, ``1.5M``: a table size as the figures name it."""
    if records >= 1_000_000:
        return f"{records / 1_000_000:g}M"
    return f"{records / 1_000:g}k" if records >= 1_000 else str(records)


def _quiet(service: Service, label: str, timeout: float = 1800) -> None:
    """Wait until the store's compactions are done, its keys counted and its table verified."""
    started = time.perf_counter()
    service.wait_settled(timeout)
    while not background_done(service.url):
        if time.perf_counter() - started > timeout:
            raise SystemExit(f"the store of {service.url} was still busy after {timeout:.0f} s")
        time.sleep(0.5)
    waited = time.perf_counter() - started
    print(f"{label} table: waited {waited:.0f} s for its compactions, key count and first verification")


class _Table:
    """One table's service and cold key stream."""

    def __init__(self, service: Service, records: int, repeat: bool) -> None:
        self.service = service
        self.records = records
        self.stream = FreshKeys(records, repeat)

    def load(
        self, post: Callable[[list[bytes]], bytes], check: Check, connections: int
    ) -> Callable[[int], float]:
        """A contender: ``batches`` cold batches of this table; their keys/s."""
        port = self.service.port

        def run(batches: int) -> float:
            answered = uvloop.run(
                _http_slice(
                    port,
                    lambda _n: post(self.stream.batch()),
                    SLICE_LIMIT_SECONDS,
                    connections,
                    check,
                    batches,
                )
            )
            if answered.answers < batches:
                raise SystemExit(f"a slice of {batches} batches got {answered.answers} answers in time")
            return answered.answers * BATCH / answered.seconds

        return run


def _rounds_possible(args: argparse.Namespace) -> int:
    """Rounds the small table's keys allow (after the warm-up), at most ``--ratio-rounds``."""
    if args.cold_keys_repeat:
        return int(args.ratio_rounds)
    warm_keys = len(FORMATS) * args.connections * BATCH * WARM_ATTEMPTS
    per_round = len(FORMATS) * args.ratio_batches * BATCH
    rounds = min(int(args.ratio_rounds), (args.small_records - warm_keys) // per_round)
    if rounds < 1:
        raise SystemExit(
            f"cold-ratio: {args.small_records:,} keys of the small table do not make one round of"
            f" {per_round:,} keys; use more --small-records or fewer --ratio-batches"
        )
    return rounds


def _warm_up(name: str, load: Callable[[int], float], batches: int) -> None:
    """The service's first requests of a format served. A service left idle for minutes while the
    other restored may stall on its first requests on a loaded machine (seen: a connection closed
    for a request head not read within 10 s); the warm-up tries again, the measured slices never."""
    for attempt in range(1, WARM_ATTEMPTS + 1):
        try:
            load(batches)
            return
        except (OSError, EOFError) as exc:
            if attempt == WARM_ATTEMPTS:
                raise
            print(f"note: warm-up of {name}: {exc!r}; again", flush=True)


def _measure(tables: tuple[_Table, _Table], args: argparse.Namespace) -> dict[str, list[float]]:
    """keys/s of every contender per round (``"JSON small"``, ``"JSON large"``, ...)."""
    rounds = _rounds_possible(args)
    loads = {
        (kind, which): table.load(post, check, args.connections)
        for kind, (post, check) in FORMATS.items()
        for which, table in zip(("small", "large"), tables, strict=True)
    }
    for (kind, which), load in loads.items():
        _warm_up(f"{kind} {which}", load, args.connections)
    rates: dict[str, list[float]] = {f"{kind} {which}": [] for kind, which in loads}
    for number in range(rounds):
        for kind in FORMATS:
            order = ("small", "large") if number % 2 == 0 else ("large", "small")
            for which in order:
                rates[f"{kind} {which}"].append(loads[(kind, which)](args.ratio_batches))
    return rates


def _start(service: Service) -> float:
    seconds, _ = service.start()
    pin_process(service.pid, SERVER_CPU)
    return seconds


def cold_ratio_part(args: argparse.Namespace, tmp: Path, add: Add) -> None:
    """Serve both tables, measure, and ``add(figure, number, text)`` every figure of ``FIGURES``."""
    started = time.perf_counter()
    produce_table(args.bootstrap, args.small_records, SMALL_TOPIC)
    print(f"small table of {args.small_records:,} records ready in {time.perf_counter() - started:.1f} s")
    kafka = settings(args.kafka)
    small = Service(tmp, args.bootstrap, kafka, SMALL_TOPIC, "ratio-small")
    large = Service(tmp, args.bootstrap, kafka, TOPIC, "ratio-large")
    with running(small), running(large):
        # One after the other: neither restore competes with the other for the CPUs.
        ready = (_start(small), _start(large))
        for service, label in ((small, "small"), (large, "large")):
            _quiet(service, label)
            pin_process(service.pid, SERVER_CPU)  # threads started since
        tables = (
            _Table(small, args.small_records, args.cold_keys_repeat),
            _Table(large, args.records, args.cold_keys_repeat),
        )
        with pinned(CLIENT_CPU):
            try:
                rates = _measure(tables, args)
            except (OSError, EOFError, RuntimeError) as exc:  # a connection closed, an answer wrong
                for service in (small, large):
                    print(service.describe(), file=sys.stderr)
                raise SystemExit(f"cold-ratio: a read failed: {exc!r}") from exc
        pss = (tree_pss(small.pid) / MIB, tree_pss(large.pid) / MIB)
    _report(args, tables, ready, rates, pss, add)


def _spread(ratios: list[float]) -> str:
    """How far the rounds' ratios spread: their quartiles."""
    if len(ratios) < 2:
        return "one round"
    low, _, high = statistics.quantiles(ratios, n=4)
    return f"quartiles {low:.2f}-{high:.2f} of {len(ratios)} rounds"


def _report(
    args: argparse.Namespace,
    tables: tuple[_Table, _Table],
    ready: tuple[float, float],
    rates: dict[str, list[float]],
    pss: tuple[float, float],
    add: Add,
) -> None:
    small, large = tables
    add(FIGURES[0], None, f"{small.records:,} / {large.records:,}")
    add(FIGURES[1], None, f"{ready[0]:.1f} / {ready[1]:.1f}")
    rounds = len(rates["JSON small"])
    add(FIGURES[2], rounds, f"{rounds} ({small.stream.asked:,} / {large.stream.asked:,})")
    for kind in FORMATS:
        for which in ("small", "large"):
            add(f"{kind} cold keys/s, {which} table", median(rates[f"{kind} {which}"]), None)
    names = f"{size_name(large.records)} / {size_name(small.records)}"
    for kind in FORMATS:
        pairs = zip(rates[f"{kind} large"], rates[f"{kind} small"], strict=True)
        ratios = [a / b for a, b in pairs if b]
        ratio = median(ratios)
        add(f"{kind} cold, large / small", ratio, f"{ratio:.2f} ({_spread(ratios)})")
        label = "" if kind == "JSON" else f", {kind}"
        print(f"cold reads {names}{label}: {ratio:.2f}", flush=True)
    add(FIGURES[9], None, f"{pss[0]:,.0f} / {pss[1]:,.0f}")
    if small.stream.repeated:
        print("note: keys of the small table were asked twice (--cold-keys-repeat): not cold", flush=True)

"""Prometheus metrics: HTTP requests per route template, and each store's progress and size.

Store figures are read from ``status()`` when scraped, so nothing runs between scrapes. Each app
has its own registry, so several apps (tests, embedders) can live in one process; that registry
also carries the standard ``process_*`` and ``python_*`` families, which prometheus_client puts only
into its global registry.
"""

from __future__ import annotations

import importlib.metadata
import math
import platform
import time
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.registry import StoreRegistry
from store import RestoreMode, StoreState, StoreStatus
from wire.problems import CLIENT_TOO_MANY_REQUESTS, TOO_MANY_REQUESTS

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _le(bound: float) -> str:
    """A bucket's upper bound as the Prometheus client writes it (``0.5``, ``10.0``, ``+Inf``)."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def _last_contact_timestamp(status: StoreStatus) -> float | None:
    since = status.seconds_since_last_contact
    return None if since is None else time.time() - since


# One value per store: name, help, and how to read it from a status (None: no sample).
_STORE_GAUGES: tuple[tuple[str, str, Callable[[StoreStatus], float | None]], ...] = (
    (
        "statestore_keys",
        "Approximate number of keys (RocksDB's estimate: deletes and overwrites not yet compacted skew it)",
        lambda s: s.approximate_num_keys,
    ),
    (
        "statestore_counted_keys",
        "Keys holding a value, counted exactly at the position of the last count (absent until the"
        " first count; counted again once the records applied since pass a quarter of it)",
        lambda s: s.counted_keys,
    ),
    ("statestore_size_on_disk_bytes", "Size of the store's files", lambda s: s.size_on_disk_bytes),
    (
        "statestore_restore_remaining_records",
        "Records left before the store is READY",
        lambda s: s.restore.records_remaining if s.restore else 0,
    ),
    (
        "statestore_restore_progress_ratio",
        "Share of the current restore done, 0 to 1 (1 once READY)",
        lambda s: s.restore.progress if s.restore else 1.0,
    ),
    (
        "statestore_restore_eta_seconds",
        "Seconds until the restore reaches its target at the recent rate (absent while unknown)",
        lambda s: s.restore.eta_seconds if s.restore else 0.0,
    ),
    (
        "statestore_restore_waiting",
        "1 while the store waits for another store's bulk restore (engine.max_concurrent_bulk_restores)",
        lambda s: 1.0 if s.restore is not None and s.restore.mode is RestoreMode.WAITING else 0.0,
    ),
    (
        "statestore_last_contact_timestamp_seconds",
        "Unix time the broker last answered the store's consumer (stays put while it is unreachable)",
        _last_contact_timestamp,
    ),
    ("statestore_stale", "1 while a rebuild serves the last good copy", lambda s: 1.0 if s.stale else 0.0),
    (
        "statestore_corrupt",
        "1 while the served copy is corrupt: reads answer 503 store-corrupt until a rebuilt copy replaces it",
        lambda s: 1.0 if s.corruption is not None else 0.0,
    ),
    (
        "statestore_block_cache_capacity_bytes",
        "RocksDB block cache configured (engine.block_cache_bytes), every open copy",
        lambda s: s.memory.block_cache_capacity_bytes if s.memory else None,
    ),
    (
        "statestore_block_cache_usage_bytes",
        "RocksDB block cache in use",
        lambda s: s.memory.block_cache_usage_bytes if s.memory else None,
    ),
    (
        "statestore_memtable_bytes",
        "Writes held in memtables, not yet flushed",
        lambda s: s.memory.memtable_bytes if s.memory else None,
    ),
    (
        "statestore_read_cache_entries",
        "Hot keys cached in front of RocksDB (at most engine.read_cache_entries)",
        lambda s: s.memory.read_cache_entries if s.memory else None,
    ),
    (
        "statestore_timeline_entries",
        "Hot keys whose versions are kept for reads as of a time (at most engine.read_cache_entries / 16)",
        lambda s: s.memory.timeline_entries if s.memory else None,
    ),
    (
        "statestore_timeline_bytes",
        "Bytes of the versions kept for hot keys' reads as of a time (fields and values)",
        lambda s: s.memory.timeline_bytes if s.memory else None,
    ),
)


def _distribution_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_labels() -> dict[str, str]:
    """The labels of ``statestore_build_info``: versions of statestore and of what it runs on."""
    return {
        "version": _distribution_version("statestore"),
        "python": platform.python_version(),
        "librdkafka": str(confluent_kafka.libversion()[0]),
        "rocksdict": _distribution_version("rocksdict"),
    }


class StoreCollector(Collector):
    """Collects each store's status at scrape time."""

    def __init__(self, stores: StoreRegistry) -> None:
        self._stores = stores

    def collect(self) -> Iterator[Metric]:
        applied = CounterMetricFamily(
            "statestore_records_applied",
            "Records applied to the store since the process opened it",
            labels=["store"],
        )
        null_keys = CounterMetricFamily(
            "statestore_null_key_records", "Records skipped because their key was null", labels=["store"]
        )
        checked = CounterMetricFamily(
            "statestore_partition_checked_records",
            "Records whose partition was compared with the one their key hashes to (stores[].partitioner)",
            labels=["store"],
        )
        misplaced = CounterMetricFamily(
            "statestore_misplaced_records",
            "Records on another partition than their key hashes to: a client routing by key misses them",
            labels=["store"],
        )
        lag = GaugeMetricFamily(
            "statestore_lag_records", "End offset minus next offset", labels=["store", "partition"]
        )
        position = GaugeMetricFamily(
            "statestore_position", "Next offset to apply, per partition", labels=["store", "partition"]
        )
        corruptions = CounterMetricFamily(
            "statestore_corruptions_found",
            "Copies of the store found corrupt (by a read, the verification or the materializer)",
            labels=["store"],
        )
        undecodable = CounterMetricFamily(
            "statestore_undecodable_values",
            "Values that could not be decoded at ingest (unknown schema id, bad bytes): reads answer"
            " them as errors",
            labels=["store"],
        )
        verifications = CounterMetricFamily(
            "statestore_verification_passes",
            "Background verification passes over the served copy completed without finding corruption",
            labels=["store"],
        )
        state = GaugeMetricFamily(
            "statestore_state", "1 for the store's current state", labels=["store", "state"]
        )
        freshness = HistogramMetricFamily(
            "statestore_freshness_seconds",
            "Seconds from a record's timestamp until reads see it: the oldest record of each batch a"
            " READY store applies (its producer's clock counts)",
            labels=["store"],
        )
        gauges = [
            (GaugeMetricFamily(name, text, labels=["store"]), read) for name, text, read in _STORE_GAUGES
        ]
        for served in self._stores.all():
            current = self._stores.state_of(served)
            for candidate in StoreState:
                state.add_metric([served.name, candidate.value], 1.0 if candidate is current else 0.0)
            status = self._stores.status_of(served)
            if status is None:
                continue
            applied.add_metric([served.name], status.records_applied_total)
            null_keys.add_metric([served.name], status.null_key_records)
            if status.sharding is not None:
                checked.add_metric([served.name], status.sharding.records_checked)
                misplaced.add_metric([served.name], status.sharding.misplaced_records)
            corruptions.add_metric([served.name], status.corruptions_found)
            undecodable.add_metric([served.name], status.undecodable_values)
            verifications.add_metric([served.name], status.verification_passes)
            if status.freshness is not None:
                seen = status.freshness
                buckets = [(_le(bound), count) for bound, count in seen.cumulative()]
                freshness.add_metric([served.name], buckets, seen.sum_seconds)
            for partition, records in status.lag.items():
                lag.add_metric([served.name, str(partition)], records)
            for partition, offset in status.position.items():
                position.add_metric([served.name, str(partition)], offset)
            for gauge, read in gauges:
                value = read(status)
                if value is not None:
                    gauge.add_metric([served.name], value)
        yield from (applied, null_keys, checked, misplaced, corruptions, undecodable, verifications)
        yield from (lag, position, state)
        yield freshness
        yield from (gauge for gauge, _ in gauges)


class Metrics:
    """The app's metric registry and its HTTP instruments."""

    def __init__(self, stores: StoreRegistry) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "statestore_http_requests",
            "HTTP requests answered",
            ["method", "route", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "statestore_http_request_duration_seconds",
            "Time to answer an HTTP request",
            ["method", "route", "code"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.refusals = Counter(
            "statestore_http_requests_refused",
            "Store requests refused by a concurrency limit, by problem type"
            " (client-too-many-requests: one client's share; too-many-requests: the instance's)",
            ["type"],
            registry=self.registry,
        )
        for refusal in (CLIENT_TOO_MANY_REQUESTS, TOO_MANY_REQUESTS):
            self.refusals.labels(refusal.slug)  # shown as 0 before the first refusal
        self.invalid_values = Counter(
            "statestore_invalid_values",
            "Values answered as an error entry because their store's format forbids them"
            " (value-not-json, value-not-utf8)",
            ["store"],
            registry=self.registry,
        )
        for name in stores.names():
            self.invalid_values.labels(name)  # shown as 0 before the first
        self.registry.register(StoreCollector(stores))
        # Resident memory (process_resident_memory_bytes) is what the memory sizing is checked
        # against; the Kafka client's child process, when there is one, is not counted in it.
        ProcessCollector(registry=self.registry)
        self.registry.register(PLATFORM_COLLECTOR)
        self.registry.register(GC_COLLECTOR)
        Info(
            "statestore_build", "The running statestore and what it is built on", registry=self.registry
        ).info(build_labels())
        self._children: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        # Route templates by endpoint, for routes that do not record themselves in the scope.
        self.templates: dict[object, str] = {}

    def observe(self, method: str, route: str, code: str, seconds: float) -> None:
        """Count one answered request (``code``: its HTTP status) and its duration."""
        labels = (method, route, code)
        children = self._children.get(labels)
        if children is None:
            # Looking a labelled child up costs more than the observation; keep them.
            children = self._children[labels] = (
                self.requests.labels(*labels),
                self.latency.labels(*labels),
            )
        children[0].inc()
        children[1].observe(seconds)

    def refused(self, problem_type: str) -> None:
        """Count one request a concurrency limit refused with ``problem_type``."""
        self.refusals.labels(problem_type).inc()

    def invalid_value(self, store: str) -> None:
        """Count one value of ``store`` answered as ``value-not-json``."""
        self.invalid_values.labels(store).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Times every HTTP request and counts it by method, route template and status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_recording_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_recording_status)
        finally:
            route = scope.get("route")
            template = (
                getattr(route, "path", None)
                or self.metrics.templates.get(scope.get("endpoint"))
                or "unmatched"
            )
            self.metrics.observe(scope["method"], template, str(status), time.perf_counter() - started)

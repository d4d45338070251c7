"""Compressed Arrow bodies that decompress to far more than they weigh (the real service in a child
process): refused before anything is decompressed, and the process's memory stays where it was."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from service.local.broker import LocalBroker
from tests.faults.conftest import ServiceFactory, ServiceProcess
from tests.service.conftest import assert_problem

ARROW = {"content-type": "application/vnd.apache.arrow.stream"}
BOMB_BYTES = 512 * 1024 * 1024  # what each bomb decompresses to; each weighs about 17 KB
# Peak memory the bombs may add to the service: far below one bomb, far above normal requests.
MAX_GROWTH_BYTES = 128 * 1024 * 1024


def zstd_stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def zeros(data_type: pa.DataType) -> pa.Array:
    """One row of ``BOMB_BYTES`` zero bytes (never written in this process: the pages stay unmapped)."""
    data = pa.py_buffer(np.zeros(BOMB_BYTES, np.uint8))
    offsets = pa.py_buffer(np.array([0, BOMB_BYTES], np.int64))
    return pa.Array.from_buffers(data_type, 1, [None, offsets, data])


def peak_memory(service: ServiceProcess) -> int:
    """The service process's peak resident memory so far (VmHWM), in bytes."""
    status = open(f"/proc/{service.process.pid}/status", encoding="ascii").read()  # noqa: SIM115
    match = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.M)
    assert match, status
    return int(match.group(1)) * 1024


def test_compressed_arrow_bombs_are_refused_before_they_take_the_memory(
    broker: LocalBroker, make_topic: Callable[..., str], start_service: ServiceFactory
) -> None:
    products, positions = make_topic(partitions=1), make_topic(partitions=1)
    service = start_service(
        broker.bootstrap_servers,
        [
            {"name": "products", "topic": products, "value_format": "json"},
            {
                "name": "positions",
                "topic": positions,
                "value_format": "json",
                "indexes": [{"name": "by_ticker", "field": "ticker"}],
            },
        ],
    )
    service.wait_ready()
    keys_url = "/v1/stores/products/keys:batchGet"
    index_url = "/v1/stores/positions/indexes/by_ticker:batchGet"
    # A normal compressed body is served, and sets the baseline.
    normal = zstd_stream(pa.table({"key": pa.array([b"p1", b"p2"] * 500, pa.binary())}))
    assert service.client.post(keys_url, content=normal, headers=ARROW).status_code == 200
    before = peak_memory(service)

    extra_column = zstd_stream(pa.table({"key": pa.array([b"p1"]), "pad": zeros(pa.large_binary())}))
    assert len(extra_column) < 64 * 1024
    body = assert_problem(
        service.client.post(keys_url, content=extra_column, headers=ARROW), 400, "malformed-request"
    )
    assert "'pad'" in body["detail"]
    huge_keys = zstd_stream(pa.table({"key": zeros(pa.large_binary())}))
    body = assert_problem(
        service.client.post(keys_url, content=huge_keys, headers=ARROW), 413, "body-too-large"
    )
    assert body["limit"] == 16 * 1024 * 1024
    assert "once decompressed" in body["detail"]
    huge_values = zstd_stream(pa.table({"value": zeros(pa.large_string())}))
    assert_problem(service.client.post(index_url, content=huge_values, headers=ARROW), 413, "body-too-large")
    extra_value_column = zstd_stream(pa.table({"value": pa.array(["AAPL"]), "pad": zeros(pa.large_binary())}))
    assert_problem(
        service.client.post(index_url, content=extra_value_column, headers=ARROW), 400, "malformed-request"
    )

    grown = peak_memory(service) - before
    assert grown < MAX_GROWTH_BYTES, f"the bombs raised the service's peak memory by {grown >> 20} MiB"
    assert service.client.post(keys_url, content=normal, headers=ARROW).status_code == 200

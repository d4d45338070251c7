"""Where an Arrow batch body is decoded: the usual body (small, one record batch) on the event loop,
where it costs less than a hop to a worker thread and back; one of many record batches, or of
many bytes once decompressed, on a worker thread, so no request stalls the others."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import pyarrow as pa
import pytest

from service.read_requests import INLINE_BATCHES, INLINE_BYTES, _arrow_keys
from service.settings import Settings
from wire.problems import BATCH_TOO_LARGE, ProblemError

LIMITS = Settings().limits


def _stream(keys: list[bytes], compression: str | None = None, chunk: int | None = None) -> bytes:
    table = pa.table({"key": pa.array(keys, pa.binary())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as w:
        w.write_table(table, max_chunksize=chunk)
    return bytes(sink.getvalue().to_pybytes())


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The functions run on a worker thread, by name."""
    seen: list[str] = []
    run_sync = anyio.to_thread.run_sync

    async def counted(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        seen.append(func.__name__)
        return await run_sync(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    return seen


def _decoded(body: bytes) -> list[bytes]:
    keys, times = anyio.run(_arrow_keys, body, LIMITS)
    assert times is None
    decoded: list[bytes] = keys.to_pylist()
    return decoded


def test_a_small_body_of_one_record_batch_is_decoded_on_the_event_loop(hops: list[str]) -> None:
    keys = [b"p%07d" % i for i in range(1000)]
    assert _decoded(_stream(keys)) == keys
    assert _decoded(_stream(keys, chunk=len(keys) // INLINE_BATCHES)) == keys
    assert hops == []


def test_a_body_of_many_record_batches_is_checked_and_decoded_on_a_worker_thread(hops: list[str]) -> None:
    keys = [b"p%07d" % i for i in range(1000)]
    body = _stream(keys, chunk=len(keys) // INLINE_BATCHES - 1)
    assert _decoded(body) == keys
    assert hops == ["_checked_keys"]


def test_a_body_large_once_decompressed_is_decoded_on_a_worker_thread(hops: list[str]) -> None:
    keys = [bytes(1000) + i.to_bytes(4, "big") for i in range(2000)]
    body = _stream(keys, "zstd")
    assert len(body) < INLINE_BYTES < len(keys) * 1004
    assert _decoded(body) == keys
    assert hops == ["_decoded_keys"]


def test_a_small_body_over_the_limits_is_refused_without_a_worker_thread(hops: list[str]) -> None:
    with pytest.raises(ProblemError) as refused:
        _decoded(_stream([b"k"] * (LIMITS.max_batch_keys + 1)))
    assert refused.value.problem is BATCH_TOO_LARGE
    assert hops == []

"""Scans answered as Arrow pages: the stored keys and values of a key range, page by page.

The scan route answers ``Accept: application/vnd.apache.arrow.stream`` with a stream of two binary
columns, ``key`` (the stored bytes) and ``value`` (what an Arrow batch get answers for it), and the
cursor of the next page in the schema's ``next_after`` metadata. No value is decoded into Python
objects on either side: the cheap way to read a whole (small) store, as a lookup does when it
needs most of it (:mod:`clients.lookup`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from clients import wire
from clients.base import ReadAt, floor_of, pinned_at
from clients.exceptions import UnexpectedResponseError
from clients.flow import Emit, Flow
from clients.routing import ShardRouting
from clients.wire import ARROW_STREAM, Call, raise_value_errors
from wire.position import Position, PositionLike

NEXT_AFTER = b"next_after"


def arrow_scan_call(
    store: str,
    prefix: bytes,
    after: str | None,
    limit: int,
    min_position: PositionLike | None,
    as_of: PositionLike | None,
) -> Call:
    """One page of a scan answered as Arrow; ``after`` is the last page's cursor (base64 keys)."""
    call = wire.scan_call(store, prefix, after, limit, min_position, as_of)
    return dataclasses.replace(call, headers={"Accept": ARROW_STREAM})


def decode_arrow_page(body: bytes) -> tuple[pa.RecordBatch, str | None]:
    """A page's ``key`` and ``value`` columns (both binary), and the next page's cursor (``None``:
    this was the last page)."""
    try:
        table = pa.ipc.open_stream(body).read_all()
        keys = table.column("key").combine_chunks()
        values = table.column("value").combine_chunks()
    except (pa.ArrowException, KeyError, OSError) as exc:
        raise UnexpectedResponseError(f"the scan's Arrow answer is not the stream expected: {exc}") from exc
    if not (pa.types.is_binary(keys.type) and pa.types.is_binary(values.type)):
        raise UnexpectedResponseError(
            f"the scan's Arrow answer has columns key: {keys.type}, value: {values.type}; both must be binary"
        )
    if "error" in table.column_names:
        raise_value_errors(table)
    cursor = (table.schema.metadata or {}).get(NEXT_AFTER)
    page = pa.RecordBatch.from_arrays([keys, values], names=["key", "value"])
    return page, None if cursor is None else cursor.decode("ascii")


def arrow_pages_flow(
    client: ShardRouting, store: str, prefix: bytes, page_size: int, read: ReadAt
) -> Flow[None]:
    """Every page of the keys starting with ``prefix``, emitted as ``key``/``value`` record batches,
    each shard's pages in key order, one shard after another (a sharded store is not merged into
    one key order).

    Later pages of a shard demand at least the positions its earlier pages were read at, unless
    every page is read exactly ``as_of``; ``deadline=`` bounds each page.
    """

    def call(after: str | None, floor: Position | None, exact: PositionLike | None) -> Call:
        return arrow_scan_call(store, prefix, after, page_size, floor, exact)

    return shard_pages_flow(client, store, read, call, decode_arrow_page)


def shard_pages_flow(
    client: ShardRouting,
    store: str,
    read: ReadAt,
    call: Callable[[str | None, Position | None, PositionLike | None], Call],
    decode: Callable[[bytes], tuple[Any, str | None]],
) -> Flow[None]:
    """Every page a paged read answers, decoded and emitted, each shard's in order, one shard after
    another: ``call(after, min_position, as_of)`` asks a page after the cursor ``after``, ``decode``
    gives the page and the next cursor (``None``: the last page). Later pages of a shard demand at
    least the positions its earlier pages were read at, unless every page is read exactly
    ``as_of``; ``deadline=`` bounds each page."""
    min_position, as_of = pinned_at(read)
    seconds = read.get("deadline")
    sharding = yield from client._routing_flow(store, client._deadline(seconds))
    for shard in range(sharding.shards):
        send = client._sender(seconds, client._target(shard))
        exact = sharding.part(as_of, shard)
        floor = floor_of(sharding.part(min_position, shard))
        after: str | None = None
        while True:
            response = yield from send(call(after, floor, exact))
            page, after = decode(response.content)
            yield Emit([page])
            if after is None:
                break
            # Never back in time, as every listing (clients.paging), unless every page is exact.
            seen = wire.position_of(response)
            if exact is None and seen is not None:
                floor = seen if floor is None else floor.merged(seen)

"""A store's history read whole, as Arrow pages (``GET /v1/stores/{store}/history``).

Each page holds whole keys' rows: ``key`` (binary), ``time`` (``timestamp[ms]``, null: every
time), ``value`` (what an Arrow batch get answers, null: absent) and ``unsettled`` (a time this
row answers is refused as history-expired); a key's rows run newest first, so as of time ``T``
its value is its first row whose time is at or below ``T``. The schema metadata carry the store's
``time_floor`` and the next page's cursor. What a point-in-time lookup reads when it needs most of
a store's keys (:mod:`clients.history`).
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from clients import wire
from clients.arrow_scan import shard_pages_flow
from clients.base import ReadAt
from clients.exceptions import UnexpectedResponseError
from clients.flow import Flow
from clients.routing import ShardRouting
from clients.wire import ARROW_STREAM, Call
from wire.position import Position, PositionLike

NEXT_AFTER = b"next_after"
TIME_FLOOR = b"time_floor"
COLUMNS = ("key", "time", "value", "unsettled")


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryPage:
    """One page: its rows (:data:`COLUMNS`) and the store's time floor (``None``: not said)."""

    rows: pa.RecordBatch
    time_floor: int | None


def history_call(
    store: str,
    after: str | None,
    limit: int,
    as_of_time: int,
    min_position: PositionLike | None,
    as_of: PositionLike | None,
) -> Call:
    """One page of a store's history; ``after`` is the last page's cursor (base64 keys)."""
    params = wire.read_params(min_position, as_of=as_of)
    params.update(limit=str(limit), as_of_time=str(as_of_time), key_encoding="base64")
    if after is not None:
        params["after"] = after
    return Call("GET", f"{wire.store_path(store)}/history", params, headers={"Accept": ARROW_STREAM})


def decode_history_page(body: bytes) -> tuple[HistoryPage, str | None]:
    """A page, and the next page's cursor (``None``: this was the last page)."""
    try:
        table = pa.ipc.open_stream(body).read_all()
        columns = [table.column(name).combine_chunks() for name in COLUMNS]
        floor = (table.schema.metadata or {}).get(TIME_FLOOR)
        time_floor = None if floor is None else int(floor)
    except (pa.ArrowException, KeyError, OSError, ValueError) as exc:
        raise UnexpectedResponseError(
            f"the history's Arrow answer is not the stream expected: {exc}"
        ) from exc
    keys, times, values, unsettled = columns
    if not (
        pa.types.is_binary(keys.type)
        and pa.types.is_timestamp(times.type)
        and pa.types.is_binary(values.type)
        and pa.types.is_boolean(unsettled.type)
    ):
        raise UnexpectedResponseError(
            f"the history's Arrow answer has columns {[str(c.type) for c in columns]}; expected binary key,"
            " timestamp time, binary value, boolean unsettled"
        )
    cursor = (table.schema.metadata or {}).get(NEXT_AFTER)
    rows = pa.RecordBatch.from_arrays(columns, names=list(COLUMNS))
    return HistoryPage(rows, time_floor), None if cursor is None else cursor.decode("ascii")


def history_pages_flow(
    client: ShardRouting, store: str, page_size: int, as_of_time: int, read: ReadAt
) -> Flow[None]:
    """Every page of the store's history (:class:`HistoryPage`), each shard's in key order, one shard
    after another, positions as :func:`clients.arrow_scan.arrow_pages_flow` reads them."""

    def call(after: str | None, floor: Position | None, exact: PositionLike | None) -> Call:
        return history_call(store, after, page_size, as_of_time, floor, exact)

    return shard_pages_flow(client, store, read, call, decode_history_page)

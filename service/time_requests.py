"""Per-key times of a batch get (``as_of_times`` in JSON, an ``as_of_time`` column in Arrow)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from service.bodies import malformed
from service.queries import ReadOptions, invalid_parameter
from service.times import TimeSyntaxError, parse_json_time


def _is_time_type(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_timestamp(data_type) or pa.types.is_int64(data_type))


TIME_COLUMN: tuple[str, Callable[[pa.DataType], bool]] = ("as_of_time", _is_time_type)
"""The optional second column of an Arrow batch: timestamp (any unit, read as ms) or int64 epoch ms."""


def arrow_times(column: pa.Array) -> list[int]:
    """Epoch milliseconds of an ``as_of_time`` column (sub-millisecond parts cut)."""
    if column.null_count:
        raise malformed("the 'as_of_time' column holds nulls; every key needs its time")
    if pa.types.is_timestamp(column.type):
        if column.type.unit != "ms":
            if column.type.unit in ("us", "ns"):
                column = pc.floor_temporal(column, unit="millisecond")
            column = column.cast(pa.timestamp("ms", tz=column.type.tz))
        column = column.view(pa.int64())  # epoch ms already: the same buffer, read as integers
    times: list[int] = column.to_numpy().tolist()
    return times


_EPOCH_LOW, _EPOCH_HIGH = -(10**18), 10**18  # the range ``parse_json_time`` accepts, exclusive


def json_times(document: dict[str, Any], keys: int) -> list[int] | None:
    """The ``as_of_times`` of a JSON batch body (one per key), if it has them."""
    raw = document.get("as_of_times")
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) != keys:
        raise malformed(
            f'"as_of_times" must be a list with one time per key ({keys}), parallel to "keys"',
            [{"loc": ["body", "as_of_times"], "msg": "list as long as keys"}],
        )
    # One pass in C: a generator would cost a Python call per time.
    epoch_ms = set(map(type, raw)) == {int}
    if not raw or (epoch_ms and _EPOCH_LOW < min(raw) <= max(raw) < _EPOCH_HIGH):
        return raw  # the usual body, epoch ms: checked at once, not one value at a time
    try:
        return [parse_json_time(value) for value in raw]
    except TimeSyntaxError as exc:
        raise malformed(
            f"a time in as_of_times {exc}", [{"loc": ["body", "as_of_times"], "msg": str(exc)}]
        ) from exc


def per_key_times(options: ReadOptions, times: list[int]) -> ReadOptions:
    """``options`` for a batch read with one time per key (the view is taken at the earliest)."""
    if options.as_of_time is not None:
        raise invalid_parameter(
            "as_of_time", "give the times once: as_of_time for the whole batch, or one per key in the body"
        )
    return dataclasses.replace(options, as_of_time=min(times)) if times else options

"""Times a read is asked as of (``as_of_time=``, ``as_of_times=``): epoch ms, datetimes, RFC 3339."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

TimeLike = int | datetime.datetime | str
"""A time: epoch milliseconds, a timezone-aware ``datetime``, or RFC 3339 text."""


def time_ms(time: TimeLike) -> int:
    """Epoch milliseconds of ``time`` (``ValueError`` for a naive ``datetime`` or unreadable text)."""
    if isinstance(time, bool):
        raise ValueError("a time is epoch milliseconds, a datetime or RFC 3339 text, not a boolean")
    if isinstance(time, int):
        return time
    if isinstance(time, str):
        if time.lstrip("-").isdigit():
            return int(time)
        time = datetime.datetime.fromisoformat(time.replace("Z", "+00:00").replace("z", "+00:00"))
    if time.tzinfo is None:
        raise ValueError(f"give the datetime {time.isoformat()} a timezone: a naive time is ambiguous")
    delta = time - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return delta // datetime.timedelta(milliseconds=1)


def times_ms(times: Sequence[TimeLike]) -> list[int]:
    """Epoch milliseconds of each of ``times`` (see :func:`time_ms`)."""
    if set(map(type, times)) <= {int}:  # the usual list, epoch ms: nothing to convert (checked in C)
        return list(times)  # type: ignore[arg-type]  # every one an int, checked above
    return [time_ms(t) for t in times]

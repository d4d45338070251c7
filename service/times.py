"""Times a read is asked as of (``as_of_time``): epoch milliseconds or RFC 3339, to epoch ms."""

from __future__ import annotations

import datetime
import re

# Only ASCII digits (an optional minus): int() would also take "1_000" and digits of other scripts.
_EPOCH_MS = re.compile(r"-?[0-9]{1,18}")
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


class TimeSyntaxError(ValueError):
    """Not a time this service reads (the message says what is)."""


def parse_time(text: str) -> int:
    """Epoch milliseconds of ``text``: epoch ms in ASCII digits, or an RFC 3339 date-time with its
    offset (``2026-11-20T10:00:00Z``); sub-millisecond digits are cut, never rounded up."""
    if _EPOCH_MS.fullmatch(text):
        return int(text)
    if not _RFC3339.fullmatch(text):
        raise TimeSyntaxError(
            f"must be epoch milliseconds or an RFC 3339 date-time with an offset"
            f" (2026-11-20T10:00:00Z), got {text[:40]!r}"
        )
    fraction = ""
    if "." in text:
        head, rest = text.split(".", 1)
        digits = re.match(r"[0-9]+", rest)
        assert digits is not None
        fraction, text = digits.group(0), head + rest[digits.end() :]
    try:
        moment = datetime.datetime.fromisoformat(text.replace("z", "Z").replace("t", "T"))
    except ValueError as exc:
        raise TimeSyntaxError(f"is not a valid date-time: {exc}") from exc
    seconds = int(moment.timestamp())
    return seconds * 1000 + int((fraction + "000")[:3])


def parse_json_time(value: object) -> int:
    """A time from a JSON document: an integer (epoch ms) or a string ``parse_time`` reads."""
    if isinstance(value, bool):
        raise TimeSyntaxError("must be epoch milliseconds or an RFC 3339 string, not a boolean")
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON Schema's integer (the OpenAPI document's) includes 5.0
    if isinstance(value, int):
        if abs(value) >= 10**18:
            raise TimeSyntaxError(f"is out of range: {value}")
        return value
    if isinstance(value, str):
        return parse_time(value)
    raise TimeSyntaxError(f"must be epoch milliseconds or an RFC 3339 string, got {type(value).__name__}")

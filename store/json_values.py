"""JSON values checked once, at ingest: what a ``json`` store keeps for a value that is no JSON document.

A ``json`` store's values are spliced into JSON answers as stored, so each must be one JSON
document. Each value is parsed once, when the store writes it (the apply loop and the bulk
restore's workers); one that is not JSON is kept as :data:`NOT_JSON_PREFIX` followed by the
producer's bytes. A JSON document never holds a NUL byte (RFC 8259: control characters in strings
are escaped, and NUL is no whitespace), so a read finds every such value, and every value a
format could not decode (``store.formats``: those start with a NUL byte too), with one search for
``b"\\x00"`` over the bytes it answers, and parses nothing.

A store records that its values were checked (``TableEngine.values_checked``): one written before
(or as another value format) is rebuilt from the topic before it serves as a ``json`` store.
A leaf: it imports nothing of ours.
"""

from __future__ import annotations

from typing import Protocol

import orjson

NOT_JSON_PREFIX = b"\x00statestore:not-json\x00"
"""Starts a stored value of a ``json`` store that is no JSON document; the producer's bytes follow."""

JSON_CHECKED = b"json"
"""What a store records once every value it holds was checked as JSON when written."""


def checked_json(values: list[bytes | None]) -> list[bytes | None]:
    """``values`` as a ``json`` store keeps them: each that is no JSON document marked (``None``, a
    tombstone, kept). The same list when all are JSON (the usual poll): nothing is copied."""
    loads, marked = orjson.loads, None
    for index, value in enumerate(values):
        if value is None:
            continue
        try:
            loads(value)
        except orjson.JSONDecodeError:
            if marked is None:
                marked = list(values)
            marked[index] = NOT_JSON_PREFIX + value
    return values if marked is None else marked


def is_marked(value: bytes) -> bool:
    """Whether a stored value is no JSON document (marked at ingest, or undecodable)."""
    return value[:1] == b"\x00"


def as_produced(value: bytes) -> bytes:
    """The producer's bytes of a stored value (a value marked as not JSON loses its mark)."""
    return value[len(NOT_JSON_PREFIX) :] if value.startswith(NOT_JSON_PREFIX) else value


class CheckRecord(Protocol):
    """Where a store records how its values were checked (``store.table.engine.TableEngine``)."""

    def values_checked(self) -> bytes | None: ...

    def set_values_checked(self, check: bytes | None) -> None: ...


def unchecked_reason(record: CheckRecord, holds_data: bool, checks_json: bool) -> str | None:
    """Why a store about to be written must first be rebuilt from the topic, or ``None``; records
    how its values are checked from now on.

    A ``json`` store holding values that were not checked when written (by an older statestore, or
    served as another value format) would splice them into answers unchecked: it is rebuilt. A store
    no longer checked forgets that it was, so that it is rebuilt if it is checked again later."""
    recorded = record.values_checked()
    wanted = JSON_CHECKED if checks_json else None
    if recorded == wanted:
        return None
    if checks_json and holds_data:
        return "its values were written before they were checked as JSON at ingest"
    record.set_values_checked(wanted)
    return None

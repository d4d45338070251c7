"""How history's entries are keyed and encoded: versions of rows and the change log.

Column families (``store.table.families``); what history keeps and when is ``store.table.history``.

``history``
    one entry per version: ``escaped(key) | ~timestamp (8 B) | ~(offset + 1) (8 B) | partition (4 B)``
    → ``1 | timestamp (8 B) | value`` or ``0 | timestamp`` for a tombstone; a record of a store
    whose keys go through the Schema Registry also names its key schema id (``store.table.winners``):
    ``3 | timestamp | schema id (4 B) | value`` or ``2 | timestamp | schema id`` (``~`` inverts, so a
    key's versions run newest time first, ties newest offset first). The first write of a key after
    history started also records its previous value as a *base* version, whose time is unknown: its
    time and offset fields are all ones (it sorts last). ``escaped`` doubles 0x00 bytes and ends
    with 0x00 0x01, so versions of one key are contiguous and keys keep their byte order (prefix
    scans work on escaped keys). A read as of time ``T`` seeks to ``escaped(key) | ~T``
    (:func:`time_seek_keys`) and lands on the version with the greatest ``(timestamp, offset)`` at
    or below ``T`` (``store.table.timed_reader``). The layout is recorded under ``history_layout``
    in ``meta``; a copy written in an older one is rewritten when opened (``store.table.history_layout``).
``changes``
    ``partition (4 B) | offset (8 B)`` → key, one entry per record since history started: it drives
    pruning (a version superseded below the floor is dropped) and ``as_of`` index lookups (rows
    changed since a position).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

PARTITION = struct.Struct(">i")
OFFSET = struct.Struct(">q")
TIMESTAMP = struct.Struct(">q")
_INVERTED = struct.Struct(">Q")  # ``~timestamp`` and ``~(offset + 1)`` of a version key
_TIME_TOP = 2**63 - 1  # ``~t`` is ``_TIME_TOP - t``: from 0 for the greatest time up
_OFFSET_TOP = 2**64 - 1
_VERSION_SUFFIX = 2 * _INVERTED.size + PARTITION.size
BASE_TIME = -(2**63)  # the time field of a base version: below every record's
_TERMINATOR = b"\x00\x01"
PUT, TOMBSTONE = b"\x01", b"\x00"
KEYED_PUT, KEYED_TOMBSTONE = b"\x03", b"\x02"  # a record under a key schema id: the id follows the time
SCHEMA_ID = struct.Struct(">i")


def escape(key: bytes) -> bytes:
    """Order-preserving, self-delimiting encoding of a row key."""
    return key.replace(b"\x00", b"\x00\xff") + _TERMINATOR


def escape_prefix(prefix: bytes) -> bytes:
    """The escaped-key prefix shared by every key starting with ``prefix``."""
    return prefix.replace(b"\x00", b"\x00\xff")


def unescape(history_key: bytes) -> bytes:
    """The row key of a ``history`` entry."""
    # Escaped content never holds 0x00 followed by 0x01, so the first such pair ends the key.
    return history_key[: history_key.index(_TERMINATOR)].replace(b"\x00\xff", b"\x00")


def version_key(key: bytes, partition: int, offset: int, timestamp: int) -> bytes:
    """``offset`` is the record's offset, or -1 for the base version (whose ``timestamp`` is
    :data:`BASE_TIME`)."""
    return (
        escape(key)
        + _INVERTED.pack(_TIME_TOP - timestamp)
        + _INVERTED.pack(_OFFSET_TOP - (offset + 1))
        + PARTITION.pack(partition)
    )


def base_key(key: bytes, partition: int) -> bytes:
    """The history key of ``key``'s base version on ``partition``."""
    return version_key(key, partition, -1, BASE_TIME)


def time_seek_keys(keys: Sequence[bytes], times: Sequence[int]) -> list[bytes]:
    """For each key and its time ``at``: ``escaped(key) | ~at``, where a seek lands on its version
    with the greatest ``(timestamp, offset)`` at or below ``at`` (or on its base version, or past
    its versions). The escaped key is all but the last 8 bytes."""
    pack, top, terminator = _INVERTED.pack, _TIME_TOP, _TERMINATOR
    # ``escape`` spelled inline: this runs once for every key of every read as of a time.
    return [
        key.replace(b"\x00", b"\x00\xff") + terminator + pack(top - at)
        for key, at in zip(keys, times, strict=True)
    ]


def parse_version_key(history_key: bytes) -> tuple[int, int]:
    """``(partition, offset)`` of a version; offset -1 for a base version."""
    suffix = history_key[-_VERSION_SUFFIX:]
    offset = _OFFSET_TOP - _INVERTED.unpack(suffix[_INVERTED.size : 2 * _INVERTED.size])[0] - 1
    return PARTITION.unpack(suffix[2 * _INVERTED.size :])[0], offset


def version_value(value: bytes | None, timestamp: int, schema_id: int | None = None) -> bytes:
    """A stored version; ``schema_id``: the key schema id the record was written under, if any."""
    if schema_id is not None:
        if value is None:
            return KEYED_TOMBSTONE + TIMESTAMP.pack(timestamp) + SCHEMA_ID.pack(schema_id)
        return KEYED_PUT + TIMESTAMP.pack(timestamp) + SCHEMA_ID.pack(schema_id) + value
    if value is None:
        return TOMBSTONE + TIMESTAMP.pack(timestamp)
    return PUT + TIMESTAMP.pack(timestamp) + value


def answer_of(stored: bytes) -> bytes | None:
    """The value of a stored version, ``None`` for a tombstone."""
    kind = stored[:1]
    if kind == PUT:
        return stored[9:]
    return stored[13:] if kind == KEYED_PUT else None


def parse_version_value(stored: bytes) -> tuple[bytes | None, int]:
    timestamp = TIMESTAMP.unpack(stored[1:9])[0]
    return answer_of(stored), timestamp


def schema_id_of(stored: bytes) -> int | None:
    """The key schema id of a stored version (``None``: a record not under one)."""
    if stored[:1] in (PUT, TOMBSTONE):
        return None
    return int(SCHEMA_ID.unpack(stored[9:13])[0])


def parse_version(history_key: bytes, stored: bytes) -> tuple[int, int, int, bytes | None]:
    """``(partition, offset, timestamp, value)`` of one stored version (offset -1: the base)."""
    partition, offset = parse_version_key(history_key)
    value, timestamp = parse_version_value(stored)
    return partition, offset, timestamp, value


def change_key(partition: int, offset: int) -> bytes:
    return PARTITION.pack(partition) + OFFSET.pack(offset)


def parse_change_key(key: bytes) -> tuple[int, int]:
    return PARTITION.unpack(key[: PARTITION.size])[0], OFFSET.unpack(key[PARTITION.size :])[0]

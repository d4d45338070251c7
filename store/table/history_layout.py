"""The ``history`` family's version key layout, recorded in ``meta``, and the rewrite of older ones.

Layout 1 (no ``history_layout`` key) ordered a key's versions by partition and offset:
``escaped(key) | partition (4 B) | offset + 1 (8 B)``, the base version's offset field 0. Layout 2
(``store.table.history_keys``) orders them newest time first, so that one seek lands on the answer of
a read as of a time. Both keep the same stored value (``1 | timestamp | value`` or ``0 |
timestamp``), so a layout 1 version becomes a layout 2 one from its key and value alone.

The rewrite runs when a copy is opened, before it serves or writes, a bounded batch at a time,
each batch atomic (its new keys put and its old ones deleted together). A copy stopped part way
holds versions of both layouts; they differ in the length behind the escaped key (12 bytes or 20),
so the next open rewrites only the old ones and records the layout once none is left.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

from store.table import families
from store.table.corruption import entries, family_get
from store.table.history_keys import BASE_TIME, parse_version_value, unescape, version_key

if TYPE_CHECKING:
    from store.table.engine import Engine

logger = logging.getLogger(__name__)

LAYOUT = b"2"
_LAYOUT_KEY = b"history_layout"  # in the meta family
_TERMINATOR = b"\x00\x01"  # ends an escaped key (``store.table.history_keys.escape``)
_OLD_SUFFIX = struct.Struct(">iq")  # layout 1: partition, offset + 1
_BATCH = 10_000


def upgrade(engine: Engine, store: str) -> int:
    """Rewrite the versions of an older layout in this one, then record it; how many were."""
    meta = engine.family(families.META)
    if family_get(meta, _LAYOUT_KEY) == LAYOUT:
        return 0
    history = engine.handle(families.HISTORY)
    rewritten = 0
    batch = engine.new_batch()
    # A snapshot's iterator: the rewritten versions put meanwhile are not met again.
    for history_key, stored in entries(engine.history_snapshot().iter(), b""):
        new_key = _rewritten(history_key, stored)
        if new_key is None:
            continue
        batch.put(new_key, stored, history)
        batch.delete(history_key, history)
        rewritten += 1
        if rewritten % _BATCH == 0:
            engine.write(batch)
            batch = engine.new_batch()
    batch.put(_LAYOUT_KEY, LAYOUT, engine.handle(families.META))
    engine.write(batch)
    if rewritten:
        logger.info(
            'store "%s": rewrote %d versions of its history in the layout that reads as of a time'
            " in one seek",
            store,
            rewritten,
        )
    return rewritten


def _rewritten(history_key: bytes, stored: bytes) -> bytes | None:
    """The layout 2 key of a layout 1 version (``None``: the key is of layout 2 already)."""
    # Escaped content never holds 0x00 0x01: the first one ends the key.
    end = history_key.index(_TERMINATOR) + len(_TERMINATOR)
    if len(history_key) - end != _OLD_SUFFIX.size:
        return None
    partition, offset_field = _OLD_SUFFIX.unpack(history_key[end:])
    key = unescape(history_key)
    if offset_field == 0:
        return version_key(key, partition, -1, BASE_TIME)
    _value, timestamp = parse_version_value(stored)
    return version_key(key, partition, offset_field - 1, timestamp)

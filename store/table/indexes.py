"""Secondary indexes on fields of JSON values, answered by prefix scans (KIP-213's combined key).

An index entry lives in the ``index`` column family (``store.table.families``) under the combined key::

    len(index name) (1 byte) | index name | len(indexed value) (4 bytes, big-endian) | indexed value | row key

so all rows with one indexed value are one contiguous, byte-ordered range, and an exact value never
matches a longer value that merely starts with it. Entries are written in the same atomic batch as
the row they describe: an update that changes the field removes the old entry, a tombstone removes
it, a row without the field (or whose value is not JSON) has none.

Each index's state (the field it was built on, ``building`` or ``ready``) is kept in the ``meta``
column family under ``index/`` + its name (:func:`state_entry`, :func:`parse_states`).

Indexed values are compared as bytes: a JSON string indexes as its UTF-8 text, a number or boolean
as its JSON text (``42``, ``4.5``, ``true``); null, objects and arrays are not indexed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
from collections.abc import Iterable
from typing import Any

try:  # orjson parses several times faster; the stdlib parser is the fallback
    import orjson

    _loads: Any = orjson.loads
except ImportError:  # pragma: no cover - orjson ships with the server extra
    _loads = json.loads

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_LENGTH = struct.Struct(">I")
STATE_PREFIX = b"index/"  # in the meta family: index name -> "field\nstate"


@dataclasses.dataclass(frozen=True, slots=True)
class IndexSpec:
    """An index named ``name`` on the dotted ``field`` path of a store's JSON values."""

    name: str
    field: str

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"index name {self.name!r} must be 1-100 letters, digits, '_', '.' or '-'")
        if not self.field or any(not part for part in self.field.split(".")):
            raise ValueError(f'index "{self.name}": field {self.field!r} must be a dotted path like "ticker"')

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(self.field.split("."))

    @property
    def prefix(self) -> bytes:
        """The key prefix shared by every entry of this index."""
        encoded = self.name.encode()
        return bytes([len(encoded)]) + encoded

    def value_prefix(self, indexed_value: bytes) -> bytes:
        """The key prefix of every entry for one indexed value."""
        return self.prefix + _LENGTH.pack(len(indexed_value)) + indexed_value

    def entry_key(self, indexed_value: bytes, row_key: bytes) -> bytes:
        return self.value_prefix(indexed_value) + row_key

    def row_key(self, entry_key: bytes, indexed_value: bytes) -> bytes:
        return entry_key[len(self.prefix) + _LENGTH.size + len(indexed_value) :]

    def extract(self, value: bytes | None) -> bytes | None:
        """The indexed value of a row's value, or ``None`` when the row has no entry."""
        if value is None:
            return None
        try:
            document = _loads(value)
        except ValueError:
            return None
        for part in self.path:
            if not isinstance(document, dict):
                return None
            document = document.get(part)
        return encode_indexed_value(document)


def encode_indexed_value(value: object) -> bytes | None:
    """The bytes an index compares for one JSON value (``None``: not indexable)."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, int | float):
        return json.dumps(value).encode()
    return None


def index_changes(
    specs: Iterable[IndexSpec], key: bytes, old_value: bytes | None, new_value: bytes | None
) -> tuple[list[bytes], list[bytes]]:
    """Index entry keys to delete and to put when ``key`` goes from ``old_value`` to ``new_value``."""
    deletes: list[bytes] = []
    puts: list[bytes] = []
    for spec in specs:
        old = spec.extract(old_value)
        new = spec.extract(new_value)
        if old == new:
            continue
        if old is not None:
            deletes.append(spec.entry_key(old, key))
        if new is not None:
            puts.append(spec.entry_key(new, key))
    return deletes, puts


def state_entry(name: str, field: str, state: str | None) -> tuple[bytes, bytes | None]:
    """The meta key and value of an index's state (value ``None``: the index no longer exists)."""
    return STATE_PREFIX + name.encode(), None if state is None else f"{field}\n{state}".encode()


def parse_states(entries: Iterable[tuple[bytes, bytes]]) -> dict[str, tuple[str, str]]:
    """Per index name, the field it was built on and its state, from the meta entries under
    ``STATE_PREFIX``."""
    states: dict[str, tuple[str, str]] = {}
    for key, value in entries:
        field, _, state = value.decode().partition("\n")
        states[key[len(STATE_PREFIX) :].decode()] = (field, state)
    return states

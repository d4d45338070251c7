"""Stored values in JSON answers, and what a JSON store answers for a value that is not JSON.

A ``json`` store's values are spliced into answers as they are stored (no re-encoding), so each
is first checked to be one JSON document: a topic can hold a bad record, and one bad value must
not turn every answer that includes it into invalid JSON. A value that is not JSON is answered
as an error entry of problem type ``value-not-json`` (docs/http-api.md): ``null`` in a batch's
``values`` with an ``errors`` entry naming its index and key; an item without ``value`` but with
an ``error`` in scans and index pages, listed in their ``errors`` too; ``502`` for a single get.
Each is counted (``statestore_invalid_values{store}``) and logged once per store.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from service.codec import KeyEncoding, encode_key
from wire.problems import VALUE_NOT_JSON

logger = logging.getLogger(__name__)


def not_json_detail(store: str) -> str:
    return (
        f'store "{store}" holds a value for this key that is not a JSON document: its topic has a bad'
        " record; the producer must write valid JSON (the next record for the key replaces it)"
    )


# Values found to be JSON, remembered by identity (see ``BadValues``): at most this many, holding
# at most this many bytes, none larger than the last.
_CHECKED_ENTRIES = 65_536
_CHECKED_BYTES = 64 * 1024 * 1024
_CHECKED_VALUE_BYTES = 64 * 1024


class BadValues:
    """Finds the values of JSON stores that are not JSON: each counted by ``on_bad(store)``, the first
    of each store logged.

    A hot key's value comes from the store's read cache as the same ``bytes`` object at every read,
    so values found to be JSON are remembered by identity and not parsed again: parsing costs
    ~1.3 µs a value, a quarter of a JSON batch answer. The memo holds each value it remembers, so
    its ``id`` cannot be reused by another object meanwhile; it is bounded in entries and bytes
    and emptied when full.
    """

    def __init__(self, on_bad: Callable[[str], None] | None = None) -> None:
        self._on_bad = on_bad
        self._logged: set[str] = set()
        self._lock = threading.Lock()
        self._checked: dict[int, bytes] = {}
        self._checked_bytes = 0

    def is_json(self, store: str, key: bytes, value: bytes) -> bool:
        """Whether ``value`` is one JSON document; reports it when not."""
        return not self.not_json(store, (key,), (value,))

    def not_json(self, store: str, keys: Sequence[bytes], values: Sequence[bytes | None]) -> list[int]:
        """The indexes of ``values`` (of ``keys``) that are not one JSON document, each reported
        (``None`` is absent, not bad)."""
        checked, loads, bad = self._checked, orjson.loads, []
        for index, value in enumerate(values):
            if value is None or checked.get(id(value)) is value:
                continue
            try:
                loads(value)
            except orjson.JSONDecodeError:
                self._report(store, keys[index])
                bad.append(index)
                continue
            self._remember(value)
        return bad

    def _remember(self, value: bytes) -> None:
        if len(value) > _CHECKED_VALUE_BYTES:
            return
        checked = self._checked
        if len(checked) >= _CHECKED_ENTRIES or self._checked_bytes + len(value) > _CHECKED_BYTES:
            checked.clear()
            self._checked_bytes = 0
        checked[id(value)] = value
        self._checked_bytes += len(value)

    def _report(self, store: str, key: bytes) -> None:
        if self._on_bad is not None:
            self._on_bad(store)
        with self._lock:
            first = store not in self._logged
            self._logged.add(store)
        if first:
            logger.error(
                'store "%s" holds a value that is not JSON (key %s, base64); reads answer it as an error'
                " (value-not-json) until the topic has a valid record for the key; statestore_invalid_values"
                " counts them, this is logged once per store",
                store,
                base64.b64encode(key[:48]).decode("ascii"),
            )


class JsonAnswer:
    """The values of one JSON answer of one store, and the error entries of those it cannot carry."""

    def __init__(self, store: str, value_format: str, encoding: KeyEncoding, bad: BadValues) -> None:
        self._store = store
        self._format = value_format
        self.encoding = encoding
        self._bad = bad
        self.errors: list[dict[str, Any]] = []

    def _error(self, key: bytes, **where: Any) -> dict[str, Any]:
        error = {
            **where,
            "key": encode_key(key, self.encoding),
            "type": VALUE_NOT_JSON.uri,
            "title": VALUE_NOT_JSON.title,
            "status": VALUE_NOT_JSON.status,
            "detail": not_json_detail(self._store),
        }
        self.errors.append(error)
        return error

    def items(self, items: Sequence[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
        """Scan or index page items: ``{"key", "value"}``, or ``{"key", "error"}`` for a bad value."""
        answered: list[dict[str, Any]] = []
        for key, value in items:
            if self._format == "json" and not self._bad.is_json(self._store, key, value):
                error = self._error(key)
                answered.append(
                    {
                        "key": error["key"],
                        "error": {k: error[k] for k in ("type", "title", "status", "detail")},
                    }
                )
            else:
                answered.append(
                    {"key": encode_key(key, self.encoding), "value": json_value(value, self._format)}
                )
        return answered

    def values(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> list[Any]:
        """Batch values in request order: ``None`` for absent keys and (with an error entry) bad values."""
        if self._format != "json":
            return [json_value(value, self._format) for value in values]
        fragment = orjson.Fragment
        answered: list[Any] = [None if value is None else fragment(value) for value in values]
        for index in self._bad.not_json(self._store, keys, values):
            self._error(keys[index], index=index)
            answered[index] = None
        return answered

    def document(self, body: dict[str, Any]) -> bytes:
        """``body`` as JSON, with the ``errors`` met while building it."""
        if self.errors:
            body["errors"] = self.errors
        return orjson.dumps(body)


def json_value(value: bytes | None, value_format: str) -> Any:
    """A stored value as a member of a JSON answer, JSON documents spliced in as stored."""
    if value is None:
        return None
    if value_format == "json":
        return orjson.Fragment(value)
    if value_format == "string":
        return value.decode("utf-8", errors="replace")
    return base64.b64encode(value).decode("ascii")

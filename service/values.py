"""Stored values in JSON answers, and what a store answers for a value its format forbids.

A ``json`` store's values are spliced into answers as they are stored (no re-encoding, no parse):
each was checked to be one JSON document when the store wrote it (``store.json_values``), and one
that is not was marked then, so one bad record cannot turn every answer that includes it into
invalid JSON. Marked values start with a NUL byte, which no JSON document holds: an answer finds
them with one search over its bytes. A value that is not JSON is answered
as an error entry of problem type ``value-not-json`` (docs/reference/http-api.md): ``null`` in a batch's
``values`` with an ``errors`` entry naming its index and key; an item without ``value`` but with
an ``error`` in scans and index pages, listed in their ``errors`` too; ``502`` for a single get.
A ``string`` store's value that is not UTF-8 is answered the same way as problem type
``value-not-utf8``: never as text with replacement characters, which would be a wrong answer.
Each is counted (``statestore_invalid_values{store}``) and logged once per store and type.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from service.codec import KeyEncoding, encode_key
from store.formats import undecodable_reason
from store.json_values import is_marked
from wire.problems import (
    UNKNOWN_SCHEMA,
    VALUE_NOT_JSON,
    VALUE_NOT_UTF8,
    VALUE_UNDECODABLE,
    ProblemType,
)

logger = logging.getLogger(__name__)


def not_json_detail(store: str) -> str:
    return (
        f'store "{store}" holds a value for this key that is not a JSON document: its topic has a bad'
        " record; the producer must write valid JSON (the next record for the key replaces it)"
    )


def bad_value_problem(store: str, value: bytes) -> tuple[ProblemType, str]:
    """The problem type and detail of a stored value that is no JSON document: one that could not
    be decoded at ingest (``store.formats``) names why; any other is ``value-not-json``."""
    reason = undecodable_reason(value)
    if reason is None:
        return VALUE_NOT_JSON, not_json_detail(store)
    slug, _, why = reason.partition(":")
    problem = UNKNOWN_SCHEMA if slug == "unknown-schema" else VALUE_UNDECODABLE
    return problem, (
        f'store "{store}" holds a record for this key that could not be decoded at ingest: {why};'
        " the producer must write a record the registry's schema decodes (the next record for the key"
        " replaces it)"
    )


def not_utf8_detail(store: str) -> str:
    return (
        f'store "{store}" holds a value for this key that is not UTF-8 text: its topic has a bad'
        " record; the producer must write UTF-8 text (the next record for the key replaces it),"
        " or serve the topic with value_format: bytes"
    )


class BadValues:
    """Finds the values of JSON stores that are not JSON (marked at ingest, ``store.json_values``;
    no value is parsed here): each counted by ``on_bad(store)``, the first of each store logged."""

    def __init__(self, on_bad: Callable[[str], None] | None = None) -> None:
        self._on_bad = on_bad
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def is_json(self, store: str, key: bytes, value: bytes) -> bool:
        """Whether ``value`` is one JSON document; reports it when not."""
        if not is_marked(value):
            return True
        self._report(store, key)
        return False

    def not_json(
        self,
        store: str,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        absent: list[int] | None = None,
    ) -> list[int]:
        """The indexes of ``values`` (of ``keys``) that are not one JSON document, each reported
        (``None`` is absent, not bad: its index is added to ``absent``, on the same pass)."""
        bad = []
        for index, value in enumerate(values):
            if value is None:
                if absent is not None:
                    absent.append(index)
            elif is_marked(value):
                self._report(store, keys[index])
                bad.append(index)
        return bad

    def not_utf8(
        self,
        store: str,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        absent: list[int] | None = None,
    ) -> list[int]:
        """The indexes of ``values`` (of ``keys``) that are not UTF-8 text, each reported (the
        indexes of ``None``, absent keys, are added to ``absent``)."""
        bad = []
        for index, value in enumerate(values):
            if value is None:
                if absent is not None:
                    absent.append(index)
                continue
            if value.isascii():
                continue
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                self._report(store, keys[index], VALUE_NOT_UTF8)
                bad.append(index)
        return bad

    def is_utf8(self, store: str, key: bytes, value: bytes) -> bool:
        """Whether ``value`` is UTF-8 text; reports it when not."""
        return not self.not_utf8(store, (key,), (value,))

    def _report(self, store: str, key: bytes, problem: ProblemType = VALUE_NOT_JSON) -> None:
        if self._on_bad is not None:
            self._on_bad(store)
        with self._lock:
            first = (store, problem.slug) not in self._logged
            self._logged.add((store, problem.slug))
        if first:
            logger.error(
                'store "%s" holds a value that is not %s (key %s, base64); reads answer it as an error'
                " (%s) until the topic has a valid record for the key; statestore_invalid_values"
                " counts them, this is logged once per store",
                store,
                "JSON" if problem is VALUE_NOT_JSON else "UTF-8 text",
                base64.b64encode(key[:48]).decode("ascii"),
                problem.slug,
            )


class JsonAnswer:
    """The values of one JSON answer of one store, and the error entries of those it cannot carry."""

    def __init__(self, store: str, value_format: str, encoding: KeyEncoding, bad: BadValues) -> None:
        self._store = store
        self._format = value_format
        self.encoding = encoding
        self._bad = bad
        self.errors: list[dict[str, Any]] = []
        # The places of the absent keys of a batch (:meth:`values`): a ``null`` elsewhere in it is
        # a stored JSON ``null`` (or, listed in ``errors``, a value that could not be answered).
        self.absent: list[int] = []

    def _error(self, key: bytes, value: bytes, **where: Any) -> dict[str, Any]:
        if self._format == "string":
            problem, detail = VALUE_NOT_UTF8, not_utf8_detail(self._store)
        else:
            problem, detail = bad_value_problem(self._store, value)
        error = {
            **where,
            "key": encode_key(key, self.encoding),
            "type": problem.uri,
            "title": problem.title,
            "status": problem.status,
            "detail": detail,
        }
        self.errors.append(error)
        return error

    def _is_bad(self, key: bytes, value: bytes) -> bool:
        if self._format == "json":
            return not self._bad.is_json(self._store, key, value)
        return self._format == "string" and not self._bad.is_utf8(self._store, key, value)

    def items(self, items: Sequence[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
        """Scan or index page items: ``{"key", "value"}``, or ``{"key", "error"}`` for a bad value."""
        answered: list[dict[str, Any]] = []
        for key, value in items:
            if self._is_bad(key, value):
                error = self._error(key, value)
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
        """Batch values in request order: ``None`` for absent keys (their places then in
        :attr:`absent`) and, with an error entry, for bad values."""
        absent = self.absent
        if self._format == "string":
            bad = set(self._bad.not_utf8(self._store, keys, values, absent))
            for index in sorted(bad):
                self._error(keys[index], values[index] or b"", index=index)
            return [None if i in bad else json_value(value, "string") for i, value in enumerate(values)]
        if self._format != "json":
            absent += [index for index, value in enumerate(values) if value is None]
            return [json_value(value, self._format) for value in values]
        fragment = orjson.Fragment
        answered: list[Any] = [None if value is None else fragment(value) for value in values]
        # The pass checking the values finds the absent ones too: no pass of its own on the hot path.
        for index in self._bad.not_json(self._store, keys, values, absent):
            self._error(keys[index], values[index] or b"", index=index)
            answered[index] = None
        return answered

    def batch(self, keys: Sequence[bytes], values: Sequence[bytes | None], position: str) -> bytes:
        """The JSON answer of a batch get: ``{"values", "absent", "position"}``, and ``errors`` when
        a value could not be answered (:meth:`values`).

        A ``json`` store's answer is its stored values joined as they are, with no object per value:
        marked values (module docstring) are found by one search of the joined bytes."""
        if self._format == "json":
            try:  # every key present (the usual batch): no pass for absent keys
                joined, absent = b",".join(values), b"[]"  # type: ignore[arg-type]
            except TypeError:  # a None among them
                absent = orjson.dumps([index for index, value in enumerate(values) if value is None])
                joined = b",".join([b"null" if value is None else value for value in values])
            if b"\x00" not in joined:
                return b"".join(
                    (
                        b'{"values":[',
                        joined,
                        b'],"absent":',
                        absent,
                        b',"position":',
                        orjson.dumps(position),
                        b"}",
                    )
                )
        answered = self.values(keys, values)
        return self.document({"values": answered, "absent": self.absent, "position": position})

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
        return value.decode("utf-8")  # checked first (JsonAnswer): never a replacement character
    return base64.b64encode(value).decode("ascii")

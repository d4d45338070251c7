"""Values decoded once, at ingest: the codecs a store runs on every record before it is written.

A store whose topic holds Confluent-framed values (a magic byte ``0``, a 4-byte big-endian schema
id, the payload) is given a :class:`ValueCodec`; the apply loop runs it on each poll's values and
writes what it returns, so reads serve stored JSON and never decode. A value the codec cannot
decode is stored as an *undecodable marker* (:func:`undecodable`): bytes that are never a JSON
document, which every read answers as an error entry naming the reason, never as a value.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from store.formats.errors import FormatError, RegistryUnavailableError

UNDECODABLE_PREFIX = b"\x00statestore:undecodable\x00"
"""Starts a stored value that could not be decoded; the reason (UTF-8) follows. A JSON document
never starts with a NUL byte."""


def undecodable(reason: str) -> bytes:
    """The stored marker of a value that could not be decoded, for ``reason``."""
    return UNDECODABLE_PREFIX + reason.encode("utf-8", errors="replace")


def undecodable_reason(value: bytes) -> str | None:
    """Why the stored ``value`` could not be decoded, or ``None`` when it is not such a marker."""
    if not value.startswith(UNDECODABLE_PREFIX):
        return None
    return value[len(UNDECODABLE_PREFIX) :].decode("utf-8", errors="replace")


class Codec(Protocol):
    """Turns a poll's stored keys or values into what the store keeps (``None``: a tombstone, kept)."""

    @property
    def undecodable_count(self) -> int:
        """Values stored as undecodable markers so far."""
        ...

    def decode(self, values: Sequence[bytes | None]) -> list[bytes | None]:
        """The values to store, in order. Raises ``RegistryUnavailableError`` when the schemas
        needed cannot be fetched now (nothing was decided: the same values may be retried)."""
        ...


class ValueCodec(Codec, Protocol):
    """A store's value codec, which can also decode in a bulk restore's worker processes."""

    @property
    def last_undecodable(self) -> str | None:
        """Why the last value stored as undecodable could not be decoded (``None``: none was)."""
        ...

    def worker_codec(self) -> ValueCodec:
        """A copy for a restore worker (picklable): the same schemas, its shape taken afresh from
        the cached latest version, counting its own undecodable values. The latest version and
        its schema are cached first (``SchemaSource.warm``), so copies need no registry client
        for records of that version. This codec takes its shape afresh too, so both decode alike
        (a worker may have moved the latest version on)."""
        ...

    def count_undecodable(self, count: int, example: str | None) -> None:
        """Add ``count`` values a worker stored as undecodable (``example``: one's reason)."""
        ...


def decode_until_done(
    codec: Codec,
    values: Sequence[bytes | None],
    stop: threading.Event,
    on_wait: Callable[[str], None],
    first_wait: float = 0.2,
    longest_wait: float = 5.0,
) -> list[bytes | None] | None:
    """``codec.decode(values)``, retried while the registry is unavailable (each failure told to
    ``on_wait``, with a growing pause): ingest waits rather than skip a record. ``None`` once
    ``stop`` is set."""
    wait = first_wait
    while not stop.is_set():
        try:
            return codec.decode(values)
        except RegistryUnavailableError as exc:
            on_wait(str(exc))
            stop.wait(wait)
            wait = min(wait * 2, longest_wait)
    return None


__all__ = [
    "UNDECODABLE_PREFIX",
    "Codec",
    "FormatError",
    "RegistryUnavailableError",
    "ValueCodec",
    "decode_until_done",
    "undecodable",
    "undecodable_reason",
]

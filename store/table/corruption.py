"""Telling "not found" from failure in RocksDB reads, and what a store records when a read fails.

rocksdict raises a bare ``Exception`` both for an absent key (a snapshot's ``snap[key]``:
``"key not found"``) and for a failed read (``Corruption: block checksum mismatch: ... in
/.../000123.sst offset ...``, ``IO error: ...``). A multi-get answers ``None`` for absent keys and
raises for a failed one. An iterator stops (``valid()`` turns false) on a failure just as at the
end of its range; only its ``status()`` tells the two apart. Every read of a store goes through
these helpers, so only "not found" ever means absent.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import rocksdict

from store.exceptions import StoreClosedError, StoreError, StoreReadError
from store.protocol import CorruptionReport, FoundBy

KEY_NOT_FOUND = "key not found"
"""What rocksdict's ``Snapshot.__getitem__`` raises (a bare ``Exception``) for an absent key."""

# The file a RocksDB message names: table, blob and log files, the manifest, CURRENT, OPTIONS.
_FILE = re.compile(r"(/[^\s:,]*?(?:\.sst|\.blob|\.log|/MANIFEST-\d+|/CURRENT|/OPTIONS-\d+))(?![\w.])")

logger = logging.getLogger(__name__)

"""Who found corruption: a reader's view, the background verification, the materializer's own reads."""

FINDERS: dict[FoundBy, str] = {
    "read": "a read",
    "verification": "the background verification",
    "materializer": "the materializer",
}


def log_corruption_found(
    store: str, copy: Path, report: CorruptionReport, *, written: bool, served: bool
) -> None:
    """The one line an operator gets for a copy found corrupt: where, what, and what happens next."""
    if written and served:
        next_step = (
            "reads answer 503 store-corrupt until a copy rebuilt from the topic replaces it (rebuilding now)"
        )
    elif served:
        next_step = "reads answer 503 store-corrupt until the rebuild already running replaces it"
    else:
        next_step = "the rebuild starts again from the topic; reads go on from the last good copy"
    logger.error(
        'store "%s": %s found corruption in its copy at %s (%s; file: %s); %s. If this recurs, check'
        " the volume (kernel log, disk health)",
        store,
        FINDERS[report.found_by],
        copy,
        report.detail,
        report.file or "not named",
        next_step,
    )


def named_file(message: str) -> str | None:
    """The file a RocksDB error message names (``None`` if it names none)."""
    match = _FILE.search(message)
    return match.group(1) if match else None


def read_error(exc: Exception) -> StoreError:
    """The store error for a failed engine read (``exc`` is not "not found")."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, rocksdict.DbClosedError):
        return StoreClosedError("the store's database was closed; take a new view with store.view()")
    text = str(exc) or type(exc).__name__
    return StoreReadError(
        f"a read of the store's files failed: {text}", file=named_file(text), engine_message=text
    )


def drop_engine_references(error: BaseException) -> None:
    """Clear the finished frames of ``error``'s traceback (and its causes').

    Those frames hold the snapshots and iterators the failed read used, and they keep the
    database open: a caller holding the error would stop the corrupt copy from closing, and a
    copy rebuilt in the same directory from opening.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__


def is_absent(exc: Exception) -> bool:
    """Whether a snapshot lookup's exception means "no such key" (and nothing else)."""
    return isinstance(exc, KeyError) or exc.args == (KEY_NOT_FOUND,)


def family_get(family: Any, key: bytes | list[bytes]) -> Any:
    """``Rdict.get`` (one key, or a multi-get of a list), which answers ``None`` for absent keys."""
    try:
        return family.get(key)
    except Exception as exc:
        raise read_error(exc) from exc


def check_status(iterator: Any) -> None:
    """Raise ``StoreReadError`` if the iterator stopped on a failure rather than at its end."""
    try:
        iterator.status()
    except StoreError:
        raise
    except Exception as exc:
        raise read_error(exc) from exc


def entries(iterator: Any, start: bytes, upper: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
    """Entries in ``[start, upper)`` in byte order, then a status check (a failure raises)."""
    iterator.seek(start)
    while iterator.valid():
        key = iterator.key()
        if upper is not None and key >= upper:
            return
        yield key, iterator.value()
        iterator.next()
    check_status(iterator)


def prefixed(iterator: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Entries whose key starts with ``prefix``, in byte order, then a status check."""
    for key, value in entries(iterator, prefix):
        if not key.startswith(prefix):
            return
        yield key, value

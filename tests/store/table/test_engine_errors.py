"""Write errors by kind: a full volume, an I/O error, corruption and a closed copy each get their
own error class (all ``StoreWriteError``, so callers that react to any keep doing so), and each
message says what to do."""

from __future__ import annotations

from pathlib import Path

import pytest
import rocksdict

from store import (
    RocksDBOptions,
    StoreClosedError,
    StoreCorruptWriteError,
    StoreFullError,
    StoreIOError,
    StoreReadError,
    StoreWriteError,
    StoreWriterClosedError,
)
from store.table.engine import Engine
from store.table.volume import write_error

DB = Path("/var/lib/statestore/products/db")


@pytest.mark.parametrize(
    ("refusal", "kind", "advice"),
    [
        (
            "IO error: No space left on device: While appending to file: 000123.sst",
            StoreFullError,
            "free space on its volume",
        ),
        ("IO error: Disk quota exceeded", StoreFullError, "free space on its volume"),
        ("IO error: File too large", StoreFullError, "free space on its volume"),
        ("IO error: Input/output error while fsync", StoreIOError, "check its volume"),
        ("Corruption: block checksum mismatch: stored = 1, computed = 2", StoreCorruptWriteError, "rebuilds"),
        ("Invalid argument: Column family not found", StoreWriteError, "report it"),
    ],
)
def test_a_refusal_is_classified_by_the_kind_rocksdb_names(
    refusal: str, kind: type[StoreWriteError], advice: str
) -> None:
    error = write_error(DB, Exception(refusal))
    assert type(error) is kind
    assert isinstance(error, StoreWriteError)
    assert str(DB) in str(error)
    assert refusal in str(error)
    assert advice in str(error)


def test_only_a_full_volume_says_to_free_space() -> None:
    for refusal in ("IO error: Input/output error", "Corruption: bad block", "Invalid argument: x"):
        assert "free space" not in str(write_error(DB, Exception(refusal)))


def test_writing_a_closed_engine_is_a_closed_writer_not_a_full_disk(tmp_path: Path) -> None:
    engine = Engine(tmp_path / "db", RocksDBOptions())
    batch = engine.new_batch()
    batch.put(b"k", b"v")
    engine.close()
    for write in (lambda: engine.write(batch), engine.flush, lambda: engine.defer_compactions(True)):
        with pytest.raises(StoreWriterClosedError, match="closed while being written") as raised:
            write()
        assert isinstance(raised.value, StoreClosedError)
        assert "free space" not in str(raised.value)


def test_rocksdicts_own_closed_error_is_a_closed_writer() -> None:
    assert (
        type(write_error(DB, rocksdict.DbClosedError("DB instance already closed"))) is StoreWriterClosedError
    )


def test_a_write_refused_for_corruption_is_also_a_failed_read_naming_the_file() -> None:
    """So the materializer reacts to it as to any corruption found: the copy is rebuilt."""
    error = write_error(DB, Exception("Corruption: block checksum mismatch in /s/db/000009.sst offset 5"))
    assert isinstance(error, StoreReadError)
    assert error.file == "/s/db/000009.sst"
    assert error.engine_message.startswith("Corruption: block checksum mismatch")

"""The bulk loader's worker process, started as ``python -P .../store/sst_worker.py``.

Reads pickled ``(records_path, sst_path)`` requests from stdin; each records file holds one
chunk's marshalled ``(keys, values)``, which it reads, deletes, and writes as the SST file
``sst_path``. It answers each request with the pickled path of that SST file (or ``None`` for an
empty chunk, or the error text).

A plain child process rather than ``multiprocessing``: it never re-imports the embedding
application's ``__main__``. Run as a script, and importing nothing of ours, it starts without
importing the ``store`` package and its dependencies, which competed for the CPU with the first
chunk being consumed.
"""

from __future__ import annotations

import marshal
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import rocksdict


def _sst_options() -> rocksdict.Options:
    # The database's own compression (store.engine), so ingested files need no rewrite to match.
    options = rocksdict.Options(raw_mode=True)
    options.set_compression_type(rocksdict.DBCompressionType.lz4())
    return options


_SST_OPTIONS = _sst_options()


def sorted_last_per_key(
    keys: Sequence[bytes], values: Sequence[bytes | None]
) -> tuple[list[bytes], list[bytes | None]]:
    """Keys in byte order, each once, with the value of its last occurrence (None: tombstone)."""
    last = dict(zip(keys, values, strict=True))
    ordered = sorted(last)
    return ordered, [last[key] for key in ordered]


def write_sst(path: Path, keys: Sequence[bytes], values: Sequence[bytes | None]) -> Path | None:
    """Write one chunk to the SST file ``path``; ``None`` (and no file) if the chunk is empty."""
    sorted_keys, sorted_values = sorted_last_per_key(keys, values)
    if not sorted_keys:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = rocksdict.SstFileWriter(_SST_OPTIONS)
    writer.open(str(path))
    for key, value in zip(sorted_keys, sorted_values, strict=True):
        if value is None:
            del writer[key]
        else:
            writer[key] = value
    writer.finish()
    return path


def build(records_path: Path, sst_path: Path) -> Path | None:
    data = records_path.read_bytes()
    records_path.unlink()
    keys, values = marshal.loads(data)
    del data
    return write_sst(sst_path, keys, values)


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    while True:
        try:
            records_path, sst_path = pickle.load(requests)
        except EOFError:
            return
        try:
            answer: object = build(Path(records_path), Path(sst_path))
        except Exception as exc:  # reported to the parent, which retries the session
            answer = f"{type(exc).__name__}: {exc}"
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)

"""The bulk loader's worker process: ``python -m store.sst_worker``.

Reads pickled ``(records_path, sst_path)`` requests from stdin; each records file holds one
chunk's marshalled ``(keys, values)``, which it reads, deletes, and writes as the SST file
``sst_path``. It answers each request with the pickled path of that SST file (or ``None`` for an
empty chunk, or the error text). A plain child process rather than ``multiprocessing``: it never
re-imports the embedding application's ``__main__``.
"""

from __future__ import annotations

import marshal
import pickle
import sys
from pathlib import Path
from typing import BinaryIO

from store.bulkload import write_sst


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

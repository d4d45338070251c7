"""The bulk loader's worker process: ``python -m store.sst_worker``.

Reads pickled ``(path, keys, values)`` requests from stdin and answers each with the pickled path
of the SST file it wrote (or ``None`` for an empty chunk, or the error text). A plain child
process rather than ``multiprocessing``: it never re-imports the embedding application's
``__main__``.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import BinaryIO

from store.bulkload import write_sst


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    while True:
        try:
            path, keys, values = pickle.load(requests)
        except EOFError:
            return
        try:
            answer: object = write_sst(Path(path), keys, values)
        except Exception as exc:  # reported to the parent, which retries the session
            answer = f"{type(exc).__name__}: {exc}"
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)

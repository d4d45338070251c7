"""Run the same work in several threads that start it at one moment, to test what they share."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def together(count: int, work: Callable[[threading.Barrier], T], timeout: float = 60.0) -> list[T]:
    """What ``work`` returned in each of ``count`` threads, in the order they finished. ``work`` is
    given a barrier to wait at just before the part that must start at once. A thread that raised
    returns nothing, so a caller comparing the results with ``count`` expected ones fails."""
    start = threading.Barrier(count, timeout=timeout)
    results: list[T] = []
    collecting = threading.Lock()

    def run() -> None:
        result = work(start)
        with collecting:
            results.append(result)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return results

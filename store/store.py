"""The public face of one materialized store (implementation in progress)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType

from store.config import StoreConfig
from store.position import Position
from store.protocol import ReadOnlyKeyValueStore, StoreStatus
from store.state import StoreState


class Store:
    """One compacted topic materialized into RocksDB under ``config.state_dir / config.name``.

    ``start()`` opens and locks the directory and starts the materializer thread; the store is
    RESTORING until it reaches the end offsets sampled at start, then READY. ``stop()`` flushes and
    releases the directory.
    """

    def __init__(self, config: StoreConfig) -> None:
        self.config = config

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def state(self) -> StoreState:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        raise NotImplementedError

    def view(self) -> AbstractContextManager[ReadOnlyKeyValueStore]:
        raise NotImplementedError

    def status(self) -> StoreStatus:
        raise NotImplementedError

    def wait_for_position(self, minimum: Position, timeout: float) -> bool:
        raise NotImplementedError

    def __enter__(self) -> Store:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

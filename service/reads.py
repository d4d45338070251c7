"""What every store read shares: finding the store (checking access), and reading at a position.

Reads of a READY store run on the event loop: a view is a snapshot and a lookup takes
microseconds, so a thread hop would cost more than the read. Reads that may run long (many
index lookups at once) go to worker threads. Position waits (``min_position``, ``as_of`` not
reached yet) hold no thread: see ``service.waits``. Store errors a read meets are turned into
problems by the handlers in ``service.problems``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import anyio
from starlette.requests import Request

from service.auth import Auth
from service.guard import request_timeout
from service.problems import store_corrupt, store_not_ready
from service.queries import ReadOptions
from service.registry import ServedStore, StoreRegistry
from service.settings import Settings
from service.waits import PositionWaits
from store import Position, PositionNotReachedError, ReadOnlyKeyValueStore
from wire.problems import POSITION_NOT_REACHED, UNKNOWN_STORE

T = TypeVar("T")


def find_store(registry: StoreRegistry, auth: Auth, request: Request) -> ServedStore:
    """The store named in the path, after checking the caller may read it."""
    name = request.path_params["store"]
    auth.check(request, name)
    served = registry.get(name)
    if served is None:
        raise UNKNOWN_STORE(
            f'store "{name}" is not configured; GET /v1/stores lists the stores', extras={"store": name}
        )
    return served


class Reader:
    """Runs one read against a consistent view, honouring ``min_position`` and ``as_of``."""

    def __init__(self, registry: StoreRegistry, settings: Settings) -> None:
        self._registry = registry
        self._limits = settings.limits
        self._waits = {served.name: PositionWaits(served.store) for served in registry.all()}

    def close(self) -> None:
        """Stop listening to the stores' changes."""
        for waits in self._waits.values():
            waits.close()

    def _once(
        self,
        served: ServedStore,
        read: Callable[[ReadOnlyKeyValueStore], T],
        minimum: Position | None,
        as_of: Position | None,
        at_time: int | None = None,
    ) -> tuple[T, Position] | Position:
        """The read and its position, or only the store's position while it is below the one asked."""
        self._check_readable(served)
        try:
            # A time read's view is a ``TimedReader`` (``store.table.timed_reader``).
            views = served.store.view(as_of) if at_time is None else served.store.view(as_of, at_time)
            with views as view:
                position = view.position()
                if minimum is not None and not position.reaches(minimum):
                    return position
                return read(view), position
        except PositionNotReachedError:
            return served.store.position()

    def _check_readable(self, served: ServedStore) -> None:
        if not self._registry.readable(served):
            if served.store.corruption is not None:
                raise store_corrupt(served.name, self._limits.retry_after_seconds)
            raise store_not_ready(
                served.name, self._registry.state_of(served), self._limits.retry_after_seconds
            )

    async def read_key(
        self, served: ServedStore, options: ReadOptions, key: bytes
    ) -> tuple[bytes | None, Position]:
        """The value of ``key`` (``None``: absent) and the position it was read at, as
        :meth:`read` of ``view.get(key)`` answers; without a view when no position or time is
        asked (the store's one point read, ``ServableStore.latest``)."""
        if options.wanted is None and options.as_of_time is None:
            self._check_readable(served)
            return served.store.latest(key)
        return await self.read(served, options, lambda view: view.get(key))

    async def read(
        self,
        served: ServedStore,
        options: ReadOptions,
        read: Callable[[ReadOnlyKeyValueStore], T],
        *,
        in_thread: bool = False,
    ) -> tuple[T, Position]:
        """``read(view)`` and the view's position, once the store has reached ``options.minimum``.

        With ``options.as_of``, the view answers as of exactly that position, which is also the
        position returned; with ``options.as_of_time``, as of that time (``store.table.timed``).
        ``in_thread`` runs the read on a worker thread (reads that may take long).
        """
        minimum, as_of, at_time = options.minimum, options.as_of, options.as_of_time
        answer = (
            await self._attempt(served, read, minimum, as_of, at_time, in_thread)
            if in_thread
            else self._once(served, read, minimum, as_of, at_time)
        )
        if isinstance(answer, tuple):
            return answer
        wanted = options.wanted
        assert wanted is not None
        timeout = options.timeout
        budget = None if options.deadline is None else max(0.0, options.deadline - time.monotonic())
        cut_by_deadline = budget is not None and budget < timeout
        if await self._waits[served.name].wait(wanted, timeout if budget is None else min(timeout, budget)):
            answer = await self._attempt(served, read, minimum, as_of, at_time, in_thread)
            if isinstance(answer, tuple):
                return answer
        position = answer
        if cut_by_deadline:
            raise request_timeout(self._limits)
        name = "as_of" if as_of is not None else "min_position"
        extras = {"store": served.name, "position": str(position), "min_position": str(wanted)}
        if as_of is not None:
            extras["as_of"] = str(as_of)
        raise POSITION_NOT_REACHED(
            f'store "{served.name}" is at {position or "(empty)"}, not yet at {name} {wanted} after'
            f" {timeout:g} s; retry later",
            extras=extras,
            headers={
                "Retry-After": str(self._limits.retry_after_seconds),
                "Statestore-Position": str(position),
            },
        )

    async def _attempt(
        self,
        served: ServedStore,
        read: Callable[[ReadOnlyKeyValueStore], T],
        minimum: Position | None,
        as_of: Position | None,
        at_time: int | None,
        in_thread: bool,
    ) -> tuple[T, Position] | Position:
        if in_thread:
            return await anyio.to_thread.run_sync(self._once, served, read, minimum, as_of, at_time)
        return self._once(served, read, minimum, as_of, at_time)

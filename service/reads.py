"""What every store read shares: finding the store, checking access, parameters, position waits.

Reads of a READY store run on the event loop: a view is a snapshot and a lookup takes
microseconds, so a thread hop would cost more than the read. Reads that may run long (many
index lookups at once) go to worker threads. Position waits (``min_position``, ``as_of`` not
reached yet) hold no thread: see ``service.waits``. Store errors a read meets are turned into
problems by the handlers in ``service.problems``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import anyio
from starlette.datastructures import QueryParams
from starlette.requests import Request

from service.auth import Auth
from service.guard import remaining_seconds, request_timeout
from service.problems import store_corrupt, store_not_ready
from service.registry import ServedStore, StoreRegistry
from service.settings import Settings
from service.sharding import shard_part
from service.waits import PositionWaits
from store import (
    InvalidPositionError,
    Position,
    PositionNotReachedError,
    ReadOnlyKeyValueStore,
)
from wire.problems import (
    INVALID_PARAMETER,
    INVALID_POSITION,
    POSITION_NOT_REACHED,
    UNKNOWN_STORE,
    ProblemError,
)

T = TypeVar("T")

# Only ASCII digits: int() would also take "1_000" and digits of other scripts.
_INTEGER = re.compile(r"-?[0-9]{1,18}")


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


def invalid_parameter(name: str, message: str) -> ProblemError:
    return INVALID_PARAMETER(
        f"{name}: {message}", extras={"errors": [{"loc": ["query", name], "msg": message}]}
    )


def int_param(query: QueryParams, name: str, default: int | None, minimum: int) -> int | None:
    raw = query.get(name)
    if raw is None:
        return default
    if not _INTEGER.fullmatch(raw):
        raise invalid_parameter(name, f"must be an integer in ASCII digits, got {raw[:40]!r}")
    value = int(raw)
    if value < minimum:
        raise invalid_parameter(name, f"must be at least {minimum}, got {value}")
    return value


class Reader:
    """Runs one read against a consistent view, honouring ``min_position`` and ``as_of``."""

    def __init__(self, registry: StoreRegistry, settings: Settings) -> None:
        self._registry = registry
        self._limits = settings.limits
        self._sharding = settings.sharding
        self._waits = {served.name: PositionWaits(served.store) for served in registry.all()}

    def close(self) -> None:
        """Stop listening to the stores' changes."""
        for waits in self._waits.values():
            waits.close()

    def _timeout(self, query: QueryParams) -> float:
        limit = self._limits.min_position_timeout_seconds
        timeout_ms = int_param(query, "timeout_ms", None, 0)
        return limit if timeout_ms is None else min(limit, timeout_ms / 1000)

    def _once(
        self,
        served: ServedStore,
        read: Callable[[ReadOnlyKeyValueStore], T],
        minimum: Position | None,
        as_of: Position | None,
    ) -> tuple[T, Position] | Position:
        """The read and its position, or only the store's position while it is below the one asked."""
        if not self._registry.readable(served):
            if served.store.corruption is not None:
                raise store_corrupt(served.name, self._limits.retry_after_seconds)
            raise store_not_ready(
                served.name, self._registry.state_of(served), self._limits.retry_after_seconds
            )
        try:
            with served.store.view(as_of) as view:
                position = view.position()
                if minimum is not None and not position.reaches(minimum):
                    return position
                return read(view), position
        except PositionNotReachedError:
            return served.store.position()

    async def read(
        self,
        served: ServedStore,
        request: Request,
        read: Callable[[ReadOnlyKeyValueStore], T],
        *,
        in_thread: bool = False,
    ) -> tuple[T, Position]:
        """``read(view)`` and the view's position, once the store has reached ``min_position``.

        With ``as_of``, the view answers as of exactly that position, which is also the position
        returned. ``in_thread`` runs the read on a worker thread (reads that may take long).
        """
        query = request.query_params
        # Of a sharded store, entries naming other shards' partitions are not this shard's to read.
        minimum = shard_part(position_param(query, "min_position"), self._sharding)
        as_of = shard_part(position_param(query, "as_of"), self._sharding)
        if minimum is not None and as_of is not None:
            raise invalid_parameter(
                "as_of", "as_of and min_position exclude each other: an as_of read waits for its own position"
            )
        wanted = as_of if as_of is not None else minimum
        timeout = self._timeout(query) if wanted is not None else 0.0
        answer = await self._attempt(served, read, minimum, as_of, in_thread)
        if isinstance(answer, tuple):
            return answer
        assert wanted is not None
        budget = remaining_seconds(request.scope)
        cut_by_deadline = budget is not None and budget < timeout
        if await self._waits[served.name].wait(wanted, timeout if budget is None else min(timeout, budget)):
            answer = await self._attempt(served, read, minimum, as_of, in_thread)
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
        in_thread: bool,
    ) -> tuple[T, Position] | Position:
        if in_thread:
            return await anyio.to_thread.run_sync(self._once, served, read, minimum, as_of)
        return self._once(served, read, minimum, as_of)


def position_param(query: QueryParams, name: str) -> Position | None:
    """The position in query parameter ``name`` (``None`` when absent; empty is the empty position)."""
    raw = query.get(name)
    if raw is None:
        return None
    try:
        return Position.parse(raw)
    except InvalidPositionError as exc:
        raise INVALID_POSITION(f"{name}: {exc}") from exc

"""What every store read shares: finding the store, checking access, parameters, position waits.

Reads of a READY store run on the event loop: a view is a snapshot and a lookup takes
microseconds, so a thread hop would cost more than the read. Position waits (``min_position``,
``as_of`` not reached yet), which block, go to worker threads (bounded by
``limits.max_position_waiters``), and so do reads that may run long (many index lookups at once).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Callable
from typing import TypeVar

import anyio
from starlette.datastructures import QueryParams
from starlette.requests import Request

from service.exceptions import ProblemError
from service.guard import remaining_seconds, request_timeout
from service.problems import store_corrupt
from service.registry import ServedStore, StoreRegistry
from service.settings import Settings
from store import (
    HistoryExpiredError,
    HistoryNotKeptError,
    InvalidPositionError,
    Position,
    PositionNotReachedError,
    ReadOnlyKeyValueStore,
    StoreClosedError,
    StoreState,
)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class _Grant:
    """What a matched token may read: ``stores`` names them, ``None`` means every store."""

    stores: frozenset[str] | None


class Access:
    """Who may read which store: nobody is checked in ``open`` mode, bearer tokens otherwise."""

    def __init__(self, settings: Settings) -> None:
        self.open = settings.auth.mode == "open"
        # Token digest -> the stores it may read (``None``: every store).
        self._tokens: dict[str, frozenset[str] | None] = {
            t.sha256: None if t.reads_every_store else frozenset(t.stores) for t in settings.auth.tokens
        }

    def allowed_stores(self, request: Request) -> frozenset[str] | None:
        """The stores the caller may read (``None``: all); raises ``unauthorized`` without a valid token."""
        if self.open:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        matched = self._match(token.strip()) if scheme.lower() == "bearer" else None
        if matched is None:
            raise ProblemError(
                401,
                "unauthorized",
                "Unauthorized",
                "send a valid token as 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": 'Bearer realm="statestore"'},
            )
        return matched.stores

    def _match(self, token: str) -> _Grant | None:
        """The grant of the configured token equal to ``token``, compared in constant time."""
        digest = hashlib.sha256(token.encode()).hexdigest().encode()
        found: _Grant | None = None
        for known, stores in self._tokens.items():
            # Every configured digest is compared, all the way: no timing tells which was close.
            if hmac.compare_digest(digest, known.lower().encode()):
                found = _Grant(stores)
        return found

    def check(self, request: Request, store: str) -> None:
        allowed = self.allowed_stores(request)
        if allowed is not None and store not in allowed:
            raise ProblemError(
                403,
                "forbidden",
                "Forbidden",
                f'this token may not read store "{store}"',
                extras={"store": store},
            )


def find_store(registry: StoreRegistry, access: Access, request: Request) -> ServedStore:
    """The store named in the path, after checking the caller may read it."""
    name = request.path_params["store"]
    access.check(request, name)
    served = registry.get(name)
    if served is None:
        raise ProblemError(
            404,
            "unknown-store",
            "Unknown store",
            f'store "{name}" is not configured; GET /v1/stores lists the stores',
            extras={"store": name},
        )
    return served


def invalid_parameter(name: str, message: str) -> ProblemError:
    return ProblemError(
        422,
        "invalid-parameter",
        "Invalid parameter",
        f"{name}: {message}",
        extras={"errors": [{"loc": ["query", name], "msg": message}]},
    )


def int_param(query: QueryParams, name: str, default: int | None, minimum: int) -> int | None:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise invalid_parameter(name, f"must be an integer, got {raw[:40]!r}") from None
    if value < minimum:
        raise invalid_parameter(name, f"must be at least {minimum}, got {value}")
    return value


def not_ready(served: ServedStore, state: StoreState, retry_after: int) -> ProblemError:
    return ProblemError(
        503,
        "store-not-ready",
        "Store not ready",
        f'store "{served.name}" is {state.value}; it serves once READY'
        f" (GET /v1/stores/{served.name} shows progress)",
        extras={"store": served.name, "state": state.value},
        headers={"Retry-After": str(retry_after)},
    )


class Reader:
    """Runs one read against a consistent view, honouring ``min_position`` and ``as_of``."""

    def __init__(self, registry: StoreRegistry, settings: Settings) -> None:
        self._registry = registry
        self._limits = settings.limits
        self._waiters = anyio.CapacityLimiter(settings.limits.max_position_waiters)

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
            raise not_ready(served, self._registry.state_of(served), self._limits.retry_after_seconds)
        try:
            with served.store.view(as_of) as view:
                position = view.position()
                if minimum is not None and not position.reaches(minimum):
                    return position
                return read(view), position
        except StoreClosedError as exc:
            raise not_ready(served, StoreState.STOPPED, self._limits.retry_after_seconds) from exc
        except PositionNotReachedError:
            return self._current_position(served)
        except HistoryNotKeptError as exc:
            raise ProblemError(
                400,
                "history-not-kept",
                "History not kept",
                f'store "{served.name}" keeps no history, so it cannot answer as_of a position;'
                " read without as_of, or configure history on the store",
                extras={"store": served.name},
            ) from exc
        except HistoryExpiredError as exc:
            floor = exc.floor if isinstance(exc.floor, Position) else None
            raise ProblemError(
                410,
                "history-expired",
                "History expired",
                f'store "{served.name}" answers as_of positions from {floor or "(none yet)"} on;'
                f" {as_of or '(empty)'} is older. Read at a newer position",
                extras={
                    "store": served.name,
                    "as_of": str(as_of),
                    "floor": None if floor is None else str(floor),
                },
            ) from exc

    def _current_position(self, served: ServedStore) -> Position:
        try:
            with served.store.view() as view:
                return view.position()
        except StoreClosedError as exc:
            raise not_ready(served, StoreState.STOPPED, self._limits.retry_after_seconds) from exc

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
        minimum = position_param(query, "min_position")
        as_of = position_param(query, "as_of")
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
        reached = await anyio.to_thread.run_sync(
            served.store.wait_for_position,
            wanted,
            min(timeout, budget) if budget is not None else timeout,
            limiter=self._waiters,
            # A request cancelled (timeout, disconnect) must not wait for the thread's own timeout.
            abandon_on_cancel=True,
        )
        if reached:
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
        raise ProblemError(
            503,
            "position-not-reached",
            "Position not reached",
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
        raise ProblemError(400, "invalid-position", "Invalid position", f"{name}: {exc}") from exc

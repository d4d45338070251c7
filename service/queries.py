"""A request's query string, parsed once and strictly, and the read options it carries.

Every parameter may be given once: ``?limit=5&limit=5000`` is refused (``422 invalid-parameter``)
rather than answered for one of them, which a cache or proxy in front may have read differently.
Values keep percent-encoded bytes that are not UTF-8 (as lone surrogates), so the parameter that
must be text refuses them with its own problem (a key, a position, an integer) instead of reading
U+FFFD in their place.
"""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import parse_qsl

from starlette.types import Scope

from service.guard import DEADLINE_KEY
from service.limit_settings import LimitSettings
from service.sharding import shard_part
from service.store_settings import ShardingSettings
from service.times import TimeSyntaxError, parse_time
from store import InvalidPositionError, Position
from wire.problems import INVALID_PARAMETER, INVALID_POSITION, ProblemError

# Only ASCII digits: int() would also take "1_000" and digits of other scripts.
_INTEGER = re.compile(r"-?[0-9]{1,18}")


def invalid_parameter(name: str, message: str) -> ProblemError:
    """``422 invalid-parameter`` about query parameter ``name``."""
    return INVALID_PARAMETER(
        f"{name}: {message}", extras={"errors": [{"loc": ["query", name], "msg": message}]}
    )


class Query:
    """The query parameters of one request by name, each given at most once."""

    __slots__ = ("_values",)

    def __init__(self, raw: bytes) -> None:
        self._values: dict[str, str] = {}
        if not raw:
            return
        text = raw.decode("latin-1")
        for name, value in parse_qsl(text, keep_blank_values=True, errors="surrogateescape"):
            if name in self._values:
                raise invalid_parameter(name, "is given more than once; give each parameter once")
            self._values[name] = value

    @classmethod
    def of(cls, scope: Scope) -> Query:
        raw = scope.get("query_string", b"")
        return cls(raw) if raw else _NO_QUERY

    @property
    def empty(self) -> bool:
        """Whether no parameter was given."""
        return not self._values

    def get(self, name: str) -> str | None:
        """The value of ``name`` (percent-decoded), ``None`` when absent."""
        return self._values.get(name)

    def integer(self, name: str, default: int, minimum: int) -> int:
        """The integer in ``name`` (ASCII digits), at least ``minimum``; ``default`` when absent."""
        value = self.optional_integer(name, minimum)
        return default if value is None else value

    def optional_integer(self, name: str, minimum: int) -> int | None:
        raw = self._values.get(name)
        if raw is None:
            return None
        if not _INTEGER.fullmatch(raw):
            raise invalid_parameter(name, f"must be an integer in ASCII digits, got {raw[:40]!r}")
        value = int(raw)
        if value < minimum:
            raise invalid_parameter(name, f"must be at least {minimum}, got {value}")
        return value

    def time(self, name: str) -> int | None:
        """The time in ``name`` as epoch ms (epoch ms or RFC 3339), ``None`` when absent."""
        raw = self._values.get(name)
        if raw is None:
            return None
        try:
            return parse_time(raw)
        except TimeSyntaxError as exc:
            raise invalid_parameter(name, str(exc)) from exc

    def position(self, name: str) -> Position | None:
        """The position in ``name`` (``None`` when absent; empty is the empty position)."""
        raw = self._values.get(name)
        if raw is None:
            return None
        try:
            return Position.parse(raw)
        except InvalidPositionError as exc:
            raise INVALID_POSITION(f"{name}: {exc}") from exc


_NO_QUERY = Query(b"")  # never changed: a query is only read once parsed


@dataclasses.dataclass(frozen=True, slots=True)
class ReadOptions:
    """When a read may be answered: at (``as_of``) or from (``minimum``) a position, waiting at most
    ``timeout`` seconds for the store to reach it, and never past the request's ``deadline``."""

    minimum: Position | None = None
    as_of: Position | None = None
    as_of_time: int | None = None  # epoch ms: each key's record stamped last at or before it
    timeout: float = 0.0
    deadline: float | None = None  # time.monotonic() at which the request times out (guarded routes)

    @property
    def wanted(self) -> Position | None:
        """The position the read waits for, if any."""
        return self.as_of if self.as_of is not None else self.minimum


_NO_WAIT = ReadOptions()


def read_options(
    query: Query,
    scope: Scope,
    limits: LimitSettings,
    sharding: ShardingSettings,
    every_partition: bool = False,
) -> ReadOptions:
    """The read options of ``query``: ``min_position``, ``as_of`` and ``timeout_ms``, all checked."""
    if query.empty:  # the most frequent read: it waits for nothing, so needs no deadline
        return _NO_WAIT
    # Checked even when no position is asked: a parameter the service takes is never ignored.
    timeout_ms = query.optional_integer("timeout_ms", 0)
    deadline = scope.get(DEADLINE_KEY)
    raw_minimum, raw_as_of = query.position("min_position"), query.position("as_of")
    as_of_time = query.time("as_of_time")
    if raw_minimum is None and raw_as_of is None:
        return ReadOptions(as_of_time=as_of_time, deadline=deadline)
    if raw_minimum is not None and raw_as_of is not None:
        raise invalid_parameter(
            "as_of", "as_of and min_position exclude each other: an as_of read waits for its own position"
        )
    limit = limits.min_position_timeout_seconds
    return ReadOptions(
        # Of a sharded store, entries naming other shards' partitions are not this shard's to read.
        minimum=shard_part(raw_minimum, sharding, every_partition),
        as_of=shard_part(raw_as_of, sharding, every_partition),
        as_of_time=as_of_time,
        timeout=limit if timeout_ms is None else min(limit, timeout_ms / 1000),
        deadline=deadline,
    )

"""What a Spark lookup asks for, as one typed object shared by ``lookup_join``, ``lookup_udf`` and
the planner (``clients.spark.plan``); and the HTTP client options every Spark task rebuilds."""

from __future__ import annotations

import dataclasses

from pyspark.sql.types import StructType

from clients.lookup import DEFAULT_CACHE_BYTES
from clients.options import DEFAULT_BATCH_SIZE, Cert, ClientOptions
from clients.retry import RetryPolicy
from clients.whole_store import DEFAULT_SCAN_BYTES
from wire.position import PositionLike

TASK_RETRY = RetryPolicy(max_backoff=5.0)
"""Retries of a Spark task's requests: short backoffs, Spark retries the task itself after that."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LookupOptions:
    """One lookup of ``store``: where the service is, what to read, how exactly, and how to batch.

    ``url`` and ``token`` default to the session's Spark conf (``clients.spark.plan.connection``),
    and so do ``verify`` (a CA bundle path) and ``cert`` (a client certificate for mTLS:
    ``(certfile, keyfile)`` or one PEM file with both; ``clients.spark.plan.client_tls``).
    ``consistent`` (or an explicit ``as_of``) makes every read exactly as of the pinned position;
    otherwise reads demand at least it (and ``min_position``, when given). ``index`` makes the
    lookup one-to-many through that index. ``cache_bytes`` bounds the decoded values a task keeps;
    ``scan_bytes`` the stored keys and values a task reads a whole store (or, with ``at_times``, its
    history) into when it needs most of its keys (``clients.whole_store``, ``clients.history``; 0:
    keys are always fetched by batch gets). ``at_times``: each row is read as of its own time.
    ``broadcast_bytes``: a typed lookup of a store whose stored keys and values stay below it is read
    whole on the driver and broadcast by Spark (``clients.spark.broadcast``; 0: never).
    """

    store: str
    url: str | None = None
    value_schema: str | StructType | None = None
    token: str | None = dataclasses.field(default=None, repr=False)
    verify: bool | str = True
    cert: str | tuple[str, str] | None = None
    min_position: PositionLike | None = None
    consistent: bool = False
    as_of: PositionLike | None = None
    index: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    timeout: float = 30.0
    deadline: float = 300.0
    planning_deadline: float = 10.0
    cache_bytes: int = DEFAULT_CACHE_BYTES
    scan_bytes: int = DEFAULT_SCAN_BYTES
    at_times: bool = False
    broadcast_bytes: int = 0

    def __post_init__(self) -> None:
        if self.as_of is not None and self.min_position is not None:
            raise ValueError("pass as_of= or min_position=, not both: as_of pins the exact position")
        if self.broadcast_bytes < 0:
            raise ValueError(
                f"broadcast_bytes must be 0 (never broadcast a store) or more, got {self.broadcast_bytes}"
            )
        if self.scan_bytes < 0:
            raise ValueError(
                f"scan_bytes must be 0 (never read a store whole) or more, got {self.scan_bytes}"
            )
        if not isinstance(self.verify, bool | str):
            raise TypeError(
                "verify must be True/False or a CA bundle path: tasks rebuild the client on executors"
            )

    @property
    def exact(self) -> bool:
        """Every read is exactly as of the pinned position."""
        return self.consistent or self.as_of is not None


def client_options(
    url: str,
    token: str | None,
    verify: bool | str,
    timeout: float,
    deadline: float,
    cert: Cert | None = None,
) -> ClientOptions:
    """The HTTP client options of a Spark task (picklable: executors rebuild the client from them)."""
    return ClientOptions(
        url, token=token, verify=verify, cert=cert, timeout=timeout, deadline=deadline, retry=TASK_RETRY
    )

"""What a Spark lookup asks for, as one typed object shared by ``lookup_join``, ``lookup_udf`` and
the planner (``clients.spark.plan``); and the HTTP client options every Spark task rebuilds."""

from __future__ import annotations

import dataclasses

from pyspark.sql.types import StructType

from clients.lookup import DEFAULT_CACHE_BYTES
from clients.options import DEFAULT_BATCH_SIZE, ClientOptions
from clients.retry import RetryPolicy
from wire.position import PositionLike

TASK_RETRY = RetryPolicy(max_backoff=5.0)
"""Retries of a Spark task's requests: short backoffs, Spark retries the task itself after that."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LookupOptions:
    """One lookup of ``store``: where the service is, what to read, how exactly, and how to batch.

    ``url`` and ``token`` default to the session's Spark conf (``clients.spark.plan.connection``).
    ``consistent`` (or an explicit ``as_of``) makes every read exactly as of the pinned position;
    otherwise reads demand at least it (and ``min_position``, when given). ``index`` makes the
    lookup one-to-many through that index.
    """

    store: str
    url: str | None = None
    value_schema: str | StructType | None = None
    token: str | None = dataclasses.field(default=None, repr=False)
    verify: bool | str = True
    min_position: PositionLike | None = None
    consistent: bool = False
    as_of: PositionLike | None = None
    index: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    timeout: float = 30.0
    deadline: float = 300.0
    planning_deadline: float = 10.0
    cache_bytes: int = DEFAULT_CACHE_BYTES

    def __post_init__(self) -> None:
        if self.as_of is not None and self.min_position is not None:
            raise ValueError("pass as_of= or min_position=, not both: as_of pins the exact position")
        if not isinstance(self.verify, bool | str):
            raise TypeError(
                "verify must be True/False or a CA bundle path: tasks rebuild the client on executors"
            )

    @property
    def exact(self) -> bool:
        """Every read is exactly as of the pinned position."""
        return self.consistent or self.as_of is not None


def client_options(
    url: str, token: str | None, verify: bool | str, timeout: float, deadline: float
) -> ClientOptions:
    """The HTTP client options of a Spark task (picklable: executors rebuild the client from them)."""
    return ClientOptions(
        url, token=token, verify=verify, timeout=timeout, deadline=deadline, retry=TASK_RETRY
    )

"""statestore clients: an HTTP client (sync and asyncio) and, in ``clients.spark``, PySpark lookup joins.

Needs only httpx and pyarrow (``pip install 'statestore[client]'``)::

    from clients import StatestoreClient

    with StatestoreClient("http://127.0.0.1:8080") as client:
        client.get("products", "p1")                 # {'name': 'Pen', ...} or None
        client.get_many("products", ["p1", "p2"])    # Arrow batches, deduped, request order
        products = client.pinned("products")         # every read demands today's position
        for key, value in products.scan("p"):
            ...
"""

from clients.aio import AsyncPinnedStore, AsyncStatestoreClient
from clients.client import PinnedStore, StatestoreClient
from clients.exceptions import (
    BadRequestError,
    DeadlineExceededError,
    ForbiddenError,
    PayloadTooLargeError,
    PositionNotReachedError,
    ProblemError,
    ServiceUnavailableError,
    StatestoreClientError,
    StoreNotReadyError,
    TooManyRequestsError,
    TransportError,
    UnauthorizedError,
    UnknownStoreError,
)
from clients.options import ClientOptions
from clients.position import Position
from clients.retry import RetryPolicy
from clients.wire import StoreInfo

__all__ = [
    "AsyncPinnedStore",
    "AsyncStatestoreClient",
    "BadRequestError",
    "ClientOptions",
    "DeadlineExceededError",
    "ForbiddenError",
    "PayloadTooLargeError",
    "PinnedStore",
    "Position",
    "PositionNotReachedError",
    "ProblemError",
    "RetryPolicy",
    "ServiceUnavailableError",
    "StatestoreClient",
    "StatestoreClientError",
    "StoreInfo",
    "StoreNotReadyError",
    "TooManyRequestsError",
    "TransportError",
    "UnauthorizedError",
    "UnknownStoreError",
]

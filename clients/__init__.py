"""statestore clients: an HTTP client (sync and asyncio) and, in ``clients.spark``, PySpark lookup joins.

Needs only httpx and pyarrow (``pip install 'statestore[client]'``)::

    from clients import StatestoreClient

    with StatestoreClient("http://127.0.0.1:8080") as client:
        client.get("products", "p1")                 # {'name': 'Pen', ...} or None
        client.get_many("products", ["p1", "p2"])    # Arrow batches, deduped, request order
        products = client.pinned("products")         # every read demands today's position
        for key, value in products.scan("p"):
            ...
        client.index_get_many("positions", "by_ticker", ["AAPL", "MSFT"])  # {value: [(key, row), ...]}
        tickers = client.consistent("tickers")       # every read exactly as of today's position
        tickers.get("AAPL")                          # the same answer on every replica, every retry
"""

from clients.aio import AsyncConsistentStore, AsyncPinnedStore, AsyncStatestoreClient
from clients.client import ConsistentStore, PinnedStore, StatestoreClient
from clients.exceptions import (
    BadRequestError,
    ClientTooManyRequestsError,
    DeadlineExceededError,
    ForbiddenError,
    HistoryExpiredError,
    HistoryNotKeptError,
    IndexNotReadyError,
    PayloadTooLargeError,
    PositionNotReachedError,
    ProblemError,
    ServiceUnavailableError,
    StatestoreClientError,
    StoreCorruptError,
    StoreNotReadyError,
    TooManyRequestsError,
    TransportError,
    UnauthorizedError,
    UnknownIndexError,
    UnknownStoreError,
)
from clients.options import ClientOptions
from clients.retry import RetryPolicy
from clients.version import __version__
from clients.wire import StoreInfo
from wire.position import Position

__all__ = [
    "AsyncConsistentStore",
    "AsyncPinnedStore",
    "AsyncStatestoreClient",
    "BadRequestError",
    "ClientOptions",
    "ClientTooManyRequestsError",
    "ConsistentStore",
    "DeadlineExceededError",
    "ForbiddenError",
    "HistoryExpiredError",
    "HistoryNotKeptError",
    "IndexNotReadyError",
    "PayloadTooLargeError",
    "PinnedStore",
    "Position",
    "PositionNotReachedError",
    "ProblemError",
    "RetryPolicy",
    "ServiceUnavailableError",
    "StatestoreClient",
    "StatestoreClientError",
    "StoreCorruptError",
    "StoreInfo",
    "StoreNotReadyError",
    "TooManyRequestsError",
    "TransportError",
    "UnauthorizedError",
    "UnknownIndexError",
    "UnknownStoreError",
    "__version__",
]
